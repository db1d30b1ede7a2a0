"""`Registry[T]`: things of one kind registered by name (mini-sglang's habit), so a new one is one file that
registers itself and no if/else chooses among them. One style for every plug (readouts, backends, input
readers, output writers), after lm-eval's `Registry(name, base_cls=)`: a thing registered in place
(`@REG.register(name)`) or by where it lives (`REG.lazy(name, "module:obj")`, imported on its first lookup, so
an unused plug's heavy imports never run), each checked against the registry's base class. It imports nothing
of the package: it stands on the lowest floor."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class _Lazy(str):
    """A placeholder: where a registered thing lives ("package.module:name"), imported on first lookup."""


def _load(where: str) -> Any:
    module, _, attr = where.partition(":")
    return getattr(importlib.import_module(module), attr)


class Registry(Generic[T]):
    """Name → T. `@REG.register("name")` adds a class or function (returned unchanged); `REG.lazy("name",
    "module:obj")` adds one by where it lives; `REG["name"]` gives it back, importing a lazy one (KeyError
    naming what is known for an unknown name); iteration gives the names in the order they registered. With
    `base` (a class, or where it lives: "module:name", imported at the first check), what is added must be that
    class (or an instance of it): TypeError otherwise."""

    def __init__(self, what: str, base: type | str | None = None) -> None:
        self.what = what  # what the things are, in the KeyError's text ("input format")
        self.base = base
        self._items: dict[str, T | _Lazy] = {}

    def register(self, name: str) -> Callable[[T], T]:
        def add(item: T) -> T:
            # a lazy entry's module registering the thing itself fills its placeholder
            if name in self._items and not isinstance(self._items[name], _Lazy):
                raise ValueError(f"{self.what} {name!r} registered twice")
            self._items[name] = self._checked(name, item)
            return item

        return add

    def lazy(self, name: str, where: str) -> None:
        """Register `name` as the object `where` ("package.module:name") names, imported when first looked up."""
        if name in self._items:
            raise ValueError(f"{self.what} {name!r} registered twice")
        if ":" not in where:
            raise ValueError(f"{self.what} {name!r}: {where!r} is not 'module:name'")
        self._items[name] = _Lazy(where)

    def _checked(self, name: str, item: Any) -> Any:
        if isinstance(
            self.base, str
        ):  # a heavy base class (readouts.base imports pyarrow): when first needed
            self.base = _load(self.base)
        base: type | None = self.base  # type: ignore[assignment]  # a str was loaded above
        if base is not None and not (
            issubclass(item, base) if isinstance(item, type) else isinstance(item, base)
        ):
            raise TypeError(f"{self.what} {name!r}: {item!r} is not a {base.__name__}")
        return item

    def __getitem__(self, name: str) -> T:
        try:
            item = self._items[name]
        except KeyError:
            raise KeyError(f"unknown {self.what} {name!r}; known: {', '.join(self._items)}") from None
        if isinstance(item, _Lazy):
            self._items[name] = item = self._checked(name, _load(item))
        return item  # type: ignore[return-value]

    def __contains__(self, name: object) -> bool:
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def names(self) -> tuple[str, ...]:
        return tuple(self._items)

    def items(self) -> list[tuple[str, T]]:
        return [(name, self[name]) for name in self._items]
