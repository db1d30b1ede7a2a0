"""serve/routes.py's endpoints (through app.serve) over any readout: a third readout, written here with a
request reader of its own (its `Request`), is served with no edit under serve/ (issue 46.6): its body shape, its
refusals with their field, and its records."""

from __future__ import annotations

import threading
from dataclasses import dataclass, fields, replace
from typing import Any, ClassVar

import httpx
import pytest

from openjev_batch.api import Classifier
from openjev_batch.readouts.base import FieldError, RequestReader
from openjev_batch.readouts.label_logprobs import LabelLogprobs
from openjev_batch.serve.app import Served, Stop, serve
from openjev_batch.serve.limits import Limits


@dataclass(frozen=True)
class AskReader(RequestReader):
    """A body `{"text": …, "ask": …}`: one yes/no question about one text."""

    readout: Any
    fields: ClassVar[tuple[str, ...]] = ("text", "ask")

    @classmethod
    def held(cls, readout: Any, cfg: Any) -> AskReader:
        return cls(readout)

    def row(self, body: dict[str, Any], limits: Any) -> Any:
        if unknown := sorted(set(body) - set(self.fields)):
            raise FieldError(f"{unknown[0]}: not a field (a request has text, ask)", unknown[0])
        if not isinstance(body.get("ask"), str):
            raise FieldError("ask: a yes/no question, as text", "ask")
        return self.readout.parse_row(0, {"id": "asked", "state": body.get("text"),
                                          "questions": {"ask": {"type": "noul", "instructions": body["ask"]}}})  # fmt: skip


@dataclass(frozen=True)
class Ask(LabelLogprobs):
    """The third readout: label logprobs' reading, its own request body (AskReader)."""

    Request = AskReader


@pytest.fixture(scope="module")
def ask_server(tiny_model):
    """The third readout over a Classifier's held parts, its server on a free port in a thread."""
    clf = Classifier(str(tiny_model), "hf", threads=1)
    held = clf.held()
    held = replace(held, readout=Ask(**{f.name: getattr(held.readout, f.name) for f in fields(held.readout)}))
    lines: list[str] = []
    stop = Stop()  # not installed: the test ends the server through it
    args = (held, Ask.Request.held(held.readout, held.cfg), Limits(), "127.0.0.1", 0, Served("tiny", "tiny"), stop,
            lines.append)  # fmt: skip
    t = threading.Thread(target=serve, args=args, daemon=True)
    t.start()
    while not lines:
        assert t.is_alive(), "the server ended before serving"
        t.join(0.1)
    yield "http://" + lines[0].split("http://", 1)[1].split()[0], clf
    stop.server.should_exit = True
    t.join(60)
    clf.close()


def test_a_third_readout_is_served_with_no_edit_under_serve(ask_server):
    url, clf = ask_server
    r = httpx.post(url + "/v1/records", json={"text": "I was charged twice.", "ask": "Is it about money?"}, timeout=120)
    assert r.status_code == 200, r.text
    (rec,) = r.json()["answers"]
    want = clf.run([{"id": "asked", "state": "I was charged twice."}],
                   {"ask": {"type": "noul", "instructions": "Is it about money?"}}).to_dicts()[0]  # fmt: skip
    assert (rec["id"], rec["question_id"], rec["answer"]) == ("asked", "ask", want["answer"])
    assert rec["p_true"] == pytest.approx(want["p_true"], abs=1e-6)
    bad = httpx.post(url + "/v1/records", json={"text": "x", "ask": "y", "state": "z"}, timeout=30)
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "state", bad.text
    assert httpx.post(url + "/v1/records", json={"text": "x"}, timeout=30).json()["error"]["field"] == "ask"


def test_serve_names_no_readout_and_reads_no_private_field():
    """serve/ imports `readouts.base` alone of the readouts, never the API module, and reads no private
    attribute of another object (it took `clf._options` and `clf.runner.held_prompter`: now Classifier.held())."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "openjev_batch" / "serve"
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and "readouts" in node.module:
                assert node.module == "readouts.base" and node.level == 2, (path.name, node.module)
            if isinstance(node, ast.ImportFrom):
                assert node.module != "api", path.name
            if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__"):
                assert isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"), (path.name, node.attr)
