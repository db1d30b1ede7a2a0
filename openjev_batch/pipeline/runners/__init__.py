"""Runners: what scores a job's chunks for the one loop (pipeline/loop.py). A runner is opened for one job
(`open(cfg, readout)`: its backend started or configured) and turns the chunks the loop gives it, (index,
rows) for the chunks still to do, into (index, records, info) — `info`: the chunk's numbers that are not in
its records (warm-up and planned unique tokens). `labels` are a started backend's (classifier-head), `name`
names the backend in errors, `describe()` gives the Summary's model, pattern and start-up, and what a runner
that scores nothing counted instead (`counted`).

- `local.LocalRunner`: one backend in this process, the host stage of chunk k+1 under chunk k.
- `plan_only.PlanOnlyRunner`: the tokenizer alone: each chunk prompted and planned (`--dry-run`), or
  rendered (`--show-prompt`).
- `parse_only.ParseOnlyRunner`: no tokenizer: each row's problems (`validate`).
"""

from __future__ import annotations

from typing import Any

from ...core import RowError


def stand_ins(readout: Any, row: Any, errors: list[str]) -> list[dict[str, Any]]:
    """What stands for a row's output in a job that scores nothing: its `readout.n_records(row)` records,
    `id` and `error` only (the null sink counts them), the first ones with `errors` (a RowError: all of
    them, with its error). Which of a row's records an error belongs to does not matter to a count."""
    n = readout.n_records(row)
    if isinstance(row, RowError):
        errors = [row.error] * n
    return [
        {"id": row.id, "error": errors[k] if k < len(errors) else None} for k in range(max(n, len(errors)))
    ]
