"""Benchmark evaluation (`openjev-batch eval`): benchmark rows → the product's input → `run_job` → report.

Nothing here prompts or prefills: benchmark rows become ordinary input rows (one question each) and the
normal job answers them; this module only converts, samples and scores.

Formats (detected from the first record's keys, or given):
- ``mmlu-pro``  question_id, question, options (≤ 10), answer (letter), answer_index, category, src
- ``mmlu``      question, subject, choices, answer (0-based index); id = ``<subject>-<k>`` (k-th of its subject)
- ``boolq``     question, passage, answer (bool)
- ``noul``      the product's own input (``state``, ``questions`` with one noul question) + a gold ``label``
                (bool, or true/false/yes/no)

Multiple-choice prompt: the row's ``state`` is the prefix shared by every question of a category —
zero-shot ``The following is a multiple choice question about <category>.``; with ``shots=k`` the first k
rows of that category in the dev split, worked in the product's own layout (``Question: …`` /
``Options:`` / ``A. …`` / ``Answer: B``). The question is a ``choice`` question whose option *names* are
the option texts with no description, so the product prints ``A. <option text>`` (names ``A``/``opt0``
with the text as description would print ``A. A: <text>``). Option names must be unique: a repeated text
gets `` (2)``, `` (3)``… (9 of MMLU's 14,042 test questions), an empty one ``(empty)``.

Metrics over the n answered questions (P_i the renormalised label distribution, y_i the gold index,
ŷ_i = argmax P_i, conf_i = P_i[ŷ_i]):
- accuracy = mean 1[ŷ = y], with the 95 % Wilson (1927) score interval
  (p̂ + z²/2n ± z·√(p̂(1−p̂)/n + z²/4n²)) / (1 + z²/n), z = 1.959964.
- Brier (1950): binary sets (every question yes/no) mean (p_true − 1[gold = true])²; multiple choice
  mean Σ_k (P_ik − 1[k = y_i])² (Brier's original sum over classes; for K = 2 it is twice the binary form).
- ECE (Guo et al. 2017, top-label): 15 equal-width bins B_m = {i: conf_i ∈ ((m−1)/15, m/15]} over the
  confidence of the *predicted* class; ECE = Σ_m |B_m|/n · |acc(B_m) − mean conf(B_m)|. Binary sets also
  get ``ece_p_true``: the same bins over p_true, |share of gold true − mean p_true| per bin.
- NLL = mean −ln P_i[y_i].
- Temperature scaling (Guo et al. 2017): P_i(T) = softmax(ln P_i / T) (the same as dividing the label
  logprobs by T); T minimises NLL on the fit split (log-grid over [0.05, 20], then golden-section search;
  NLL is convex in 1/T). Metrics are reported on the held-out split before and after scaling.
Reproducible subsets: a question's rank is sha256("<seed>:<id>"); ``--sample N`` keeps the N lowest
(independent of library versions and file order; a smaller sample is a subset of a larger one); the
calibration split ranks sha256("<seed>:calibrate:<id>") likewise.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import math
import os
import platform
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__

Z95 = 1.959963984540054
N_BINS = 15
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
FORMATS = ("mmlu-pro", "mmlu", "boolq", "noul")
KEEP = ("gold", "category")


@dataclass(frozen=True)
class Item:
    """One benchmark question. `gold` indexes `options` (yes/no: 0 = true, 1 = false); `question` is the
    question text, or for ``noul`` input the product's question object; `context` the yes/no row's state."""

    id: str
    question: Any
    options: tuple[str, ...]
    gold: int
    category: str
    context: Any = None


# -- reading and conversion ------------------------------------------------------------------------------
def read_records(path: str | Path) -> list[dict]:
    """Parquet (.parquet/.pq) or JSONL (.jsonl/.ndjson) → list of dicts. Raises ValueError otherwise."""
    path = Path(path)
    if path.suffix.lower() in (".parquet", ".pq"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if path.suffix.lower() in (".jsonl", ".ndjson"):
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    raise ValueError(f"{path}: use a .parquet or .jsonl benchmark file")


def detect_format(rec: dict) -> str:
    keys = set(rec)
    for fmt, need in (
        ("mmlu-pro", {"question", "options", "answer"}),
        ("mmlu", {"question", "choices", "answer"}),
        ("boolq", {"question", "passage", "answer"}),
        ("noul", {"state", "questions", "label"}),
    ):
        if need <= keys:
            return fmt
    raise ValueError(f"cannot tell the benchmark format from columns {sorted(keys)}; pass --format")


def _bool(v: Any, where: str) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).strip().lower()
    if s in ("true", "yes", "1"):
        return True
    if s in ("false", "no", "0"):
        return False
    raise ValueError(f"{where}: expected a yes/no label, got {v!r}")


def _as_question(text: str) -> str:
    """BoolQ's 'is x y' → 'Is x y?' (as examples/make_real_data.py does)."""
    t = " ".join(text.split())
    return (t[:1].upper() + t[1:]).rstrip(" .?") + "?" if t else t


def to_items(records: list[dict], fmt: str = "auto") -> tuple[list[Item], str]:
    """Benchmark records → Items (and the format used). Raises ValueError naming the bad row."""
    if not records:
        raise ValueError("the benchmark file has no rows")
    fmt = detect_format(records[0]) if fmt == "auto" else fmt
    if fmt not in FORMATS:
        raise ValueError(f"unknown format {fmt!r}; expected auto or one of {', '.join(FORMATS)}")
    items, per_cat = [], {}
    for i, r in enumerate(records):
        where = f"row {i}"
        try:
            if fmt == "mmlu-pro":
                opts = tuple(r["options"])
                gold = r.get("answer_index")
                if gold is None:
                    gold = LETTERS.index(str(r["answer"]).strip().upper())
                elif r.get("answer") is not None and LETTERS[int(gold)] != str(r["answer"]).strip().upper():
                    raise ValueError(f"answer {r['answer']!r} disagrees with answer_index {gold}")
                items.append(Item(str(r["question_id"]), r["question"], opts, int(gold), str(r["category"])))
            elif fmt == "mmlu":
                cat = str(r["subject"])
                k = per_cat[cat] = per_cat.get(cat, -1) + 1
                rid = str(r["id"]) if r.get("id") not in (None, "") else f"{cat}-{k:04d}"
                items.append(Item(rid, r["question"], tuple(r["choices"]), int(r["answer"]), cat))
            elif fmt == "boolq":
                rid = str(r["id"]) if r.get("id") not in (None, "") else f"{i:05d}"
                gold = 0 if _bool(r["answer"], where + ".answer") else 1
                q = {"type": "noul", "instructions": _as_question(r["question"])}
                items.append(Item(rid, q, ("true", "false"), gold, "boolq", r["passage"]))
            else:
                qs = r["questions"]
                qs = json.loads(qs) if isinstance(qs, str) else qs
                if not isinstance(qs, dict) or len(qs) != 1:
                    raise ValueError("noul format needs exactly one question per row")
                (q,) = qs.values()
                rid = str(r["id"]) if r.get("id") not in (None, "") else str(i)
                gold = 0 if _bool(r["label"], where + ".label") else 1
                items.append(
                    Item(rid, q, ("true", "false"), gold, str(r.get("category") or "all"), r["state"])
                )
        except (KeyError, TypeError, ValueError, IndexError) as e:
            raise ValueError(f"{where} ({fmt}): {type(e).__name__}: {e}") from None
        if not 0 <= items[-1].gold < len(items[-1].options):
            raise ValueError(f"{where}: gold index {items[-1].gold} outside {len(items[-1].options)} options")
    ids = [it.id for it in items]
    if len(set(ids)) != len(ids):
        raise ValueError("question ids are not unique")
    return items, fmt


def _rank(seed: int, key: str) -> bytes:
    return hashlib.sha256(f"{seed}:{key}".encode()).digest()


def sample(items: list[Item], n: int | None, seed: int) -> list[Item]:
    """The n items with the lowest sha256("<seed>:<id>"), in their original order (all when n is None)."""
    if n is None or n >= len(items):
        return list(items)
    keep = set(sorted(range(len(items)), key=lambda i: _rank(seed, items[i].id))[:n])
    return [it for i, it in enumerate(items) if i in keep]


def option_names(options: tuple[str, ...]) -> list[str]:
    """Option texts as unique, non-empty choice names (a repeat gets ' (2)', …; empty → '(empty)')."""
    out, seen = [], {}
    for o in options:
        name = str(o).strip() or "(empty)"
        seen[name] = seen.get(name, 0) + 1
        out.append(name if seen[name] == 1 else f"{name} ({seen[name]})")
    return out


def _topic(category: str) -> str:
    return category.replace("_", " ")


def fewshot_blocks(categories: set[str], dev: list[Item] | None, shots: int) -> dict[str, str]:
    """category → the shared prefix text (zero-shot line, or the first `shots` dev rows worked)."""
    blocks = {}
    for cat in sorted(categories):
        if shots <= 0 or not dev:
            blocks[cat] = f"The following is a multiple choice question about {_topic(cat)}."
            continue
        ex = [d for d in dev if d.category == cat][:shots]
        parts = [f"The following are multiple choice questions (with answers) about {_topic(cat)}."]
        for d in ex:
            lines = [f"Question: {d.question.strip()}", "Options:"]
            lines += [f"{LETTERS[j]}. {n}" for j, n in enumerate(option_names(d.options))]
            parts.append("\n".join([*lines, f"Answer: {LETTERS[d.gold]}"]))
        blocks[cat] = "\n\n".join(parts)
    return blocks


def build_rows(items: list[Item], blocks: dict[str, str]) -> list[dict]:
    """Items → the product's input rows (one question `answer` each, plus the `gold`/`category` kept columns)."""
    rows = []
    for it in items:
        if it.context is not None:  # yes/no
            state, q = it.context, it.question
        else:
            state = blocks[it.category]
            q = {
                "type": "choice",
                "instructions": it.question.strip(),
                "criteria": dict.fromkeys(option_names(it.options)),
            }
        rows.append(
            {
                "id": it.id,
                "state": state,
                "questions": {"answer": q},
                "gold": it.gold,
                "category": it.category,
            }
        )
    return rows


# -- metrics ---------------------------------------------------------------------------------------------
def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson (1927) score interval for k successes in n trials; (0, 1) when n = 0."""
    if n == 0:
        return 0.0, 1.0
    p, z2 = k / n, z * z
    centre = (p + z2 / (2 * n)) / (1 + z2 / n)
    half = z / (1 + z2 / n) * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def pad(probs: list[list[float]]) -> np.ndarray:
    """Ragged distributions → n × K_max array, zero-padded."""
    out = np.zeros((len(probs), max((len(p) for p in probs), default=2)))
    for i, p in enumerate(probs):
        out[i, : len(p)] = p
    return out


def reliability(conf: np.ndarray, hit: np.ndarray, n_bins: int = N_BINS) -> tuple[float, list[dict]]:
    """(ECE, bins) for confidences `conf` and outcomes `hit` (0/1): bins ((m−1)/M, m/M], conf 0 in the first."""
    idx = np.clip(np.ceil(conf * n_bins - 1e-9).astype(int) - 1, 0, n_bins - 1)  # an edge m/M goes to bin m
    bins, ece = [], 0.0
    for m in range(n_bins):
        sel = idx == m
        nb = int(sel.sum())
        acc = float(hit[sel].mean()) if nb else None
        cf = float(conf[sel].mean()) if nb else None
        if nb:
            ece += nb / len(conf) * abs(acc - cf)
        bins.append({"lo": m / n_bins, "hi": (m + 1) / n_bins, "n": nb, "accuracy": acc, "confidence": cf})
    return float(ece), bins


def metrics(P: np.ndarray, y: np.ndarray, binary: bool, n_bins: int = N_BINS) -> dict[str, Any]:
    """Accuracy (+ Wilson 95 %), Brier, top-label ECE and its bins, NLL (binary: + ece_p_true and its bins)."""
    n = len(y)
    pred = P.argmax(1)
    hit = (pred == y).astype(float)
    conf = P[np.arange(n), pred]
    onehot = np.zeros_like(P)
    onehot[np.arange(n), y] = 1.0
    if binary:
        brier = float(np.mean((P[:, 0] - onehot[:, 0]) ** 2))
    else:
        brier = float(np.mean(((P - onehot) ** 2).sum(1)))
    ece, bins = reliability(conf, hit, n_bins)
    k = int(hit.sum())
    out = {
        "n": n,
        "correct": k,
        "accuracy": k / n,
        "ci95": wilson(k, n),
        "brier": brier,
        "ece": ece,
        "nll": float(np.mean(-np.log(np.clip(P[np.arange(n), y], 1e-300, None)))),
        "mean_p_answer_right": float(conf[hit == 1].mean()) if k else None,
        "mean_p_answer_wrong": float(conf[hit == 0].mean()) if k < n else None,
        "bins": bins,
    }
    if binary:
        out["ece_p_true"], out["bins_p_true"] = reliability(P[:, 0], onehot[:, 0], n_bins)
    return out


def scale(P: np.ndarray, t: float) -> np.ndarray:
    """softmax(ln P / T) row-wise; zero (padding) entries stay zero."""
    with np.errstate(divide="ignore"):
        z = np.where(P > 0, np.log(np.clip(P, 1e-300, None)), -np.inf) / t
    z = np.exp(z - z.max(1, keepdims=True))
    return z / z.sum(1, keepdims=True)


def _nll(P: np.ndarray, y: np.ndarray, t: float) -> float:
    return float(np.mean(-np.log(np.clip(scale(P, t)[np.arange(len(y)), y], 1e-300, None))))


T_MIN, T_MAX = 0.05, 20.0


def fit_temperature(P: np.ndarray, y: np.ndarray) -> float:
    """The T > 0 minimising NLL of softmax(ln P / T): log-grid over [T_MIN, T_MAX], then golden section.
    A result at T_MAX means NLL still falls as the answers flatten to uniform: the probabilities carry no
    usable signal (or point the wrong way); the report says so."""
    grid = np.exp(np.linspace(math.log(T_MIN), math.log(T_MAX), 97))
    i = int(np.argmin([_nll(P, y, t) for t in grid]))
    a, b = math.log(grid[max(i - 1, 0)]), math.log(grid[min(i + 1, len(grid) - 1)])
    g = (math.sqrt(5) - 1) / 2
    for _ in range(60):
        c, d = b - g * (b - a), a + g * (b - a)
        if _nll(P, y, math.exp(c)) <= _nll(P, y, math.exp(d)):
            b = d
        else:
            a = c
    return math.exp((a + b) / 2)


def score(records: list[dict], calibrate: float | None = None, seed: int = 42) -> dict[str, Any]:
    """Score the per-question output rows (with the kept `gold`/`category` columns). Errors are counted and
    left out of every metric. `calibrate`: share of questions for the temperature fit (seeded split)."""
    ok = [r for r in records if r["error"] is None]
    errors = [r["error"] for r in records if r["error"] is not None]
    if not ok:
        raise ValueError(f"no question was answered ({len(errors)} errors; first: {errors[:1]})")
    P, y = pad([r["probs"] for r in ok]), np.array([int(r["gold"]) for r in ok])
    binary = all(r["type"] == "noul" for r in ok)
    K = np.array([len(r["probs"]) for r in ok])
    hit = P.argmax(1) == y
    mass = np.array([r["label_mass"] for r in ok])
    cconf = np.array([r["confidence"] for r in ok])
    rep: dict[str, Any] = {
        "questions": len(records),
        "answered": len(ok),
        "errors": len(errors),
        "first_errors": errors[:5],
        "kind": "yes/no" if binary else "multiple choice",
        "overall": metrics(P, y, binary),
        "chance_accuracy": float(np.mean(1.0 / K)),
        "majority_accuracy": float(max(np.mean(y == 0), np.mean(y == 1))) if binary else None,
        "gold_true_share": float(np.mean(y == 0)) if binary else None,
        "predicted_share": {
            LETTERS[j] if not binary else ("true", "false")[j]: float(np.mean(P.argmax(1) == j))
            for j in range(P.shape[1])
        },
        "mean_label_mass": float(mass.mean()),
        "label_mass_below_half": float(np.mean(mass < 0.5)),
        "mean_confidence_right": float(cconf[hit].mean()) if hit.any() else None,
        "mean_confidence_wrong": float(cconf[~hit].mean()) if (~hit).any() else None,
    }
    cats = sorted({r["category"] for r in ok})
    rep["categories"] = {}
    for c in cats:
        sel = np.array([r["category"] == c for r in ok])
        k, n = int(hit[sel].sum()), int(sel.sum())
        rep["categories"][c] = {"n": n, "correct": k, "accuracy": k / n, "ci95": wilson(k, n)}
    rep["temperature"] = None
    if calibrate:
        order = sorted(range(len(ok)), key=lambda i: _rank(seed, "calibrate:" + str(ok[i]["id"])))
        n_fit = round(calibrate * len(ok))
        if not 0 < n_fit < len(ok):
            raise ValueError(f"calibrate={calibrate} leaves no question to fit on or to evaluate")
        fit, ev = np.array(sorted(order[:n_fit])), np.array(sorted(order[n_fit:]))
        t = fit_temperature(P[fit], y[fit])
        rep["temperature"] = {
            "T": t,
            "at_search_bound": bool(t >= T_MAX * 0.999 or t <= T_MIN * 1.001),
            "fit_share": calibrate,
            "n_fit": len(fit),
            "n_eval": len(ev),
            "before": metrics(P[ev], y[ev], binary),
            "after": metrics(scale(P[ev], t), y[ev], binary),
        }
    return rep


# -- the run ---------------------------------------------------------------------------------------------
def _hardware(device: str) -> str:
    try:
        import torch

        if device != "cpu" and torch.cuda.is_available():
            return f"{torch.cuda.device_count()}× {torch.cuda.get_device_name(0)}"
    except Exception:  # noqa: BLE001 - metadata only
        pass
    cpu = platform.processor() or platform.machine()
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()} CPU cores ({cpu})"


def _commit() -> str | None:
    try:
        here = Path(__file__).parent
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain"], cwd=here, capture_output=True, text=True, timeout=5
        ).stdout.strip()
        return sha + ("+dirty" if dirty else "") if sha else None
    except (OSError, subprocess.SubprocessError):
        return None


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return h.hexdigest()


def prepare(input, fmt: str, shots: int, dev, n_sample: int | None, seed: int):
    """Read, convert and sample: (all items, chosen items, dev items or None, format).
    Raises ConfigError for an unreadable or malformed benchmark file or inconsistent options."""
    from .errors import ConfigError

    try:
        if shots < 0 or (n_sample is not None and n_sample <= 0):
            raise ValueError("--shots must be ≥ 0 and --sample > 0")
        items, fmt = to_items(read_records(input), fmt)
        if shots and dev is None:
            raise ValueError("--shots needs --dev (the split the worked examples come from)")
        if shots and items[0].context is not None:
            raise ValueError("--shots is for multiple-choice sets")
        dev_items = to_items(read_records(dev), fmt)[0] if shots else None
    except (
        OSError,
        ValueError,
        ImportError,
    ) as e:  # JSONDecodeError and Arrow errors are ValueErrors/OSErrors
        raise ConfigError(f"eval: {e}") from None
    return items, sample(items, n_sample, seed), dev_items, fmt


def run_eval(
    input: str | Path,
    out_dir: str | Path,
    run_options: dict[str, Any],
    *,
    fmt: str = "auto",
    shots: int = 0,
    dev: str | Path | None = None,
    n_sample: int | None = None,
    seed: int = 42,
    calibrate: float | None = None,
    model_name: str | None = None,
    backend=None,
    on_progress: Callable[[int, int], None] | None = None,
) -> dict[str, Any]:
    """Convert `input`, run the job (`run_options`: RunConfig fields other than input/output/keep), score.

    Writes into `out_dir`: questions.jsonl (the product input), predictions.parquet (the product output, one
    row per question), report.json, report.md, reliability.png. Returns the report. Raises ConfigError for
    bad benchmark data or options, other OpenjevErrors from the job.
    """
    from .config import build_config
    from .pipeline import run_job

    t0 = time.perf_counter()
    commit = _commit()  # the code that runs, read before a long run (the tree may change meanwhile)
    out_dir = Path(out_dir)
    items, chosen, dev_items, fmt = prepare(input, fmt, shots, dev, n_sample, seed)
    blocks = fewshot_blocks({it.category for it in chosen}, dev_items, shots)
    out_dir.mkdir(parents=True, exist_ok=True)
    qpath, ppath = out_dir / "questions.jsonl", out_dir / "predictions.parquet"
    with open(qpath, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in build_rows(chosen, blocks))
    cfg = build_config(input=qpath, output=ppath, keep=KEEP, **run_options)
    s = run_job(cfg, backend=backend, on_progress=on_progress)
    device = getattr(backend, "device", None) or cfg.device
    if device == "auto":
        import torch

        device = "cuda" if cfg.backend == "sglang" or torch.cuda.is_available() else "cpu"
    shots_used = {c: sum(d.category == c for d in dev_items or []) for c in blocks} if shots else {}
    run = {
        "model": model_name or cfg.model,
        "model_path": cfg.model,
        "backend": cfg.backend,
        "device": device,
        "dtype": cfg.dtype if cfg.dtype != "auto" else ("float32" if device == "cpu" else "bfloat16"),
        "hardware": _hardware(device),
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "run_wall_s": s.wall_s,
        "total_wall_s": time.perf_counter() - t0,
        "openjev_batch": __version__,
        "commit": commit,
        "branch_tokens": s.branch_tokens,
        "computed_tokens": s.computed_tokens,
        "cache_hit_rate": s.cache_hit_rate,
        "load_average_end": os.getloadavg(),  # 1/5/15 min: other work on the machine inflates wall time
    }
    dataset = {
        "input": str(input),
        "sha256": _sha256(Path(input)),
        "format": fmt,
        "rows_in_file": len(items),
        "sample": n_sample,
        "seed": seed,
        "shots": shots,
        "dev": str(dev) if dev else None,
        "shots_short": sorted(c for c, n in shots_used.items() if n < shots),
        "calibrate": calibrate,
    }
    return write_reports(out_dir, run, dataset)


def write_reports(out_dir: str | Path, run: dict, dataset: dict) -> dict[str, Any]:
    """Score `out_dir`/predictions.parquet; write report.json, report.md and reliability.png; return the report."""
    import pyarrow.parquet as pq

    from .errors import OpenjevError

    out_dir = Path(out_dir)
    try:
        rep = score(
            pq.read_table(out_dir / "predictions.parquet").to_pylist(), dataset["calibrate"], dataset["seed"]
        )
    except ValueError as e:
        raise OpenjevError(f"eval: {e}") from None
    rep["run"], rep["dataset"], rep["definitions"] = run, dataset, DEFINITIONS
    (out_dir / "report.json").write_text(json.dumps(rep, indent=2, ensure_ascii=False) + "\n")
    (out_dir / "report.md").write_text(markdown(rep))
    plot_reliability(rep, out_dir / "reliability.png")
    return rep


def rescore(out_dir: str | Path, calibrate: float | None = None) -> dict[str, Any]:
    """Re-score a finished eval folder (no model): its predictions.parquet with the run/dataset records of its
    report.json; `calibrate` overrides the temperature-fit share."""
    old = json.loads((Path(out_dir) / "report.json").read_text())
    dataset = {"calibrate": (old.get("temperature") or {}).get("fit_share"), **old["dataset"]}
    if calibrate is not None:
        dataset["calibrate"] = calibrate
    return write_reports(out_dir, old["run"], dataset)


DEFINITIONS = {
    "accuracy_ci95": "Wilson (1927) score interval, z = 1.959964",
    "brier": "yes/no: mean (p_true - y)^2; multiple choice: mean sum_k (p_k - y_k)^2 (Brier 1950)",
    "ece": "Guo et al. 2017 top-label ECE: 15 equal-width bins ((m-1)/15, m/15] over the probability of "
    "the predicted option; sum_m |B_m|/n * |acc(B_m) - conf(B_m)|",
    "ece_p_true": "yes/no only: the same 15 bins over p_true; |share of gold true - mean p_true| per bin",
    "nll": "mean -ln p(gold)",
    "temperature": "Guo et al. 2017: p(T) = softmax(ln p / T), T minimises NLL on the fit split",
    "confidence": "the product's confidence column, 1 - H(P)/ln K (concentration, not correctness)",
    "label_mass": "sum of exp(label logprob) before renormalising: next-token mass on the valid labels",
    "sample": "the N questions with the lowest sha256('<seed>:<id>')",
}


# -- presentation ----------------------------------------------------------------------------------------
def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.2f} %"


def _ci(ci) -> str:
    return f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def summary_rows(rep: dict) -> list[tuple[str, str]]:
    o, t = rep["overall"], rep["temperature"]
    rows = [
        ("accuracy", f"{_pct(o['accuracy'])}  {_ci(o['ci95'])}  ({o['correct']:,}/{o['n']:,})"),
        (
            "chance" if rep["kind"] != "yes/no" else "majority class",
            _pct(rep["chance_accuracy"] if rep["kind"] != "yes/no" else rep["majority_accuracy"]),
        ),
        ("Brier", f"{o['brier']:.4f}"),
        ("ECE (15 bins, top-label)", _pct(o["ece"])),
    ]
    if "ece_p_true" in o:
        rows.append(("ECE over p_true", _pct(o["ece_p_true"])))
    rows += [
        ("NLL", f"{o['nll']:.4f}"),
        (
            "mean label mass",
            f"{rep['mean_label_mass']:.4g} (below 0.5: {_pct(rep['label_mass_below_half'])})",
        ),
        (
            "mean confidence right / wrong",
            f"{rep['mean_confidence_right'] or 0:.4f} / {rep['mean_confidence_wrong'] or 0:.4f}",
        ),
        (
            "mean p(answer) right / wrong",
            f"{o['mean_p_answer_right'] or 0:.4f} / {o['mean_p_answer_wrong'] or 0:.4f}",
        ),
        ("answers chosen", ", ".join(f"{k} {100 * v:.1f} %" for k, v in rep["predicted_share"].items() if v)),
    ]
    if t:
        b, a = t["before"], t["after"]
        bound = (
            " (search bound: no usable signal, scaling flattens toward uniform)"
            if t.get("at_search_bound")
            else ""
        )
        rows.append(
            (f"temperature T = {t['T']:.3f}{bound}", f"fit on {t['n_fit']:,}, scored on {t['n_eval']:,}")
        )
        for k in ("brier", "ece", "nll"):
            f = _pct if k == "ece" else (lambda v: f"{v:.4f}")
            rows.append((f"  {k} before → after", f"{f(b[k])} → {f(a[k])}"))
    rows.append(("questions / errors", f"{rep['questions']:,} / {rep['errors']:,}"))
    return rows


def markdown(rep: dict) -> str:
    r, d = rep["run"], rep["dataset"]
    protocol = (
        f"{d['format']}, {d['shots']}-shot"
        + (f" (dev: `{d['dev']}`)" if d["dev"] else "")
        + (
            f", sample {d['sample']:,} of {d['rows_in_file']:,} (seed {d['seed']})"
            if d["sample"]
            else f", all {d['rows_in_file']:,} rows"
        )
    )
    lines = [
        f"# openjev-batch eval: `{Path(d['input']).name}`",
        "",
        f"- model: `{r['model']}` · backend `{r['backend']}` on {r['device']} ({r['dtype']}), {r['hardware']}",
        f"- date: {r['date']} · wall time: {r['run_wall_s']:.1f} s run, {r['total_wall_s']:.1f} s total · "
        f"openjev-batch {r['openjev_batch']} (commit {r['commit'] or 'unknown'})",
        f"- protocol: {protocol}; input sha256 `{d['sha256'][:16]}…`",
        f"- tokens: {r['branch_tokens']:,} logical, {r['computed_tokens']:,} computed "
        f"(cache hit rate {100 * r['cache_hit_rate']:.1f} %)",
        "",
        "| metric | value |",
        "|---|---|",
        *(f"| {k} | {v} |" for k, v in summary_rows(rep)),
        "",
    ]
    if len(rep["categories"]) > 1:
        lines += ["| category | n | accuracy | 95 % CI |", "|---|---:|---:|---|"]
        lines += [
            f"| {c} | {v['n']:,} | {_pct(v['accuracy'])} | {_ci(v['ci95'])} |"
            for c, v in rep["categories"].items()
        ]
        lines.append("")
    lines += ["Reliability diagram: `reliability.png`. Definitions:", ""]
    lines += [f"- **{k}**: {v}" for k, v in rep["definitions"].items()]
    return "\n".join(lines) + "\n"


def rich_tables(rep: dict) -> list:
    """The terminal view: summary table, and per-category table when there are several categories."""
    from rich.table import Table

    r = rep["run"]
    t = Table(title=f"openjev-batch eval · {r['model']} · {rep['dataset']['format']}", show_header=False)
    for k, v in summary_rows(rep) + [("wall time", f"{r['run_wall_s']:.1f} s")]:
        t.add_row(k, v)
    out = [t]
    if len(rep["categories"]) > 1:
        c = Table("category", "n", "accuracy", "95 % CI", title="per category")
        for name, v in rep["categories"].items():
            c.add_row(name, f"{v['n']:,}", _pct(v["accuracy"]), _ci(v["ci95"]))
        o = rep["overall"]
        c.add_row("[bold]overall", f"{o['n']:,}", _pct(o["accuracy"]), _ci(o["ci95"]))
        out.insert(0, c)
    return out


def plot_reliability(rep: dict, path: Path) -> None:
    """Reliability diagram (Guo et al. 2017, fig. 1 style) as PNG: per bin, accuracy vs confidence of the
    predicted option, gap to the diagonal shaded, bin counts below; yes/no sets add the p_true panel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    o = rep["overall"]
    panels = [("confidence of the predicted answer", "accuracy", o["bins"], o["ece"])]
    if "bins_p_true" in o:
        panels.append(("p_true", "share of gold = true", o["bins_p_true"], o["ece_p_true"]))
    fig, axes = plt.subplots(
        2, len(panels), figsize=(5 * len(panels), 6), squeeze=False, gridspec_kw={"height_ratios": [3, 1]}
    )
    for j, (xl, yl, bins, ece) in enumerate(panels):
        ax, hx = axes[0, j], axes[1, j]
        w = 1 / len(bins)
        mids = [b["lo"] + w / 2 for b in bins]
        acc = [b["accuracy"] or 0 for b in bins]
        cf = [b["confidence"] if b["n"] else m for b, m in zip(bins, mids, strict=True)]
        ax.bar(mids, acc, width=w, edgecolor="black", color="#4878d0", label="observed")
        ax.bar(
            mids,
            [c - a if b["n"] else 0 for c, a, b in zip(cf, acc, bins, strict=True)],
            bottom=acc,
            width=w,
            color="#d65f5f",
            alpha=0.4,
            edgecolor="#d65f5f",
            label="gap",
        )
        ax.plot([0, 1], [0, 1], "k--", lw=1, label="perfect")
        ax.set(xlim=(0, 1), ylim=(0, 1), ylabel=yl, title=f"ECE {100 * ece:.2f} % ({len(bins)} bins)")
        ax.legend(loc="upper left", fontsize=8)
        hx.bar(mids, [b["n"] for b in bins], width=w, color="gray", edgecolor="black")
        hx.set(xlim=(0, 1), xlabel=xl, ylabel="questions")
    r, d = rep["run"], rep["dataset"]
    fig.suptitle(
        f"{r['model']} · {Path(d['input']).name} · n={o['n']:,} · acc {100 * o['accuracy']:.1f} %",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
