#!/usr/bin/env bash
# On the device machine (H200): install the sglang 0.5.17 kit collected in /tmp/chunks (once per machine),
# then run benchmarks/bench_gpu.py STAGE... with the kit's environment. Results land in $OUT.
set -euo pipefail
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ ! -d /tmp/site/sglang ]; then
  cp .gpu/* /tmp/chunks/ 2>/dev/null || true
  bash /tmp/chunks/install.sh /tmp/chunks 2>&1 | tail -3
fi
export PYTHONPATH=/tmp/site:$PWD TVM_FFI_CACHE_DIR=/tmp/site/sglang_jit_cache_sm90a HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
python3 benchmarks/bench_gpu.py "$@" 2>&1 | grep --line-buffered -v -E "Warning|warn\(|^\s*$" | tee -a "$OUT/bench.log"
