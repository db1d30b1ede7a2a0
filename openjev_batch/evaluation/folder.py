"""An eval's output folder: which files eval writes there, what it refuses to write over, and what
identifies the job it holds (eval_job.json; the finished predictions' manifest), so `--resume` continues
or re-scores that job only and a second eval is refused before anything is written."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..config import check_not_input
from ..errors import ConfigError
from ..pipeline.loop import job_manifest
from ..pipeline.output import manifest as output_manifest
from ..values import sha256_file

if TYPE_CHECKING:
    from .run import EvalConfig

QUESTIONS, PREDICTIONS, JOB = "questions.jsonl", "predictions.parquet", "eval_job.json"
WRITES = (
    QUESTIONS, f"{QUESTIONS}.tmp", JOB, f"{JOB}.tmp", PREDICTIONS, f"{PREDICTIONS}.tmp", f"{PREDICTIONS}.partial",
    f"{PREDICTIONS}.lock", "report.json", "report.md", "reliability.png",
)  # fmt: skip


def claim(out_dir: Path, cfg: EvalConfig) -> None:
    """Refuse a benchmark or dev file that eval would write over, and a non-empty output folder unless
    --force (its files are replaced) or --resume of the eval job it holds."""
    for what, path in (("the benchmark file", cfg.input), ("the --dev file", cfg.dev)):
        for name in WRITES:  # hostile trial, issue 25: `eval DIR/questions.jsonl -o DIR` wrote over it
            try:
                check_not_input(out_dir / name, path, what)
            except ValueError:
                raise ConfigError(
                    f"eval: {what} {path} is {out_dir / name}, a file eval writes; copy it out of {out_dir} "
                    "or choose another -o"
                ) from None
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"eval: {out_dir} is a file, not a folder")
    names = {p.name for p in out_dir.iterdir()} if out_dir.is_dir() else set()
    if names and not (cfg.force or cfg.resume):
        raise ConfigError(
            f"eval: {out_dir} is not empty; pass --force to overwrite it or --resume to continue its job"
        )
    # an eval job: its questions, with its predictions (finished or partial) or nothing else yet (a job
    # stopped before its first part); --resume elsewhere would write over the folder's reports (issue 25)
    job = QUESTIONS in names and bool({PREDICTIONS, f"{PREDICTIONS}.partial"} & names or names == {QUESTIONS})
    if names and cfg.resume and not job:
        raise ConfigError(
            f"eval --resume: {out_dir} holds no eval job to continue (no {QUESTIONS} with {PREDICTIONS} or "
            "its .partial); pass --force to overwrite its files, or use an empty folder"
        )
    out_dir.mkdir(parents=True, exist_ok=True)


def jsonl_line(row: dict[str, Any]) -> str:
    """One questions.jsonl line: UTF-8 text as it is, but a lone surrogate (undecodable benchmark text) as a
    JSON escape, so the file can be written and the job's row checks name the row and field (hostile trial:
    a UnicodeEncodeError traceback and a stray .tmp)."""
    line = json.dumps(row, ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = json.dumps(row)
    return line + "\n"


def write_if_changed(path: Path, text: str) -> bool:
    """Write `text` unless the file already holds it (its mtime is part of the job's resume key)."""
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return False
    tmp = path.with_name(path.name + ".tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True


def job_key(cfg: EvalConfig, fmt: str) -> dict[str, Any]:
    """What makes an eval's numbers (eval_job.json): the benchmark and dev files by content, how they are
    sampled and prompted, the model, the backend and the engine options that change the numbers. The
    temperature-fit share is not in it: --resume --calibrate re-scores a finished job."""
    return {
        "input sha256": sha256_file(Path(cfg.input)),
        "format": fmt,
        "sample": cfg.sample,
        "seed": cfg.seed,
        "limit": cfg.limit,
        "shots": cfg.shots,
        "dev sha256": sha256_file(Path(cfg.dev)) if cfg.dev else None,
        "system_prompt sha256": None
        if cfg.system_prompt is None
        else hashlib.sha256(cfg.system_prompt.strip().encode()).hexdigest(),
        "model": cfg.model,
        "backend": cfg.backend,
        **cfg.resume_key(),
    }


def _shown(v: Any) -> str:
    """A job key's value in a refusal: an option left out is None there; say so, not Python's `None`."""
    return "not given" if v is None else repr(v)


def refuse_another_job(out_dir: Path, key: dict[str, Any], text: str) -> None:
    """--resume continues or re-scores the folder's own job only (as `run --resume`): another --sample,
    seed, shots, format, model or engine setting would be reported under the old job's predictions, or
    recompute and overwrite them (hostile trial, issue 26). Raises ConfigError naming what changed; checked
    before anything in the folder is written."""
    old: dict[str, Any] = {}  # empty: no earlier job recorded
    if (out_dir / JOB).exists():
        old = json.loads((out_dir / JOB).read_text(encoding="utf-8")) or {}
    elif (out_dir / "report.json").exists():  # a folder from before eval_job.json: what its report records
        rep = json.loads((out_dir / "report.json").read_text(encoding="utf-8"))
        d, r = rep.get("dataset", {}), rep.get("run", {})
        old = {"input sha256": d.get("sha256"), "model": r.get("model_path"), "backend": r.get("backend")}
        old |= {k: d[k] for k in ("format", "sample", "seed", "shots") if k in d}
    diff = sorted(k for k in old if old[k] != key.get(k))
    if (
        not diff
        and (out_dir / QUESTIONS).exists()
        and (out_dir / QUESTIONS).read_text(encoding="utf-8") != text
    ):
        diff = [QUESTIONS]
    if diff:
        changes = "; ".join(
            f"{k}: {_shown(old[k])} → {_shown(key.get(k))}" if old and k in old else k for k in diff
        )
        raise ConfigError(
            f"eval --resume: {out_dir} holds another job (differs in {changes}); --resume continues the "
            "same job: pass --force to run this one there, or choose another -o"
        )


def refuse_other_predictions(predictions: Path, job) -> None:
    """Finished predictions are re-scored only when their manifest (pipeline/output/manifest.py) is this
    job's: it names the model by content, eval_job.json by path (weights swapped under it are refused)."""
    doc = output_manifest.read(predictions)
    if doc is not None and (diff := output_manifest.differences(doc["manifest"], job_manifest(job))):
        raise ConfigError(
            f"eval --resume: {predictions} was made by another job (differs in {', '.join(diff)}); --resume "
            "continues the same job: pass --force to run this one there, or choose another -o"
        )
