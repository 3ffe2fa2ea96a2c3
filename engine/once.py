"""A cached attribute without functools.cached_property's lock, for objects made once per event."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

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
