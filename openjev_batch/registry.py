"""`Registry[T]`: things of one kind registered by name (mini-sglang's habit), so a new one is one file that
registers itself and no if/else chooses among them. It imports nothing of the package: it stands on the
lowest floor."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Generic, TypeVar

T = TypeVar("T")


class Registry(Generic[T]):
    """Name → T. `@REG.register("name")` adds a class or function (returned unchanged); `REG["name"]` gives
    it back (KeyError naming what is known for an unknown name); iteration gives the names in the order
    they registered."""

    def __init__(self, what: str) -> None:
        self.what = what  # what the things are, in the KeyError's text ("input format")
        self._items: dict[str, T] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(item: T) -> T:
            if name in self._items:
                raise ValueError(f"{self.what} {name!r} registered twice")
            self._items[name] = item
            return item

        return add

    def __getitem__(self, name: str) -> T:
        try:
            return self._items[name]
        except KeyError:
            raise KeyError(f"unknown {self.what} {name!r}; known: {', '.join(self._items)}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def items(self) -> list[tuple[str, T]]:
        return list(self._items.items())
