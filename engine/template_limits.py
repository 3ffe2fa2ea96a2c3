"""The bounds a summary template renders within: size of every value it builds, loop steps, CPU time.

Each guard raises RenderRefused before the operation would allocate past its bound, so one template cannot
stall the engine or fill its memory (`{{ event.host * 4000000 }}`, `{{ 9 ** 9 ** 9 }}`, nested loops).
"""

from __future__ import annotations

import re
import string
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sized
from typing import Any

MAX_SUMMARY_BYTES = 16 * 1024  # a longer rendered summary is refused (the default text is stored instead)
MAX_VALUE_CHARS = 64 * 1024  # the longest string, list or dict a template may build on its way
MAX_INT_BITS = 4096  # the largest integer a template may compute (about 1,233 digits)
MAX_STEPS = 10_000  # loop iterations, calls and operators of one render
MAX_CPU_S = 0.25  # CPU time of one render, compiling included
_CLOCK_EVERY = 32  # steps between reads of the thread's CPU clock
_WIDTH_METHODS = frozenset({"center", "ljust", "rjust", "zfill", "expandtabs"})  # str methods sized by a number
_WIDTH_FILTERS = frozenset({"center", "indent", "wordwrap", "batch", "slice"})  # filters sized by a number
_PERCENT_WIDTH = re.compile(r"%[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?")


class RenderRefused(Exception):
    """A render went past one of the bounds; the message says which. `costly`: it ran out of steps or CPU time
    (whatever the event, such a template costs its whole budget on every render)."""

    def __init__(self, message: str, *, costly: bool = False):
        super().__init__(message)
        self.costly = costly


class Budget:
    """The steps and CPU time left to the render running on this thread (one per thread).

    The thread's CPU clock is a system call (no vDSO), and the engine thread makes it while holding the GIL:
    it is read every _CLOCK_EVERY steps and the deadline is armed at the first read, so a short render (every
    shipped summary) reads no clock at all. The steps before it are not timed; each is bounded in size.
    """

    def __init__(self) -> None:
        self._local = threading.local()

    def start(self) -> None:
        self._local.deadline = None
        self._local.steps = 0

    def tick(self) -> None:
        """One more step; refuses past MAX_STEPS or the CPU deadline."""
        local = self._local
        local.steps = getattr(local, "steps", 0) + 1
        if local.steps > MAX_STEPS:
            raise RenderRefused(f"more than {MAX_STEPS} loop iterations, calls and operators", costly=True)
        if local.steps % _CLOCK_EVERY == 0:
            now = time.thread_time()
            deadline = getattr(local, "deadline", None)
            if deadline is None:
                local.deadline = now + MAX_CPU_S
            elif now > deadline:
                raise RenderRefused(f"rendering took more than {MAX_CPU_S:g}s of CPU", costly=True)


def checked(value: Any) -> Any:
    """`value`, refused when it is larger than a template may build."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise RenderRefused(f"an integer of more than {MAX_INT_BITS} bits")
    if isinstance(value, str | bytes | list | tuple | dict | set | frozenset) and len(value) > MAX_VALUE_CHARS:
        raise RenderRefused(f"a value of {len(value)} items (more than {MAX_VALUE_CHARS})")
    return value


def _length(value: Any) -> int:
    return len(value) if isinstance(value, Sized) else 0


def _refuse_over(size: int, what: str) -> None:
    if size > MAX_VALUE_CHARS:
        raise RenderRefused(f"{what} would build {size} items (more than {MAX_VALUE_CHARS})")


def check_binop(op: str, left: Any, right: Any) -> None:
    """Refuse `*` and `**` whose result would be too large before Python computes it."""
    ints = all(isinstance(v, int) and not isinstance(v, bool) for v in (left, right))
    if op == "*" and ints:
        if left.bit_length() + right.bit_length() > MAX_INT_BITS:
            raise RenderRefused(f"an integer of more than {MAX_INT_BITS} bits")
    elif op == "*":
        for seq, times in ((left, right), (right, left)):
            if isinstance(times, int) and isinstance(seq, str | bytes | list | tuple):
                _refuse_over(len(seq) * max(times, 0), "'*'")
    elif op == "**" and ints and right > 0 and abs(left) > 1:
        if left.bit_length() * right > MAX_INT_BITS:
            raise RenderRefused(f"an integer of more than {MAX_INT_BITS} bits")
    elif op == "%" and isinstance(left, str):
        check_percent(left, right)


def _numbers(args: Any) -> Iterator[int]:
    values = args.values() if isinstance(args, Mapping) else args if isinstance(args, tuple) else (args,)
    return (v for v in values if isinstance(v, int) and not isinstance(v, bool))


def check_percent(text: str, args: Any) -> None:
    """`'%99999999d' % 1` and `'%*d' % (10**9, 1)` build huge strings: refuse widths past the bound."""
    for match in _PERCENT_WIDTH.finditer(text):
        for width in match.groups():
            if width == "*" and any(abs(n) > MAX_VALUE_CHARS for n in _numbers(args)):
                raise RenderRefused("a '%*' width past the bound")
            if width and width != "*" and int(width) > MAX_VALUE_CHARS:
                raise RenderRefused(f"a '%' width of {width}")


def check_format(text: str) -> None:
    """`'{:>99999999}'.format(1)`: refuse widths past the bound and nested `{}` in format specs."""
    for _literal, _field, spec, _conversion in string.Formatter().parse(text):
        if not spec:
            continue
        if "{" in spec:
            raise RenderRefused("nested '{}' in a format spec")
        if any(int(width) > MAX_VALUE_CHARS for width in re.findall(r"\d+", spec)):
            raise RenderRefused(f"a format width in '{spec}' past the bound")


def _growth(name: str, value: Any, args: tuple[Any, ...]) -> int:
    """The size `value|name(*args)` (or `value.name(*args)`) would have, for the filters that multiply."""
    text = value if isinstance(value, str) else ""
    if name == "replace" and len(args) >= 2 and isinstance(args[0], str):
        count = text.count(args[0]) if args[0] else len(text) + 1
        return len(text) + count * len(str(args[1]))
    if name == "indent" and args:
        return len(text) + (text.count("\n") + 1) * (_length(args[0]) or abs(int(args[0] or 0)))
    if name == "join" and isinstance(value, Iterable) and not isinstance(value, str):
        items = list(value)
        sep = args[0] if args else ""
        return sum(len(str(i)) for i in items) + len(items) * _length(sep)
    if name == "join" and isinstance(value, str) and args:  # str.join: `sep.join(items)`
        items = list(args[0]) if isinstance(args[0], Iterable) else []
        return sum(len(str(i)) for i in items) + len(items) * len(value)
    if name == "wordwrap" and len(args) >= 3:
        return len(text) * (1 + _length(args[2]))
    return 0


def check_call(name: str, value: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any], *, method: bool) -> None:
    """Refuse a filter or string-method call whose result would be too large, before it runs."""
    numbers = list(_numbers(args)) + list(_numbers(dict(kwargs)))
    if name in (_WIDTH_METHODS if method else _WIDTH_FILTERS) and any(abs(n) > MAX_VALUE_CHARS for n in numbers):
        raise RenderRefused(f"'{name}' with an argument past {MAX_VALUE_CHARS}")
    if name in ("format", "format_map") and isinstance(value, str):
        if method:
            check_format(value)
        else:
            check_percent(value, kwargs or args)
    _refuse_over(_growth(name, value, args), f"'{name}'")


def bounded_filter(name: str, func: Callable[..., Any], budget: Budget) -> Callable[..., Any]:
    """`func` (a Jinja filter) with its size checked before and after, each call counted as a step."""

    def run(*args: Any, **kwargs: Any) -> Any:
        budget.tick()
        value_at = _value_index(func)
        value = args[value_at] if len(args) > value_at else None
        if name == "join" and isinstance(value, Iterable) and not isinstance(value, Sized):
            value = list(value)  # a generator (`map`, `select`) is measured once, then joined
            args = (*args[:value_at], value, *args[value_at + 1:])
        check_call(name, value, args[value_at + 1:], kwargs, method=False)
        return checked(func(*args, **kwargs))

    for attr in ("jinja_pass_arg",):  # keeps @pass_context / @pass_environment / @pass_eval_context working
        if hasattr(func, attr):
            setattr(run, attr, getattr(func, attr))
    return run


def _value_index(func: Callable[..., Any]) -> int:
    """Where the filtered value sits in the arguments (after the context a `pass_*` filter receives)."""
    return 1 if hasattr(func, "jinja_pass_arg") else 0
