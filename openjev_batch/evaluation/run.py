"""`openjev-batch eval`: benchmark file → the product's input → `run` (pipeline.run_job, on Ray with
`--ray`) → scored report.

Writes into the output folder: questions.jsonl (the product input), predictions.parquet (the product output,
one row per question, plus lm-eval-style per-sample columns `prediction` and `correct` next to the kept
`gold`/`category`), report.json, report.md, reliability.png. The classifier-head formats (nli,
text-classification: tasks.py) run the same job with readout `classifier-head` (the `classify` readout, its
default template) and are scored over the head's softmax `probs`. A non-empty folder is refused unless `force`
(start again) or `resume` (continue its unfinished job; questions.jsonl is kept when unchanged, so the
job's resume key still matches).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import Field, ValidationError, create_model, model_validator

from .._version import __version__
from ..backends import SPECS
from ..checkpoint.classifier import read_checkpoint
from ..config import build_config, validation_message
from ..errors import BackendError, ConfigError
from ..job_options import JobOptions
from ..options import EngineOptions
from ..pipeline.dry_run import dry_run as plan_only
from ..pipeline.dry_run import show_prompt as render
from ..pipeline.job import run_job
from ..pipeline.output.lock import refuse_if_held
from ..readouts import command_options, readout_class
from ..values import sha256_file
from .build import KEEP, build_rows, fewshot_blocks, prepare
from .folder import (
    JOB,
    PREDICTIONS,
    QUESTIONS,
    claim,
    job_key,
    jsonl_line,
    refuse_another_job,
    refuse_other_predictions,
    write_if_changed,
)
from .report import commit, hardware, write_reports
from .samples import log_samples, prompt_texts
from .tasks import CLASSIFIER_HEAD, LABEL_LOGPROBS, TASKS

# the readout options eval takes (a `Flag` whose `also` names eval: the system prompt, --debias-order), as fields
# of its config with their one declaration's default and bounds (checked again by the job's RunConfig)
_EVAL_OPTIONS = command_options("eval")
_ReadoutFields = create_model(
    "_ReadoutFields", **{name: (field.annotation, field) for name, (field, _) in _EVAL_OPTIONS.items()}
)  # type: ignore[call-overload]


class EvalConfig(EngineOptions, JobOptions, _ReadoutFields):  # type: ignore[misc, valid-type]
    """One eval (frozen, unknown keys are errors): the benchmark, how it is sampled and prompted, and the
    engine options, job options, readout options and model the job runs with (the fields of `run`, declared
    once: options.py, job_options.py, the readouts' `Options`). `limit` is lm-eval's: the first N questions
    (after --sample); `chunk_rows`, when not given, the format's readout's."""

    input: Path
    output_dir: Path
    model: str
    backend: str
    format: str = "auto"
    shots: int = Field(0, ge=0)
    dev: Path | None = None
    sample: int | None = Field(None, gt=0)
    seed: int = 42
    calibrate: float | None = Field(None, gt=0, lt=1)
    model_name: str | None = None  # as the user named it (a packaged name), for the report
    force: bool = False

    @model_validator(mode="after")
    def _force_or_resume(self) -> EvalConfig:
        if self.force and self.resume:
            raise ValueError("--force starts again, --resume continues: give one")
        return self

    def job(
        self, questions: Path, predictions: Path, resume: bool | None = None, readout: str = LABEL_LOGPROBS,
        rows: int = 0,
    ):  # fmt: skip
        """The RunConfig of the eval's job (`resume`: default the eval's; `readout`: its format's, tasks.py;
        `rows`: its questions, which set the chunk when --chunk-rows is not given: `eval_chunk_rows`).
        A classifier-head job reads `classify`'s default template (the system prompt, refused for its
        formats by build.refuse_for_classifier, is None). Raises ConfigError / BackendError as build_config
        does."""
        engine = {k: getattr(self, k) for k in EngineOptions.model_fields}
        # the job options as given; not `limit`: it cut the questions (`questions`), the job runs them all
        job = {k: getattr(self, k) for k in JobOptions.model_fields if k != "limit"}
        if job["chunk_rows"] is None and rows:
            job["chunk_rows"] = eval_chunk_rows(rows, readout_class(readout).chunk_rows)
        # an option at its default is left unset: a classifier-head job refuses a label-logprobs option given
        own = {k: v for k, (field, _) in _EVAL_OPTIONS.items() if (v := getattr(self, k)) != field.default}
        return build_config(
            input=questions, output=predictions, keep=KEEP, model=self.model, backend=self.backend,
            readout=readout, **{**job, "resume": self.resume if resume is None else resume}, **own, **engine,
        )  # fmt: skip


# eval's chunk when --chunk-rows is not given: a 20th of its questions, so a stop loses at most that much of
# the job (issue 48.11: `--sample 1000` was one 2,048-row chunk, and a stop after 4 of ~40 minutes kept nothing),
# at least EVAL_MIN_CHUNK (a chunk's plan and part file cost little beside 32 questions' prefill), at most the
# readout's own chunk. The same eval gets the same chunk, as --resume needs (it is in the job's resume key).
EVAL_CHUNKS, EVAL_MIN_CHUNK = 20, 32


def eval_chunk_rows(rows: int, readout_chunk: int) -> int:
    return min(readout_chunk, max(EVAL_MIN_CHUNK, -(-rows // EVAL_CHUNKS)))


def build_eval_config(**kw: Any) -> EvalConfig:
    """Validate options into an EvalConfig. Raises ConfigError naming each bad field."""
    try:
        return EvalConfig(**kw)
    except ValidationError as e:
        raise ConfigError("invalid options: " + validation_message(e)) from None


# what eval writes into its folder (with the store's OUT.partial / OUT.lock and the temporaries)
def questions(cfg: EvalConfig):
    """The benchmark read, sampled, limited and converted: (all items, chosen items, dev items, format,
    the text of questions.jsonl). Raises ConfigError as `prepare`."""
    items, chosen, dev_items, fmt = prepare(
        cfg.input, cfg.format, cfg.shots, cfg.dev, cfg.sample, cfg.seed,
        labels=lambda: model_labels(cfg.model), system_prompt=cfg.system_prompt,
    )  # fmt: skip
    chosen = chosen[: cfg.limit] if cfg.limit else chosen
    blocks = fewshot_blocks({it.category for it in chosen}, dev_items, cfg.shots)
    text = "".join(jsonl_line(r) for r in build_rows(chosen, blocks))
    return items, chosen, dev_items, fmt, text


def model_labels(model: str) -> tuple[str, ...]:
    """The classifier's labels from its config.json (no weights). Raises ValueError (prepare's ConfigError)
    for a checkpoint that is no sequence classifier or has no usable id2label."""
    try:
        return read_checkpoint(model).labels
    except BackendError as e:
        raise ValueError(f"it is scored by a classifier head, and {e}") from None


def readout_of(fmt: str) -> str:
    """The readout that answers format `fmt` (tasks.Task.readout)."""
    return TASKS[fmt].readout


def show_prompt(cfg: EvalConfig, n: int) -> str:
    """What the model gets for the first `n` questions of the eval (`eval --show-prompt`), as `run
    --show-prompt` prints it; tokenizer only, nothing written to the output folder."""
    return _tokenizer_only(
        cfg, lambda job: render(job, n) if job.readout != CLASSIFIER_HEAD else _texts(job, n)
    )


def _texts(job, n: int) -> str:
    """A classifier-head job's first `n` prompts, decoded from the ids it sends (samples.prompt_texts)."""
    prompts, _ = prompt_texts(job.model_copy(update={"limit": min(n, job.limit or n)}))
    return "".join(f"═══ row {rid} ═══\n{text}\n" for (rid, _), text in prompts.items())


def dry_run(cfg: EvalConfig):
    """`eval --dry-run`: the eval's job planned as `run --dry-run` plans one (pipeline.dry_run.PlanSummary);
    tokenizer only, nothing written to the output folder."""
    return _tokenizer_only(cfg, plan_only)


def _tokenizer_only(cfg: EvalConfig, use: Callable[[Any], Any]) -> Any:
    """`use(the eval's RunConfig)` over its questions.jsonl written to a temporary folder, not the output's."""
    import tempfile

    _, _, _, fmt, text = questions(cfg)
    with tempfile.TemporaryDirectory(prefix="openjev-eval-") as tmp:
        q = Path(tmp) / QUESTIONS
        q.write_text(text, encoding="utf-8")
        return use(cfg.job(q, Path(tmp) / PREDICTIONS, readout=readout_of(fmt), rows=text.count("\n")))


def run_eval(
    cfg: EvalConfig,
    backend=None,
    on_progress: Callable[[int, int], None] | None = None,
    progress=None,
    ray=None,
) -> dict[str, Any]:
    """Convert `cfg.input`, run the job, score. `backend` may be passed in (tests) and is not closed here;
    `on_progress` and `progress` (pipeline/progress.Progress) as for `run_job`; `ray` (a
    pipeline.runners.ray.RayOptions): the job runs on Ray (`eval --ray`), the same predictions.
    Returns the report. Raises ConfigError for bad benchmark data, options or a non-empty folder, other
    OpenjevErrors from the job."""
    if ray is not None and backend is not None:
        raise ConfigError("eval on Ray starts its backends in the engine actors: pass no backend")
    t0 = time.perf_counter()
    code = commit()  # the code that runs, read before a long run (the tree may change meanwhile)
    out_dir = Path(cfg.output_dir)
    items, chosen, dev_items, fmt, text = questions(cfg)
    blocks = fewshot_blocks({it.category for it in chosen}, dev_items, cfg.shots)
    qpath, ppath = out_dir / QUESTIONS, out_dir / PREDICTIONS
    claim(out_dir, cfg)
    # the job's option checks (--system-prompt's size …) before a file is written
    job = cfg.job(qpath, ppath, readout=readout_of(fmt), rows=len(chosen))
    refuse_if_held(ppath)  # a running eval's questions are not rewritten by a second one it refuses
    key = job_key(cfg, fmt)
    finished = ppath.exists() and not ppath.with_name(ppath.name + ".partial").exists()
    if cfg.resume:
        refuse_another_job(out_dir, key, text)
        if finished:
            refuse_other_predictions(ppath, job)
    changed = write_if_changed(qpath, text)
    write_if_changed(out_dir / JOB, json.dumps(key, indent=1, sort_keys=True) + "\n")
    if cfg.resume and finished:
        if not changed and (out_dir / "report.json").exists():
            log_samples(ppath)
            return rescore(out_dir, cfg.calibrate)  # nothing left to run: the finished job, scored again
        # no report (a kill after the join): run it again
        job = cfg.job(qpath, ppath, resume=False, readout=readout_of(fmt), rows=len(chosen))
    s = run_job(job, backend=backend, on_progress=on_progress, progress=progress, ray=ray)
    prompts, tokenization = prompt_texts(job, getattr(backend, "tokenizer", None))
    log_samples(ppath, prompts)
    device = getattr(backend, "device", None) or job.device
    run = _run_record(cfg, job, s, device, t0, code, tokenization)
    return write_reports(out_dir, run, _dataset_record(cfg, fmt, items, dev_items, blocks))


def _dataset_record(cfg: EvalConfig, fmt: str, items: list, dev_items: list | None, blocks: dict) -> dict:
    """report.json's `dataset`: the benchmark file by content, how it was sampled, the few-shot categories
    short of examples; for a classifier-head format the model's labels (the names of the gold indices)."""
    shots_used = {c: sum(d.category == c for d in dev_items or []) for c in blocks} if cfg.shots else {}
    return {
        "input": str(cfg.input),
        "sha256": sha256_file(Path(cfg.input)),
        "format": fmt,
        "rows_in_file": len(items),
        "sample": cfg.sample,
        "limit": cfg.limit,
        "seed": cfg.seed,
        "shots": cfg.shots,
        "dev": str(cfg.dev) if cfg.dev else None,
        "shots_short": sorted(c for c, n in shots_used.items() if n < cfg.shots),
        "calibrate": cfg.calibrate,
        **({"debias_order": cfg.debias_order} if cfg.debias_order > 1 else {}),  # older reports: not set
        "labels": list(items[0].options) if readout_of(fmt) == CLASSIFIER_HEAD else None,
    }


def _run_record(
    cfg: EvalConfig, job, s, device: str, t0: float, code: str | None, tokenization: str
) -> dict[str, Any]:
    """What ran: model, backend, device, dtype, hardware, date, wall times, version, commit, the prompt's
    tokenization (a result reproduces only under the same one), tokens."""
    if device == "auto":
        device = SPECS[job.backend].device(job)
    return {
        "model": cfg.model_name or job.model,
        "model_path": job.model,
        "backend": job.backend,
        "device": device,
        "dtype": job.dtype if job.dtype != "auto" else ("float32" if device == "cpu" else "bfloat16"),
        "hardware": hardware(device),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "run_wall_s": s.wall_s,
        "total_wall_s": time.perf_counter() - t0,
        "openjev_batch": __version__,
        "commit": code,
        "tokenization": tokenization,
        "branch_tokens": s.branch_tokens,
        "computed_tokens": s.computed_tokens,
        "cache_hit_rate": s.cache_hit_rate,
        "load_average_end": os.getloadavg(),  # 1/5/15 min: other work on the machine inflates wall time
    }


def rescore(out_dir: str | Path, calibrate: float | None = None) -> dict[str, Any]:
    """Re-score a finished eval folder (no model): its predictions.parquet with the run/dataset records of its
    report.json; `calibrate` overrides the temperature-fit share."""
    old = json.loads((Path(out_dir) / "report.json").read_text())
    dataset = {"calibrate": (old.get("temperature") or {}).get("fit_share"), **old["dataset"]}
    if calibrate is not None:
        dataset["calibrate"] = calibrate
    return write_reports(out_dir, old["run"], dataset)
