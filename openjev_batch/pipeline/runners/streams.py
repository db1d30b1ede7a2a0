"""What flows through a runner's `score`, named once for the protocol and every runner.

- `Todo`: the loop's chunks still to do, (chunk index, rows).
- `OnProgress`: called as results arrive, with (branches, tokens) scored since the last call.
- `Scored`: (chunk index, records, info), `info` being the chunk's numbers not in its records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

Todo = Iterator[tuple[int, list]]
OnProgress = Callable[[int, int], None]
Scored = Iterator[tuple[int, list[dict[str, Any]], dict[str, int]]]
