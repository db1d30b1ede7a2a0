#!/usr/bin/env bash
# On the H200, after benchmarks/gpu.sh has installed the sglang kit and built /tmp/bench/qwen3-0.6b on this
# (still warm) machine: unpack Ray 2.60 (.gpuray/raysite.tar.xz: ray + jsonschema wheels installed for
# cp312, jars/rllib/serve/llm removed, xz'd), then `run --ray` with one GPU actor against the plain path
# (benchmarks/ray_overhead.py) on W1 and W3. Results → $OUT/ray-*.json.
set -uo pipefail
export OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d /tmp/raysite/ray ] || tar -xJf .gpuray/raysite.tar.xz -C /tmp
export PYTHONPATH=/tmp/site:/tmp/raysite:$PWD TVM_FFI_CACHE_DIR=/tmp/site/sglang_jit_cache_sm90a HF_HUB_OFFLINE=1 \
  PYTHONUNBUFFERED=1 RAY_USAGE_STATS_ENABLED=0
M=/tmp/bench/qwen3-0.6b
A=(-m $M -b sglang --attention-backend triton --engine-arg sampling_backend=pytorch --workers 1 --warm)
IFS=, read -ra SPECS <<< "${RAY_SPECS:-w1 256,w3 5000}"
for spec in "${SPECS[@]}"; do
  set -- $spec
  timeout 280 python3 benchmarks/ray_overhead.py "${A[@]}" --workload $1 --rows $2 --dir /tmp/ray-$1 \
    --out "$OUT/ray-$1.json" 2>&1 | grep -v -E "Warning|warn\(|^\s*$" | tail -25 | tee -a "$OUT/ray.log"
done
