"""What moved between two outputs of a job (`openjev-batch compare OLD NEW`, `run --baseline OLD`): per
question, each option's share old against new, the drift statistics (drift.py: PSI, which `--max-drift`
gates on, Jensen–Shannon, the χ² p-value), the mean confidence, label mass and abstention rate, and the rows
in both whose answer changed (their count and a few ids).

Outputs of `run` (a record per row × question: `question_id`, `answer`, a multi question's `chosen`) and of
`classify` (a record per row: its `label`, as the one question `label`) are read, as Parquet, JSONL (also
.gz) or CSV/TSV. A record with an error is not an answer; a multi question counts each chosen label (a row
may choose several or none), so its shares are of the labels chosen."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import polars as pl

from ..errors import InputFileError
from .drift import PSI_ALERT, Drift, drift

SHOW_IDS = 5  # the ids of changed rows a report names per question


@dataclass(frozen=True)
class QuestionMove:
    """One question between the two runs: `drift` (options, counts, statistics); per run (old, new): rows
    answered, mean confidence, mean label mass and abstention rate (None: no such column or no rows);
    `common` rows answered in both, `changed` of them with another answer, `changed_ids` the first few."""

    question: str
    drift: Drift
    answered: tuple[int, int]
    confidence: tuple[float | None, float | None]
    label_mass: tuple[float | None, float | None]
    abstain_rate: tuple[float | None, float | None]
    common: int
    changed: int
    changed_ids: tuple[str, ...]


@dataclass(frozen=True)
class Comparison:
    """Every question of two outputs (new's order, then those only the old one has) and the PSI gate."""

    old: str
    new: str
    questions: tuple[QuestionMove, ...]
    max_drift: float = PSI_ALERT

    def drifted(self) -> list[str]:
        """The questions whose PSI is over `max_drift`."""
        return [q.question for q in self.questions if q.drift.over(self.max_drift)]

    def to_dict(self) -> dict[str, Any]:
        """For `--json`: every number, NaN as null; each option's shares beside its counts."""
        out = asdict(self)
        for q, d in zip(self.questions, out["questions"], strict=True):
            dd = d["drift"]
            for side in ("old", "new"):
                total = sum(getattr(q.drift, side))
                dd[f"{side}_share"] = [c / total if total else None for c in getattr(q.drift, side)]
            for k in ("psi", "js"):
                dd[k] = None if dd[k] != dd[k] else dd[k]
        out["drifted"] = self.drifted()
        return out


def compare(old: Path, new: Path, max_drift: float = PSI_ALERT) -> Comparison:
    """Compare the outputs at `old` and `new`. Raises InputFileError for one that cannot be read or is no
    output of `run` or `classify`."""
    a, b = answers(read_output(old)), answers(read_output(new))
    qs = list(dict.fromkeys([*b["question"].unique(maintain_order=True), *a["question"].unique(maintain_order=True)]))
    moves = tuple(_question(q, a.filter(pl.col("question") == q), b.filter(pl.col("question") == q)) for q in qs)
    return Comparison(str(old), str(new), moves, max_drift)


def read_output(path: Path) -> pl.DataFrame:
    """An output file as a frame. Raises InputFileError."""
    name = path.name.lower()
    try:
        if name.endswith(".parquet"):
            return pl.read_parquet(path)
        if name.endswith((".jsonl", ".jsonl.gz")):
            import gzip  # lazy: only a compressed output needs it

            raw = gzip.decompress(path.read_bytes()) if name.endswith(".gz") else path.read_bytes()
            return pl.read_ndjson(raw, infer_schema_length=None)
        if name.endswith((".csv", ".tsv")):
            return pl.read_csv(path, separator="\t" if name.endswith(".tsv") else ",", infer_schema_length=None)
    except (OSError, pl.exceptions.PolarsError) as e:
        raise InputFileError(f"{path}: cannot be read as an output ({str(e).splitlines()[0]})") from None
    raise InputFileError(f"{path}: not an output file (.parquet, .jsonl, .jsonl.gz, .csv or .tsv)")


def answers(df: pl.DataFrame) -> pl.DataFrame:
    """The answered records as `id, question, type, answer, chosen, options, confidence, label_mass,
    abstain` (`classify`'s label as the question `label`). Raises InputFileError for another table."""
    if "question_id" in df.columns and "answer" in df.columns:
        df = df.rename({"question_id": "question"})
    elif "label" in df.columns:
        df = df.with_columns(question=pl.lit("label"), type=pl.lit("choice"), answer=pl.col("label"))
    else:
        raise InputFileError("not an output of `run` or `classify` (no `question_id` and `answer`, nor `label`)")
    for c, t in (("type", pl.String), ("chosen", pl.List(pl.String)), ("options", pl.List(pl.String)),
                 ("confidence", pl.Float64), ("label_mass", pl.Float64), ("abstain", pl.Boolean)):  # fmt: skip
        if c not in df.columns or df.schema[c] != t and not (c in ("chosen", "options") and df.schema[c] == pl.String):
            df = df.with_columns(pl.lit(None, t).alias(c))
    ok = pl.col("error").is_null() if "error" in df.columns else pl.lit(True)
    answered = ok & (pl.col("answer").is_not_null() | (pl.col("type") == "multi"))
    cols = ["id", "question", "type", "answer", "chosen", "options", "confidence", "label_mass", "abstain"]
    return df.filter(answered).select(pl.col("id").cast(pl.String), *cols[1:])


def _question(q: str, old: pl.DataFrame, new: pl.DataFrame) -> QuestionMove:
    multi = "multi" in {*old["type"].to_list(), *new["type"].to_list()}
    options = _options(old, new, multi)
    counts = [_counts(d, options, multi) for d in (old, new)]
    joined = old.join(new, on="id", suffix="_new").with_columns(
        was=_said(multi, ""), now=_said(multi, "_new")
    )
    changed = joined.filter(pl.col("was") != pl.col("now"))
    return QuestionMove(
        q, drift(options, *counts), (old.height, new.height),
        _pair(old, new, "confidence"), _pair(old, new, "label_mass"), _pair(old, new, "abstain"),
        joined.height, changed.height, tuple(changed["id"].head(SHOW_IDS).to_list()),
    )  # fmt: skip


def _said(multi: bool, suffix: str) -> pl.Expr:
    """A record's answer as one text: a multi question's chosen labels, sorted."""
    if multi:
        return pl.col(f"chosen{suffix}").list.sort().list.join("\x1f").fill_null("")
    return pl.col(f"answer{suffix}")


def _options(old: pl.DataFrame, new: pl.DataFrame, multi: bool) -> list[str]:
    """The question's options in its order (its `options` list where the output has one), then any answer
    outside them in first-seen order."""
    out: list[str] = []
    for d in (new, old):
        listed = d["options"].drop_nulls()
        if listed.len() and listed.dtype == pl.List(pl.String):
            out.extend(listed[0].to_list())
    seen = [*_values(new, multi), *_values(old, multi)]
    return list(dict.fromkeys([*out, *seen]))


def _values(d: pl.DataFrame, multi: bool) -> list[str]:
    if multi and d["chosen"].dtype == pl.List(pl.String):
        return d["chosen"].explode().drop_nulls().unique(maintain_order=True).to_list()
    return d["answer"].drop_nulls().unique(maintain_order=True).to_list()


def _counts(d: pl.DataFrame, options: list[str], multi: bool) -> list[int]:
    vals = d["chosen"].explode() if multi and d["chosen"].dtype == pl.List(pl.String) else d["answer"]
    got = dict(vals.drop_nulls().value_counts().iter_rows())
    return [int(got.get(o, 0)) for o in options]


def _pair(old: pl.DataFrame, new: pl.DataFrame, col: str) -> tuple[float | None, float | None]:
    """The mean of `col` in each run (abstain: the share of rows that abstained), None where it has none."""

    def mean(d: pl.DataFrame) -> float | None:
        s = d[col].drop_nulls().cast(pl.Float64)
        return float(s.mean()) if s.len() else None  # type: ignore[arg-type]

    return mean(old), mean(new)


def plot(c: Comparison, path: Path) -> None:
    """Bar charts of each question's shares, old against new (PSI in each title), into `path` (PNG)."""
    import matplotlib  # lazy: only --plot draws

    matplotlib.use("Agg")  # a file, no display (cron)
    import matplotlib.pyplot as plt  # lazy: as above

    n = max(1, len(c.questions))
    fig, axes = plt.subplots(n, 1, figsize=(8, 2.6 * n), squeeze=False)
    for ax, q in zip(axes[:, 0], c.questions, strict=False):
        d, x = q.drift, range(len(q.drift.options))
        for side, off in (("old", -0.2), ("new", 0.2)):
            total = sum(getattr(d, side)) or 1
            ax.bar([i + off for i in x], [v / total for v in getattr(d, side)], width=0.4, label=side)
        ax.set_xticks(list(x), list(d.options), rotation=30, ha="right", fontsize=8)
        ax.set_ylabel("share")
        flag = "  ▲ over --max-drift" if d.over(c.max_drift) else ""
        ax.set_title(f"{q.question}: PSI {d.psi:.3f}, χ² p {d.p_value:.3g}{flag}", fontsize=10)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
