"""evaluation/report.py: the commit an eval names, clean or `+dirty`, in a real git checkout."""

from __future__ import annotations

import subprocess

from openjev_batch.evaluation.report import commit


def _git(repo, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false", *args],
        cwd=repo, check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip


def test_only_a_changed_tracked_file_makes_the_checkout_dirty(tmp_path):
    # a clean checkout holding the user's own outputs (untracked) was reported "+dirty" (new-user trial)
    repo = tmp_path / "repo"
    (repo / "pkg").mkdir(parents=True)
    _git(repo, "init", "-q")
    (repo / "pkg" / "code.py").write_text("x = 1\n")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    sha = _git(repo, "rev-parse", "--short", "HEAD")
    assert commit(repo / "pkg") == sha
    (repo / "evals").mkdir()
    (repo / "evals" / "report.json").write_text("{}")  # an eval's output, never added
    (repo / "scratch.jsonl").write_text("{}\n")
    assert commit(repo / "pkg") == sha
    (repo / "pkg" / "code.py").write_text("x = 2\n")  # a tracked file changed: the code is not the commit's
    assert commit(repo / "pkg") == f"{sha}+dirty"
    _git(repo, "checkout", "-q", "--", "pkg/code.py")
    _git(repo, "rm", "-q", "--cached", "pkg/code.py")  # staged (a deletion): dirty too
    assert commit(repo / "pkg") == f"{sha}+dirty"


def test_outside_a_checkout_there_is_no_commit(tmp_path):
    assert commit(tmp_path) is None
