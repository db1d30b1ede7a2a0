#!/usr/bin/env bash
# On the device machine (H200): install the sglang 0.5.17 kit (.gpu/site.tar.xz from benchmarks/pack_kit.sh,
# or the two chunks collected in /tmp/chunks) once per machine,
# then run one benchmark script with the kit's environment: `bash benchmarks/gpu.sh benchmarks/w1_gpu.py ARGS...`.
# Results land in $OUT.
set -euo pipefail
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
if [ ! -d /tmp/site/sglang ]; then
  if [ -f .gpu/site.tar.xz ]; then  # one-call kit from benchmarks/pack_kit.sh
    tar -xJf .gpu/site.tar.xz -C /tmp && mkdir -p /tmp/chunks && cp -r .gpu/tok /tmp/chunks/
  else  # the two-call kit: part_00 collected in /tmp/chunks by an earlier call
    cp -r .gpu/* /tmp/chunks/ 2>/dev/null || true
    bash /tmp/chunks/install.sh /tmp/chunks 2>&1 | tail -3
  fi
fi
if ls .gpu/whl/py_spy-*.whl >/dev/null 2>&1 && [ ! -x /tmp/pyspy/bin/py-spy ]; then
  python3 -m pip install -q --no-index --no-deps --target /tmp/pyspy .gpu/whl/py_spy-*.whl 2>&1 | tail -1
fi
export PYTHONPATH=/tmp/site:$PWD TVM_FFI_CACHE_DIR=/tmp/site/sglang_jit_cache_sm90a HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
[ $# -ge 1 ] && [ -f "$1" ] || { echo "usage: benchmarks/gpu.sh benchmarks/SCRIPT.py [ARGS...]" >&2; exit 2; }
python3 "$@" 2>&1 | grep --line-buffered -v -E "Warning|warn\(|^\s*$" | tee -a "$OUT/bench.log"
