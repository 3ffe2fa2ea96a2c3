"""A cached attribute without functools.cached_property's lock, for objects made once per event."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, cast, overload

T = TypeVar("T")


class computed_once(Generic[T]):  # noqa: N801  # used as a decorator, like functools.cached_property
    """Like functools.cached_property, without the RLock Python 3.11 takes at every first access (3.12 removed
    it): ~4 µs of the ~4.5 µs an Event's first `timestamp` cost under load (bench/RESULTS.md). Two threads
    racing compute the same value twice, and the second write stores an equal value."""

    def __init__(self, func: Callable[[Any], T]) -> None:
        self._func = func
        self._name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self._name = name

    @overload
    def __get__(self, instance: None, owner: type | None = None) -> computed_once[T]: ...

    @overload
    def __get__(self, instance: object, owner: type | None = None) -> T: ...

    def __get__(self, instance: object | None, owner: type | None = None) -> T | computed_once[T]:
        if instance is None:
            return self
        value = self._func(instance)
        instance.__dict__[self._name] = value  # a non-data descriptor: the instance's value shadows it from now on
        return value


class deferred_text:  # noqa: N801  # a field descriptor, named like one
    """A frozen dataclass's required text field that may also be given as a zero-argument callable, called at
    the first read and kept: a Match's summary (a sandboxed Jinja render) is rendered only if something reads
    it (the store reads only the latest match of each violation in a batch). Equality, repr and hash read it,
    so they render it first. The callable must not raise (SummaryRenderer.render never does)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = f"_{name}"

    def __get__(self, instance: object | None, owner: type | None = None) -> str:
        if instance is None:
            raise AttributeError(self._slot[1:])  # no class-level default: the dataclass field stays required
        value = instance.__dict__[self._slot]
        if not isinstance(value, str):
            value = instance.__dict__[self._slot] = value()
        return cast(str, value)

    def __set__(self, instance: object, value: str | Callable[[], str]) -> None:
        instance.__dict__[self._slot] = value  # a frozen dataclass's __init__ sets fields with object.__setattr__


def deferred(render: Callable[[], str]) -> str:
    """A render given to a deferred_text field, typed as the text it becomes at the first read."""
    return cast(str, render)
