"""Small JSON/YAML files a job reads whole (`--questions`, `--config`): bounded reads, JSON first, YAML
with repeated keys, alias bombs and non-name keys refused."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError
from .values import no_duplicate_keys, read_at_most, yaml_alias_problem


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML (and JSON, a subset) loader that refuses a mapping with a repeated key: plain safe_load keeps
    the last value silently, which merged two options of one name into one."""

    def compose_document(self):
        node = super().compose_document()
        if node is not None and (problem := yaml_alias_problem(node)) is not None:
            raise yaml.composer.ComposerError(None, None, problem, node.start_mark)
        return node

    def construct_mapping(self, node, deep=False):
        # a merge key (`<<: *base`, YAML 1.1) was read as a key named "<<" ("Extra inputs are not permitted",
        # issue 34.18): PyYAML merges (flatten_mapping), the keys given here override the merged ones as YAML
        # says, and only these are checked for repeats
        own = [k for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"]
        self.flatten_mapping(node)
        keys = set()
        for k, _ in node.value:
            if not isinstance(k, yaml.ScalarNode):  # `? [1, 2]`: a list key was a TypeError traceback, exit 1
                raise yaml.constructor.ConstructorError(
                    None, None, f"a key must be a name, not a {k.id}", k.start_mark
                )
            if k.tag != "tag:yaml.org,2002:str":
                # a key here is always a name (a question id, noul criteria `true:`/`false:`, a choice option
                # `yes:`, an option of --config), so it keeps the text as written: YAML 1.1 reads unquoted
                # `yes:` / `off:` as booleans, `null:` as None (id "None") and `007:` as the number 7
                k.tag = "tag:yaml.org,2002:str"
            if any(k is o for o in own):
                key = self.construct_object(k, deep=deep)
                if key in keys:
                    raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", k.start_mark)
                keys.add(key)
        return super().construct_mapping(node, deep=deep)


def load_data_file(path: Path, what: str, limit: int, why: str = "") -> Any:
    """A small JSON or YAML file (`--questions`, `--config`): read at most `limit` bytes, JSON first, YAML
    with repeated keys refused. Raises ConfigError naming `what` and the file."""
    try:
        raw = read_at_most(path, limit)  # `-q /dev/zero` was read to its end (issue 25)
        if len(raw) > limit:
            raise ConfigError(f"{what} {path}: over {limit:,} bytes" + (f", {why}" if why else ""))
        # utf-8-sig: a byte-order mark at the start is not part of the first key
        text = raw.decode("utf-8-sig")
        try:
            # JSON first: PyYAML (YAML 1.1) refuses valid JSON — an escaped emoji `\ud83d\ude00` (json.dumps'
            # default) becomes two lone surrogates, a tab-indented file and a key over 1,024 characters
            # do not parse
            return json.loads(text, object_pairs_hook=no_duplicate_keys)
        except json.JSONDecodeError:
            return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506
    except FileNotFoundError:
        raise ConfigError(f"{what}: no such file {path}") from None
    except OSError as e:  # a folder, no permission, an I/O error: the job cannot start (no traceback)
        raise ConfigError(f"{what} {path}: cannot read: {e.strerror or e}") from None
    except RecursionError:  # PyYAML composes and constructs recursively, one frame per level
        raise ConfigError(f"{what} {path}: cannot parse: nested too deeply") from None
    except (yaml.YAMLError, ValueError) as e:  # ValueError: UnicodeDecodeError, a duplicate JSON key
        raise ConfigError(f"{what} {path}: cannot parse: {_one_line(e)}") from None


def _one_line(e: Exception) -> str:
    """A parse error in one line: PyYAML's message spans five (its context, the problem, the quoted source line
    and a caret), and a job error is one line (hostile trial, 2026-12-05)."""
    if isinstance(e, yaml.MarkedYAMLError) and e.problem_mark is not None:
        m = e.problem_mark
        said = "; ".join(x for x in (e.context, e.problem) if x)
        return f"{said} (line {m.line + 1}, column {m.column + 1})"
    return " ".join(str(e).split())
