"""data_files.py: question ids and option names in YAML are names, kept as written."""

from openjev_batch.readouts.label_logprobs.questions import load_questions


def test_yaml_keys_are_names_as_written_not_numbers_nulls_or_booleans(tmp_path):
    """YAML 1.1 read `null:` as None (question id "None"), `007:` as 7 and `1:` as the number 1 (issue 25's
    leftover); `yes:` as True was already kept as written."""
    q = tmp_path / "q.yaml"
    body = "  type: choice\n  instructions: Which?\n  criteria: {yes: a, 007: b, null: c, 1.50: d}\n"
    q.write_text("".join(f"{k}:\n{body}" for k in ("1", "null", "007", "yes", "~")))
    qs = load_questions(q)
    assert [x.qid for x in qs] == ["1", "null", "007", "yes", "~"]
    assert qs[0].options == ("yes", "007", "null", "1.50")
