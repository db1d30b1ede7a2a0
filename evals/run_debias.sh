#!/usr/bin/env bash
# The before/after order-debiasing runs behind evals/results/debias_smollm2-135m_hf-cpu/ (issue 32.2): CPU, hf,
# float32, smollm2-135m. MMLU test --sample 300 --seed 42 zero-shot (eval): plain on all 300, --debias-order 2
# and 4 on the first 100 of them (--limit 100: the sample's first 100 in file order, subjects abstract_algebra
# to high_school_macroeconomics); SST-2 validation's first 300 rows (run --limit 300), plain and 2. The
# 2-core machine was shared with other jobs (load 5-11: the plain MMLU run took 28 min, the debiased 100s 5
# and 16 min with --threads 1), hence the small samples. Then: python evals/debias_table.py (paired: each task
# over the questions every run answered).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
D=evals/results/debias_smollm2-135m_hf-cpu
[ -f evals/data/mmlu_test.parquet ] || $PY evals/make_mmlu.py --splits test
[ -f examples/data/sst2.jsonl ] || $PY examples/make_real_data.py --datasets sst2
MMLU=(eval evals/data/mmlu_test.parquet -m smollm2-135m -b hf --device cpu --sample 300 --seed 42 --no-progress --force)
SST2=(run examples/data/sst2.jsonl -q examples/sst2_questions.yaml -m smollm2-135m -b hf --device cpu --keep label
      --limit 300 --no-progress)
$PY -m openjev_batch "${MMLU[@]}" -o $D/mmlu-s300-k1
$PY -m openjev_batch "${SST2[@]}" -o $D/sst2-k1.parquet
$PY -m openjev_batch "${SST2[@]}" -o $D/sst2-k2.parquet --debias-order 2
$PY -m openjev_batch "${MMLU[@]}" -o $D/mmlu-s300-k2 --limit 100 --debias-order 2 --threads 1
$PY -m openjev_batch "${MMLU[@]}" -o $D/mmlu-s300-k4 --limit 100 --debias-order 4 --threads 1
rm -f $D/mmlu-s300-k*/questions.jsonl  # eval's input rows, rebuilt from the benchmark: not committed
