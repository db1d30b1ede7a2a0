"""Reports of an eval: report.json, report.md, the reliability PNG and the terminal tables, with the run's
provenance (hardware, commit, input hash). Scoring is metrics.py."""

from __future__ import annotations

import json
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from ..errors import OpenjevError
from .metrics import score


def hardware(device: str) -> str:
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


def commit(where: Path | None = None) -> str | None:
    """The short commit of the checkout holding `where` (default: this package), `+dirty` when a tracked
    file differs from it. Untracked files are not counted: a clean checkout with the user's own outputs in
    it (eval's folders, a scratch file) was reported dirty (new-user trial). None outside a git checkout."""
    here = where or Path(__file__).parent
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True, timeout=5
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here, capture_output=True, text=True, timeout=5,
        ).stdout.strip()  # fmt: skip
        return sha + ("+dirty" if dirty else "") if sha else None
    except (OSError, subprocess.SubprocessError):
        return None


DEFINITIONS = {
    "accuracy_ci95": "Wilson (1927) score interval, z = 1.959964",
    "brier": "yes/no: mean (p_true - y)^2; multiple choice and classification: mean sum_k (p_k - y_k)^2 "
    "(Brier 1950)",
    "ece": "Guo et al. 2017 top-label ECE: 15 equal-width bins ((m-1)/15, m/15] over the probability of "
    "the predicted option; sum_m |B_m|/n * |acc(B_m) - conf(B_m)|",
    "ece_p_true": "yes/no only: the same 15 bins over p_true; |share of gold true - mean p_true| per bin",
    "nll": "mean -ln p(gold)",
    "temperature": "Guo et al. 2017: p(T) = softmax(ln p / T), T minimises NLL on the fit split",
    "confidence": "label logprobs: the product's confidence column, 1 - H(P)/ln K (concentration, not "
    "correctness)",
    "label_mass": "label logprobs: sum of exp(label logprob) before renormalising: next-token mass on the "
    "valid labels",
    "classification": "a classifier head: p = softmax of its logits over id2label; the gold label is matched "
    "to those names case-insensitively (or is their index); per category = per gold label",
    "sample": "the N questions with the lowest sha256('<seed>:<id>')",
}


def write_reports(out_dir: str | Path, run: dict, dataset: dict) -> dict[str, Any]:
    """Score `out_dir`/predictions.parquet; write report.json, report.md and reliability.png; return the report."""
    import pyarrow.parquet as pq

    out_dir = Path(out_dir)
    try:
        rep = score(
            pq.read_table(out_dir / "predictions.parquet").to_pylist(),
            dataset["calibrate"],
            dataset["seed"],
            dataset.get("labels"),  # a classifier head's (None in the label-logprobs formats' reports)
        )
    except ValueError as e:
        raise OpenjevError(f"eval: {e}") from None
    rep["run"], rep["dataset"], rep["definitions"] = run, dataset, DEFINITIONS
    (out_dir / "report.json").write_text(json.dumps(rep, indent=2, ensure_ascii=False) + "\n")
    (out_dir / "report.md").write_text(markdown(rep))
    plot_reliability(rep, out_dir / "reliability.png")
    return rep


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.2f} %"


def _ci(ci) -> str:
    return f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def summary_rows(rep: dict) -> list[tuple[str, str]]:
    o, t = rep["overall"], rep["temperature"]
    rows = [("accuracy", f"{_pct(o['accuracy'])}  {_ci(o['ci95'])}  ({o['correct']:,}/{o['n']:,})")]
    if rep["kind"] != "yes/no":
        rows.append(("chance", _pct(rep["chance_accuracy"])))
    if rep.get("majority_accuracy") is not None:  # yes/no and classification
        rows.append(("majority class", _pct(rep["majority_accuracy"])))
    rows += [("Brier", f"{o['brier']:.4f}"), ("ECE (15 bins, top-label)", _pct(o["ece"]))]
    if "ece_p_true" in o:
        rows.append(("ECE over p_true", _pct(o["ece_p_true"])))
    rows.append(("NLL", f"{o['nll']:.4f}"))
    if rep["mean_label_mass"] is not None:  # the label-logprobs readout's own columns (no classifier head)
        rows += [
            (
                "mean label mass",
                f"{rep['mean_label_mass']:.4g} (below 0.5: {_pct(rep['label_mass_below_half'])})",
            ),
            (
                "mean confidence right / wrong",
                f"{rep['mean_confidence_right'] or 0:.4f} / {rep['mean_confidence_wrong'] or 0:.4f}",
            ),
        ]
    rows += [
        (
            "mean p(answer) right / wrong",
            f"{o['mean_p_answer_right'] or 0:.4f} / {o['mean_p_answer_wrong'] or 0:.4f}",
        ),
        # every option, a never-chosen one too: a model that never says D is what this line should show
        (
            "answers chosen",
            ", ".join(
                f"{k} {100 * v:.1f} % ({round(v * o['n']):,})" for k, v in rep["predicted_share"].items()
            ),
        ),
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
    labels = d.get("labels")
    protocol = (
        (
            f"{d['format']} (classifier head; labels {', '.join(labels)})"
            if labels
            else f"{d['format']}, {d['shots']}-shot"
        )
        + (f" (dev: `{d['dev']}`)" if d["dev"] else "")
        + (
            f", sample {d['sample']:,} of {d['rows_in_file']:,} (seed {d['seed']})"
            if d["sample"]
            else f", all {d['rows_in_file']:,} rows"
        )
        + (f", the first {d['limit']:,} (--limit)" if d.get("limit") else "")
    )
    lines = [
        f"# openjev-batch eval: `{Path(d['input']).name}`",
        "",
        f"- model: `{r['model']}` · backend `{r['backend']}` on {r['device']} ({r['dtype']}), {r['hardware']}",
        f"- date: {r['date']} · wall time: {r['run_wall_s']:.1f} s run, {r['total_wall_s']:.1f} s total · "
        f"openjev-batch {r['openjev_batch']} (commit {r['commit'] or 'unknown'})"
        + (f" · tokenization `{r['tokenization']}`" if r.get("tokenization") else ""),
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
