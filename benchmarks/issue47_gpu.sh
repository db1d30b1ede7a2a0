#!/usr/bin/env bash
# Issue 47's two device calls, each inside one 600-s command (docs/benchmarks.md, "issue 47"). Run from a copy of
# this tree that sits inside the device's checkout of main (e.g. .gpu47/, carried), with the kit in .gpu/:
#   call 1: the fused-MoE tuner (bf16 + block-fp8, 8k/16k/32k tokens), then W3 5,000 × 3 + W1 64 × 8 on the
#           35B-A3B: main's product default (the checkout above, today's code) against this tree's default
#           (the fork in fork order) + the tuned configs, one engine each;
#   call 2: the exactness rerun (run 2's bounds) on this tree, block-fp8 W3/W1, the dense 0.6B rows,
#           prefix-first W3 cut short and reported as a rate.
# Every result names the card and the sglang release (common.save); the card's nvidia-smi line heads the log.
# Each step has its own timeout, so one that hangs leaves the rest their time. `TUNED=DIR` (call 2): tuned configs.
set -uo pipefail
export OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
step() { local t=$1 rc; shift; echo "=== $(date +%T) step (${t}s): $*"; timeout -k 10 "$t" "$@"; rc=$?; echo "=== rc $rc"; return $rc; }
if [ "${1:-}" = "--smoke" ]; then  # here, on the CPU: both Python scripts' plumbing (no nvidia-smi, no kit)
  export PYTHONPATH=$PWD/tests/shims:$PWD SGLANG_USE_CPU_ENGINE=1
  step 600 ${PYTHON:-python3} benchmarks/moe_tune_gpu.py --smoke --out /tmp/moe_tuned_smoke || exit 1
  step 900 ${PYTHON:-python3} benchmarks/hybrid_speed_gpu.py --smoke --moe-configs /tmp/moe_tuned_smoke --cut-s 600
  exit $?
fi
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
if [ ! -d /tmp/site/sglang ]; then
  tar -xJf .gpu/site.tar.xz -C /tmp && mkdir -p /tmp/chunks && cp -r .gpu/tok /tmp/chunks/
fi
python3 -c "import sys; sys.path.insert(0, '/tmp/site'); import sglang; print('sglang', sglang.__version__)"
G="bash benchmarks/gpu.sh"
case "${1:-}" in
  1)
    step 135 $G benchmarks/moe_tune_gpu.py --budget-s 105 --out /tmp/moe_tuned
    tar -C /tmp -czf "$OUT/moe_tuned.tgz" moe_tuned
    # today's default: main's own code and script (the device's checkout), same kit
    (cd .. && step 190 bash benchmarks/gpu.sh benchmarks/hybrid_speed_gpu.py --variant default --tag=-main)
    step 200 $G benchmarks/hybrid_speed_gpu.py --variant default --moe-configs /tmp/moe_tuned --tag=-fork2-tuned
    ;;
  2)
    step 190 $G benchmarks/hybrid_mis_exact_gpu.py --arch dense-cg moe-cg --controls
    if [ -n "${SHORT:-}" ]; then  # little device time left: block-fp8 W3 as a rate, no W1, no dense rows
      step 190 $G benchmarks/hybrid_speed_gpu.py --variant fp8-block --no-w1 --cut-s 40 ${TUNED:+--moe-configs "$TUNED"}
    else
      step 190 $G benchmarks/hybrid_speed_gpu.py --variant fp8-block --profile 40:6 ${TUNED:+--moe-configs "$TUNED"}
      step 60 $G benchmarks/hybrid_speed_gpu.py --variant dense
    fi
    [ -n "${PREFIX_FIRST:-}" ] && step 150 $G benchmarks/hybrid_speed_gpu.py --variant prefix-first --no-w1 --cut-s 60
    ;;
  *) echo "usage: benchmarks/issue47_gpu.sh 1|2" >&2; exit 2 ;;
esac
ls -la "$OUT"
