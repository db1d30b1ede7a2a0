#!/usr/bin/env bash
# The real runs committed under evals/results/ (CPU, hf backend, float32). Usage: bash evals/run_real.sh [NAME...]
# Each writes evals/results/<name>/{report.json,report.md,reliability.png,predictions.parquet} (committed; rescore
# without a model: evals/rescore.py) and questions.jsonl (git-ignored; the same command rebuilds it exactly).
set -euo pipefail
cd "$(dirname "$0")/.."
E=".venv/bin/python -m openjev_batch eval"
R=evals/results
[ -f evals/data/mmlu_test.parquet ] || .venv/bin/python evals/make_mmlu.py
[ -f examples/data/boolq.jsonl ] || .venv/bin/python examples/make_real_data.py --datasets boolq
run() {
  case "$1" in
    boolq-smollm2) $E examples/data/boolq.jsonl -o $R/boolq-val_smollm2-135m_hf-cpu -m smollm2-135m -b hf \
                     --device cpu --calibrate 0.5 --seed 42 --no-progress ;;
    mmlu-smollm2)  $E evals/data/mmlu_test.parquet -o $R/mmlu-test-s1000-0shot_smollm2-135m_hf-cpu -m smollm2-135m \
                     -b hf --device cpu --sample 1000 --seed 42 --calibrate 0.5 --no-progress ;;
    mmlu5-smollm2) $E evals/data/mmlu_test.parquet -o $R/mmlu-test-s1000-5shot_smollm2-135m_hf-cpu -m smollm2-135m \
                     -b hf --device cpu --sample 1000 --seed 42 --shots 5 --dev evals/data/mmlu_dev.parquet \
                     --calibrate 0.5 --no-progress ;;
    mmlu-qwen)     $E evals/data/mmlu_test.parquet -o $R/mmlu-test-s1000-0shot_qwen2.5-0.5b_hf-cpu -m qwen2.5-0.5b \
                     -b hf --device cpu --sample 1000 --seed 42 --calibrate 0.5 --no-progress ;;
    boolq-qwen)    $E examples/data/boolq.jsonl -o $R/boolq-val_qwen2.5-0.5b_hf-cpu -m qwen2.5-0.5b -b hf \
                     --device cpu --calibrate 0.5 --seed 42 --no-progress ;;
    *) echo "unknown run $1" >&2; return 2 ;;
  esac
}
for name in "${@:-boolq-smollm2 mmlu-smollm2 mmlu5-smollm2 mmlu-qwen boolq-qwen}"; do
  for n in $name; do run "$n"; done
done
