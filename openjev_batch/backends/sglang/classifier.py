"""`sglang` classifier: `sglang.Engine(is_embedding=True)` in-process, prefix KV shared over the radix cache.

- **Requests.** Token ids (the ones the planner counted) go in as `EmbeddingReqInput(input_ids=…)` through
  the engine's tokenizer manager, exactly as `Engine.encode` sends text; each answer is
  ``{"embedding": [raw logits], "meta_info": {"prompt_tokens", …}}`` (no `cached_tokens` for embeddings).
- **N+1.** Per window, each prefix shared by two or more rows (e.g. one premise, many hypotheses) is sent
  once first, so it is in the radix cache when its rows run; then every row in one call.
- **Bias-free heads.** sglang 0.5.17–0.5.19 build the Qwen2/Qwen3 classification head with a bias that no
  transformers checkpoint has, left at its random initial value (sgl-project/sglang#38768, fix #38777
  open). `SGLANG_EXTERNAL_MODEL_PACKAGE=openjev_batch.backends.sglang.heads` is set while the engine starts (and
  only then: other engines in this process keep the built-in classes), and start-up checks that the
  scheduler really built our class: sglang only *warns* when an external module fails to import.
- **Qwen3.5.** The engine is told the checkpoint is `Qwen3_5ForConditionalGeneration` or
  `Qwen3_5MoeForConditionalGeneration` (sglang's multimodal Qwen3.5 path) and our classifier is registered
  under that name; `enable_multimodal=False` (unless `--engine-arg enable_multimodal=…`), so a checkpoint
  without `preprocessor_config.json` starts (sglang otherwise loads an image processor for a multimodal
  config). GPU only; not run here.
"""

from __future__ import annotations

import importlib
import json
from typing import Any

from ...checkpoint.classifier import Checkpoint, read_checkpoint
from ...core import BranchResult, Window
from ...errors import BackendError, EngineDied
from ..base import Backend, BackendOptions, load_tokenizer
from . import images as sg_images
from . import signals as sglang_signals
from .heads import HEAD_VERSION, MARKER, OVERRIDES, PACKAGE, TEXT_ONLY
from .kwargs import EngineKwargs, import_sglang, text_only
from .kwargs import engine_kwargs as engine_kwargs_base
from .scheduler_patch import engine_class


def check_head(reply: Any, ckpt: Checkpoint, why_not: str = "") -> None:
    """Raise BackendError unless `reply` (the engine's answer to `get_weights_by_name(MARKER)`, one per
    data-parallel rank when dp > 1) says our bias-free head with the checkpoint's label count is loaded."""
    want = [HEAD_VERSION, 0.0, float(len(ckpt.labels))]
    replies = reply if reply and isinstance(reply[0], list) else [reply]
    if all(r is not None and [float(x) for x in r] == want for r in replies):
        return
    raise BackendError(
        f"the bias-free classification head for {ckpt.architecture} did not load in the sglang scheduler "
        f"(probe answered {reply!r}, expected {want}){': ' + why_not if why_not else ''}. sglang's built-in "
        "class keeps a randomly initialised score bias (sgl-project/sglang#38768), so its logits would be "
        f"wrong; check that {PACKAGE} imports where sglang runs"
    )


def _import_error(submodule: str) -> str:
    """Why our override module does not import here (the scheduler hides it in a warning), or ''."""
    try:
        importlib.import_module(f"{PACKAGE}.{submodule}")
    except Exception as e:
        return f"importing {PACKAGE}.{submodule} fails with {type(e).__name__}: {e}"
    return ""


def engine_kwargs(opts: BackendOptions, ckpt: Checkpoint, multimodal: bool = False) -> EngineKwargs:
    """`sglang.Engine` arguments for a classifier: is_embedding, CPU defaults, user options, engine args, and
    for an overridden architecture whose engine name differs (Qwen3.5) the `architectures` override; for a
    text-only one (Qwen3.5) `enable_multimodal=False` unless the user set it or the engine is to take images
    (`multimodal`: then the vision attention and the deepstack override of images.multimodal_kwargs)."""
    kw = engine_kwargs_base(opts, is_embedding=True)
    if ckpt.architecture in TEXT_ONLY and not multimodal:
        text_only(kw, opts)
    override = OVERRIDES.get(ckpt.architecture)
    if override and override[2]:
        extra = kw.get("json_model_override_args") or {}
        extra = json.loads(extra) if isinstance(extra, str) else dict(extra)
        kw["json_model_override_args"] = json.dumps({**extra, "architectures": [override[2]]})
    return kw


class SGLangClassifier(Backend):
    name = "sglang"
    kind = "classifier-head"
    warm_prefixes = True  # N+1 warm-up of shared prefixes (off: --skip-prefix-warmup, benchmarks' baseline)

    def __init__(self, opts: BackendOptions):
        opts.check_backend("sglang")  # ConfigError naming an hf option given here
        ckpt = read_checkpoint(opts.model)  # refuse a checkpoint before the engine starts
        import_sglang()  # says how to get sglang when it is missing
        self.labels = ckpt.labels
        from ..hf.vision import is_vision_checkpoint  # lazy: torch (hf/vision.py)

        # images as the label readout's engine takes them (images.py): multimodal when the job's input has
        # image rows (or --engine-arg enable_multimodal=true), text only otherwise
        vision = is_vision_checkpoint(opts.model, opts.trust_remote_code)
        asked = opts.sglang.engine_args.get("enable_multimodal")
        multimodal = sg_images.starts_multimodal(ckpt.architecture, vision, asked, opts.images)
        if ckpt.architecture in TEXT_ONLY and opts.images is None and asked is None:
            multimodal = False  # a held-open Qwen3.5 classifier not told of images: text only, as before
        kw = engine_kwargs(opts, ckpt, multimodal)
        self.vision_attention = sg_images.multimodal_kwargs(opts, kw) if multimodal else ""
        override = OVERRIDES.get(ckpt.architecture)
        self.tokenizer = load_tokenizer(opts.model, opts.trust_remote_code)  # BackendError naming the option

        # engine_class("none"): sglang's Engine whose scheduler reports its failure to the error file (the
        # parent's one-line message names it) and installs none of the label-logprob patches
        self.engine, self._error_file = sglang_signals.start_engine(
            lambda **kw: engine_class("none")(**kw), kw, opts, external_package=PACKAGE if override else None
        )
        try:
            from sglang.srt.managers.io_struct import EmbeddingReqInput

            self._req = EmbeddingReqInput
            if override:
                check_head(self.engine.get_weights_by_name(MARKER), ckpt)
            # One token through the engine: a checkpoint that sglang loads as something other than a
            # classifier (e.g. a fallback class) answers with hidden states, not one logit per label.
            (probe,) = self._encode([[self.tokenizer.eos_token_id or 0]])
            if len(probe.get("embedding") or []) != len(self.labels):
                raise BackendError(
                    f"sglang loaded {ckpt.architecture} as a model that returns "
                    f"{len(probe.get('embedding') or [])} values, not one logit per label ({len(self.labels)})"
                )
            info = self.engine.get_server_info()
        except BackendError as e:
            why = _import_error(override[0]) if override and "did not load" in str(e) else ""
            self.close()
            if why:
                raise BackendError(f"{e} ({why})") from e
            raise
        self.images, self.no_images = sg_images.for_engine(opts, kw, vision) if vision else (None, None)
        # the run summary's start-up line: the attention kernel where sglang's own is missing here, and whether
        # the engine takes images, with which vision attention
        words = (kw.attention, f"multimodal, {self.vision_attention}" if self.vision_attention else "")
        self.startup = "; ".join(w for w in words if w)
        self._capacity = int(info.get("max_total_num_tokens") or 0) or None
        self.context_length = int(info.get("max_req_input_len") or 0) or opts.context_length

    def configure(self, opts) -> None:
        self.warm_prefixes = not opts.sglang.skip_prefix_warmup

    def kv_budget_tokens(self) -> int:
        # Leave room for the running batch's activations and radix-tree fragmentation.
        return int(self._capacity * 0.8) if self._capacity else 1 << 17

    def _encode(self, ids: list[list[int]], items: list | None = None) -> list[dict]:
        """Raw logits of each request; `items`: per request, its images' processor output or None."""
        req = self._req(input_ids=ids)
        if items is not None and (data := sg_images.image_data(items)) is not None:
            req = self._req(input_ids=ids, image_data=data)
        try:
            gen = self.engine.tokenizer_manager.generate_request(req, None)
            with sglang_signals.waiting_on_engine():
                outs = self.engine.loop.run_until_complete(gen.__anext__())
        except EngineDied as e:
            raise BackendError(f"the sglang engine died: {e}") from None
        except Exception as e:
            raise BackendError(f"sglang engine failed: {type(e).__name__}: {e}") from e
        return outs if isinstance(outs, list) else [outs]

    def prefill(self, window: Window) -> list[list[BranchResult]]:
        """One branch per row: its raw logits. Shared prefixes are warmed first (N+1). A row with images carries
        them in each of its requests (images.py: the processor output beside the product's ids); a bad image,
        or an engine started text only, is that row's error naming why, so no image is silently dropped."""
        results, todo = self.one_branch_rows(window)
        rows = window.rows
        if any(rows[i].images for i, _ in todo):
            if self.images is None:
                why = self.no_images or "the sglang classifier engine takes no images"
                errors = {i: f"row {rows[i].row_id}: image: {why}" for i, _ in todo if rows[i].images}
            else:
                errors = {i: e for i, e in self.images.prepare(rows).items() if results[i] is None}
            for i, err in errors.items():
                results[i] = [BranchResult((), len(rows[i].prefix) + len(rows[i].branches[0].suffix), 0, err)]
            todo = [(i, ids) for i, ids in todo if i not in errors]
        images = self.images
        item = (lambda r: images.item(r) if r.images else None) if images else (lambda r: None)
        # N+1, step 1: each prefix (and its images) that two or more rows share, once (rows are prefix-sorted).
        counts: dict[tuple, tuple[int, int]] = {}
        for i, ids in todo:
            rp = rows[i]
            if 0 < len(rp.prefix) < len(ids):
                key = sg_images.prefix_key(rp)
                counts[key] = (counts.get(key, (0, i))[0] + 1, i)
        warm = [i for c, i in counts.values() if c >= 2] if self.warm_prefixes else []
        if warm:
            outs = self._encode([list(rows[i].prefix) for i in warm], [item(rows[i]) for i in warm])
            for o in outs:
                self.warm_tokens += int(o.get("meta_info", {}).get("prompt_tokens", 0))
        # Step 2: every row in one call; the radix cache serves the warmed prefixes.
        if todo:
            outs = self._encode([list(ids) for _, ids in todo], [item(rows[i]) for i, _ in todo])
            for (i, ids), o in zip(todo, outs, strict=True):
                n = int(o.get("meta_info", {}).get("prompt_tokens", len(ids)))
                results[i] = [BranchResult(tuple(float(v) for v in o.get("embedding") or []), n, 0)]
        return results  # type: ignore[return-value]

    def check_alive(self) -> None:
        """A one-token request; raises BackendError when the engine no longer answers."""
        self._encode([[self.tokenizer.eos_token_id or 0]])

    def close(self) -> None:
        eng, self.engine = getattr(self, "engine", None), None
        sglang_signals.stop_engine(eng, getattr(self, "_error_file", None))
