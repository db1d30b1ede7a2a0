"""What a multimodal sglang engine is started with: whether it starts multimodal at all (`starts_multimodal`), the
deepstack override that keeps sglang's vision tower and its language model agreeing (`vision_overrides`), and the
vision attention kernel, one that exists here (`choose_vision_attention`); `multimodal_kwargs` sets both in the
engine arguments. `died_on_images` says what to try when such an engine fails on image rows. The rows' images
themselves are images.py's."""

from __future__ import annotations

from typing import Any

from ...checkpoint.info import load_config
from ...errors import BackendError
from .attention import cuda_capability, fa3_imports
from .mis import FORK_ARCHITECTURES


def starts_multimodal(architecture: str, vision: bool, asked: Any = None, job_images: bool | None = None) -> bool:
    """Whether an engine for this checkpoint starts multimodal (takes image rows). `asked`: the user's
    `--engine-arg enable_multimodal`, which wins. `job_images`: whether the job's input has image rows, as the
    product read it before the engine started (`pipeline.job.choose_images`; None: not known, e.g. a Python
    `Classifier` opened without `images=`). A checkpoint without an image processor never starts multimodal
    unless asked (sglang failed loading one: OSError, 0.5.17).

    - Images in the job: multimodal, so the default command answers them (issue 41).
    - No images in the job: text only. A Qwen3.5/3.6 hybrid keeps the GDN fork (multi-item), shown exact on a
      text-only engine only (docs/benchmarks.md, runs 10-11); any other checkpoint skips loading the processor.
    - Not known: a dense VL checkpoint starts multimodal, a Qwen3.5/3.6 hybrid text only (its text jobs keep the
      fork; its image rows are then row errors saying how to start one that takes them)."""
    if asked is not None:
        return bool(asked)
    if not vision:
        return False
    if job_images is not None:
        return bool(job_images)
    return architecture not in FORK_ARCHITECTURES


# sglang's Qwen3-VL vision config defaults `deepstack_visual_indexes` to [8, 16, 24] (0.5.17 and 0.5.19,
# `srt/configs/qwen3_vl.py` Qwen3VLVisionConfig), and its Qwen3.5 vision config inherits that default
# (`srt/configs/qwen3_5.py`). Qwen3.5/3.6 have no deepstack: transformers' Qwen3_5VisionConfig deletes the field,
# so a Qwen3.5 checkpoint that transformers saved (a fine-tune built from a config, benchmarks/images_gpu.py's
# random one) has none, while the released ones spell out `"deepstack_visual_indexes": []`. Read with the
# default, sglang's tower (depth < 9) captures no deepstack layer, so its output is `hidden` wide; the model then
# splits it as 1 + 3 deepstack slices (`Qwen3VLForConditionalGeneration.separate_deepstack_embeds`: 1024 % 4 == 0
# passes its check), the deepstack slice is 0 wide, and `embed_mm_inputs`' masked_scatter_ of that empty source
# over the image positions is the CUDA device-side assertion of issue 41
# (`masked_scatter_size_check: totalElements <= srcSize`; on the CPU engine a RuntimeError). No upstream issue
# found; the engine is given the indexes transformers' model really uses (`json_model_override_args`, which
# sglang ≥ 0.5.17 merges into the vision sub-config).
DEEPSTACK_FAMILIES = {"qwen3_vl": False, "qwen3_vl_moe": False, "qwen3_5": True, "qwen3_5_moe": True}
SGLANG_DEEPSTACK_DEFAULT = [8, 16, 24]


def deepstack_indexes(cfg: dict[str, Any]) -> tuple[list[int], list[int]] | None:
    """(the deepstack layers sglang's vision tower reads from `cfg`, the ones transformers' model uses) for a
    Qwen3-VL / Qwen3.5 family config (None for another): transformers' Qwen3.5 has none; its Qwen3-VL captures
    the listed layers that exist (index < depth). Pure."""
    vision = cfg.get("vision_config") or {}
    no_deepstack = DEEPSTACK_FAMILIES.get(str(cfg.get("model_type")))
    if no_deepstack is None or not isinstance(vision, dict):
        return None
    read = vision.get("deepstack_visual_indexes")
    read = list(SGLANG_DEEPSTACK_DEFAULT if read is None else read)
    depth = int(vision.get("depth") or 0)
    used = [] if no_deepstack else [i for i in read if 0 <= int(i) < depth]
    return read, used


def vision_overrides(cfg: dict[str, Any], given: Any = None) -> dict[str, Any]:
    """The `json_model_override_args` (merged into `given`, the user's, a dict or JSON text) that make sglang's
    vision tower emit what its language model splits: `vision_config.deepstack_visual_indexes` as transformers
    uses them, where sglang would read others (see DEEPSTACK_FAMILIES). {} when nothing changes. Raises
    BackendError when the user's own override names deepstack layers the tower lacks (the engine would die
    of a device-side assertion at the first image)."""
    import json

    base = json.loads(given) if isinstance(given, str) else dict(given or {})
    found = deepstack_indexes(cfg)
    if found is None:
        return {}
    read, used = found
    mine = (base.get("vision_config") or {}).get("deepstack_visual_indexes")
    if mine is not None:
        depth = int((cfg.get("vision_config") or {}).get("depth") or 0)
        if any(not 0 <= int(i) < depth for i in mine):
            raise BackendError(
                f"json_model_override_args sets vision_config.deepstack_visual_indexes={mine}, but the vision tower "
                f"has {depth} layers: sglang would split image features it never makes (a device-side assertion "
                "in its multimodal embedding scatter); give only layers below the depth, or [] for Qwen3.5/3.6"
            )
        return {}
    if read == used:
        return {}
    vision = {**(base.get("vision_config") or {}), "deepstack_visual_indexes": used}
    return {**base, "vision_config": vision}


# The vision tower's attention (`--engine-arg mm_attention_backend`). sglang 0.5.17 picks FlashAttention-3 on a
# Hopper card (fa4 on Blackwell) without checking that its kernels exist: a slim sgl_kernel (the kit's 0.4.5
# "slim" build has no `flash_ops`) dies at the first image batch with "ImportError: Can not import FA3 in
# sgl_kernel" (issue 41). `triton_attn` (sglang's Triton varlen prefill kernel) runs wherever Triton does.
VISION_ATTENTION_FALLBACK = "triton_attn"


def choose_vision_attention(device: str, capability: tuple[int, int] | None, given: Any, fa3_error) -> tuple:
    """(mm_attention_backend to set or None for sglang's own choice, the choice in words for the run summary).
    `capability`: the CUDA device's (major, minor); `given`: the user's engine arg; `fa3_error()`: None when
    FA3 imports, else why not (called only where sglang would take FA3)."""
    if given is not None:
        return None, f"vision attention {given} (--engine-arg)"
    if device != "cuda" or capability is None:
        return None, "vision attention: sglang's default for this device"
    if capability[0] == 9:  # sglang's default on Hopper: fa3
        why = fa3_error()
        if why is None:
            return "fa3", "vision attention fa3"
        return VISION_ATTENTION_FALLBACK, f"vision attention {VISION_ATTENTION_FALLBACK} (no FA3 in sgl_kernel: {why})"
    if capability[0] == 10 and capability[1] != 3:  # sglang's default on Blackwell: fa4, from its own package
        return VISION_ATTENTION_FALLBACK, f"vision attention {VISION_ATTENTION_FALLBACK} (fa4 not checked here)"
    return VISION_ATTENTION_FALLBACK, f"vision attention {VISION_ATTENTION_FALLBACK}"


def multimodal_kwargs(opts: Any, kw: dict[str, Any]) -> str:
    """Set in `kw` what a multimodal engine for `opts.model` needs (the vision attention, the deepstack
    override); returns the vision attention in words (the run summary's start-up). Raises BackendError for an
    override that would kill the engine."""
    cfg = load_config(opts.model) or {}
    over = vision_overrides(cfg, kw.get("json_model_override_args"))
    if over:
        import json

        kw["json_model_override_args"] = json.dumps(over)
    cap = cuda_capability() if kw.get("device") == "cuda" else None
    backend, words = choose_vision_attention(
        str(kw.get("device")), cap, opts.sglang.engine_args.get("mm_attention_backend"), fa3_imports
    )
    if backend is not None:
        kw["mm_attention_backend"] = backend
    return words


def died_on_images(vision_attention: str) -> str:
    """What a job error adds when the engine failed on a window with image rows: where sglang fails with images
    and what to try (the scheduler's own last line comes before it)."""
    return (
        f"it failed on a window with image rows ({vision_attention or 'multimodal engine'}). sglang fails there "
        "when its vision tower's features do not match what its model splits over the image tokens (a device-side "
        "assertion in embed_mm_inputs' scatter: e.g. deepstack layers the tower lacks, issue 41) or when the "
        "vision attention kernel is missing (--engine-arg mm_attention_backend=triton_attn); "
        "--engine-arg log_level=info shows sglang's traceback, --backend hf answers image rows"
    )
