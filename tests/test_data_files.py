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


def test_yaml_merge_keys_merge_and_keys_given_override(tmp_path):
    """Issue 34.18: a merge key (`<<: *base`) was read as a key named "<<", so a questions file sharing
    fields through one failed with "Extra inputs are not permitted". It merges; a key given beside it
    overrides the merged one; a key given twice is still refused, and merged names stay as written."""
    import pytest

    from openjev_batch.errors import ConfigError

    q = tmp_path / "q.yaml"
    q.write_text(
        "base: &b\n  type: choice\n  instructions: Which?\n  criteria: {yes: a, no: b}\n"
        "other:\n  <<: *b\n  instructions: Which one?\n"
        "more:\n  <<: [*b, {type: choice}]\n"
    )
    qs = {x.qid: x for x in load_questions(q)}
    assert qs["other"].instructions == "Which one?" and qs["other"].options == ("yes", "no")
    assert qs["more"].options == ("yes", "no")  # merged names kept as written (safe_load: True, False)
    q.write_text("base: &b {type: noul, instructions: x}\nr: {<<: *b, instructions: y, instructions: z}\n")
    with pytest.raises(ConfigError, match="duplicate key 'instructions'"):
        load_questions(q)


def test_a_yaml_parse_error_is_one_line_naming_where(tmp_path):
    """Hostile trial (2026-12-05): PyYAML's errors span five lines (a tab, a self-referencing alias, a python tag);
    a job error is one line, with the line and column."""
    import pytest

    from openjev_batch.errors import ConfigError

    cases = {
        "q:\n\ttype: noul\n": "(line 2, column 1)",
        "q: !!python/object/apply:os.system ['true']\n": "python/object/apply",
        "q: [unclosed\n": "line 2",
    }
    for i, (text, said) in enumerate(cases.items()):
        f = tmp_path / f"q{i}.yaml"
        f.write_text(text)
        with pytest.raises(ConfigError) as e:
            load_questions(f)
        assert "\n" not in str(e.value) and "cannot parse" in str(e.value) and said in str(e.value), str(e.value)
