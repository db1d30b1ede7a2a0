"""Per-request overhead of prefill-only logprob requests in `sglang.Engine`, with a model too small to matter.

With a 2-layer, hidden-32 model the forward pass costs ~nothing, so the wall time of a W1-shaped job
(ROWS rows × 8 branches, 1,000-token prefix, 40-token suffix, 4 label ids) is the engine's host work:
tokenizer manager, ZMQ, scheduler, logprob readout. Runs on this CPU (sglang's CPU engine, test shim) or on
the H200. Prints one JSON line per variant: seconds, ms per request, cached tokens.

usage: python benchmarks/engine_overhead.py MODEL_DIR [variant ...]
variants: naive (prefix call, then branch call), n (first branch of each prefix, then the rest), nowarm
(one call); engine kwargs as key=value after `--`. Measured here (CPU engine, 64 rows): 15-18 ms a branch,
dominated by the CPU attention kernel, so the GPU profile (docs/benchmarks.md) is the one to read.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time


def workload(rows: int, vocab: int, seed: int = 0):
    rnd = random.Random(seed)
    pre = [[rnd.randrange(1000, vocab) for _ in range(1000)] for _ in range(rows)]
    out = []
    for p in pre:
        out.append([p + [rnd.randrange(1000, vocab) for _ in range(40)] for _ in range(8)])
    return out


def main() -> None:
    if len(sys.argv) < 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        raise SystemExit(0 if len(sys.argv) > 1 else 2)
    model = sys.argv[1]
    args = sys.argv[2:]
    kw_args = {}
    if "--" in args:
        i = args.index("--")
        for kv in args[i + 1 :]:
            k, v = kv.split("=", 1)
            kw_args[k] = json.loads(v) if v[:1] in "0123456789tfn[{" else v
        args = args[:i]
    variants = args or ["naive"]
    rows = int(os.environ.get("ROWS", "64"))
    import sglang
    import torch

    cuda = torch.cuda.is_available()
    kw = dict(model_path=model, log_level="warning", random_seed=0, skip_tokenizer_init=True)
    if cuda:
        kw.update(
            attention_backend="triton",
            sampling_backend="pytorch",
            disable_cuda_graph=True,
            mem_fraction_static=0.8,
        )
    else:
        kw.update(
            device="cpu",
            attention_backend="torch_native",
            disable_cuda_graph=True,
            dtype="float32",
            mem_fraction_static=0.05,
            max_total_tokens=200_000,
        )
    kw.update(kw_args)
    t0 = time.perf_counter()
    eng = sglang.Engine(**kw)
    start = time.perf_counter() - t0
    labels = [11, 12, 13, 14]
    sp = {"max_new_tokens": 0, "temperature": 0}

    def gen(ids):
        return eng.generate(
            input_ids=ids,
            sampling_params=sp,
            return_logprob=True,
            logprob_start_len=-1,
            token_ids_logprob=[labels] * len(ids),
        )

    wl = workload(rows, 150_000)
    gen([b[0] for b in wl[:4]])  # warm kernels
    for v in variants:
        for _ in range(200):  # refused while finished requests are still being retired
            if getattr(eng.flush_cache(), "success", True):
                break
            time.sleep(0.05)
        t = time.perf_counter()
        if v == "naive":
            outs = gen([b[0][:1000] for b in wl]) and gen([x for b in wl for x in b])
        elif v == "n":  # first branch as warm-up, then the rest
            outs = gen([b[0] for b in wl]) + gen([x for b in wl for x in b[1:]])
        elif v == "nowarm":
            outs = gen([x for b in wl for x in b])
        else:
            raise SystemExit(f"unknown variant {v}")
        dt = time.perf_counter() - t
        n = sum(len(b) for b in wl)
        cached = sum(o["meta_info"]["cached_tokens"] for o in outs)
        print(
            json.dumps(
                {
                    "variant": v,
                    "kw": kw_args,
                    "rows": rows,
                    "requests": n,
                    "s": round(dt, 3),
                    "ms_per_branch": round(1000 * dt / n, 3),
                    "cached": cached,
                    "start_s": round(start, 1),
                }
            ),
            flush=True,
        )
    eng.shutdown()


if __name__ == "__main__":
    main()
