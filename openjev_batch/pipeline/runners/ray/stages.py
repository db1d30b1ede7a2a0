"""The Ray actors (plain classes, so Ray imports them by module name): RenderStage runs the prompt stage,
ScoreStage one backend scoring buckets through the single-machine stage functions; the staged table they
return; the bucket of a row."""

from __future__ import annotations

import hashlib
import math
import pickle
from typing import Any

import pyarrow as pa

from ....backends import load_backend
from ....backends.base import load_tokenizer
from ....config import RunConfig
from ....core import RowError
from ....readouts.base import Readout
from ...prefill import FailureTracker
from ...stages import Prompted, prompt_chunk, score_chunk

_EXTRA = [("_pos", pa.int64()), ("_qidx", pa.int32()), ("_kept", pa.binary()), ("_warm", pa.int64()),
          ("_unique", pa.int64())]  # fmt: skip


def stage_schema(readout: Readout) -> pa.Schema:
    """The staged files' columns: the readout's output columns, then the driver's bookkeeping."""
    return pa.schema(list(readout.schema) + [pa.field(n, t) for n, t in _EXTRA])


def bucket_of(readout: Readout, row, chunk: int, n_buckets: int) -> int:
    """Bucket of a row within its input chunk, deterministic across processes and runs. Rows with the
    same prefix share one (`readout.prefix_key`). The chunk number splits a prefix shared by several
    chunks, as the single-machine planner does (one prefill per chunk). Row errors (nothing to prefill)
    are spread by position."""
    if isinstance(row, RowError):
        return row.pos % n_buckets
    h = hashlib.blake2b(readout.prefix_key(row).encode("utf-8", "surrogatepass"), digest_size=8)
    h.update(int(chunk).to_bytes(8, "little"))
    return int.from_bytes(h.digest(), "little") % n_buckets


def buckets_per_chunk(n_rows: int, workers: int, bucket_rows: int) -> int:
    """Enough buckets to keep every worker busy (4 each) and to hold about `bucket_rows` rows each."""
    return max(math.ceil(n_rows / bucket_rows), min(n_rows, 4 * workers), 1)


# -- Ray stages (run in actors; plain classes so Ray imports this module by name) ----------------------
class RenderStage:
    """CPU actor: the prompt stage (`pipeline.prompt_chunk`) over a block of rows (block in, block out:
    per row, the row with its prompt and its failed questions)."""

    def __init__(self, model: str, readout: Readout, trust_remote_code: bool = False):
        self.prompter = readout.prompter(load_tokenizer(model, trust_remote_code))

    def __call__(self, block: pa.Table) -> pa.Table:
        rows = [pickle.loads(b) for b in block.column("row").to_pylist()]
        p = prompt_chunk(rows, self.prompter)
        prompts = {rp.pos: rp for rp in p.prompts}
        payload = [
            pickle.dumps((r, prompts.get(r.pos), p.failed.get(r.pos, {})), protocol=pickle.HIGHEST_PROTOCOL)
            for r in rows
        ]
        return pa.table(
            {
                "bucket": block.column("bucket"),
                "pos": block.column("pos"),
                "payload": pa.array(payload, pa.binary()),
            }
        )


class ScoreStage:
    """Engine actor: one backend for its lifetime; each call scores one bucket (a block, or a group) with
    the single-machine stage function `pipeline.score_chunk` → staged output rows. One FailureTracker for
    the actor's lifetime: the evidence of a broken backend spans the buckets it scores (the job loop's
    tracker lives in the driver, another process)."""

    def __init__(self, cfg: RunConfig, readout: Readout):
        self.cfg, self.readout = cfg, readout
        self.backend = load_backend(cfg.backend, cfg.backend_options(cfg.model), readout.backend_kind)
        self.budget = cfg.kv_budget_tokens or self.backend.kv_budget_tokens()
        self.tracker = FailureTracker(self.backend.name)

    def __call__(self, group: pa.Table) -> pa.Table:
        items = sorted(
            (pickle.loads(b) for b in group.column("payload").to_pylist()), key=lambda it: it[0].pos
        )
        chunk = Prompted(
            [it[0] for it in items],
            [it[1] for it in items if it[1] is not None],
            {it[0].pos: it[2] for it in items if it[2]},
        )
        warm0 = self.backend.warm_tokens
        scored = score_chunk(
            chunk, self.readout, self.backend, self.budget, self.cfg.max_branches,
            tracker=self.tracker,
        )  # fmt: skip
        return stage_table(
            scored.records, chunk.rows, self.readout, self.backend.warm_tokens - warm0, scored.unique_tokens
        )

    def __del__(self):
        backend = getattr(self, "backend", None)
        if backend is not None:
            backend.close()


def stage_table(
    records: list[dict[str, Any]], rows: list, readout: Readout, warm: int, unique: int
) -> pa.Table:
    """Records of `rows` (in their order) → a staged table: the output columns, input position and
    record index (to restore input order), kept values (pickled: any type survives until the final
    writer infers it, as in a single-machine run), the backend's warm-up tokens and the planner's unique
    tokens (on the first row)."""
    pos = [r.pos for r in rows for _ in range(readout.n_records(r))]
    qidx = [i for r in rows for i in range(readout.n_records(r))]
    if len(pos) != len(records):
        raise RuntimeError(f"{len(records)} records for {len(rows)} rows that need {len(pos)}")
    cols = {f.name: pa.array([r[f.name] for r in records], type=f.type) for f in readout.schema}
    cols["_pos"] = pa.array(pos, pa.int64())
    cols["_qidx"] = pa.array(qidx, pa.int32())
    cols["_kept"] = pa.array([pickle.dumps({k: r[k] for k in readout.keep}) for r in records], pa.binary())
    first = [i == 0 for i in range(len(records))]
    cols["_warm"] = pa.array([warm if f else 0 for f in first], pa.int64())
    cols["_unique"] = pa.array([unique if f else 0 for f in first], pa.int64())
    return pa.table(cols, schema=stage_schema(readout))
