"""The Jinja2 sandbox that renders rule summaries, shared by the rulebook validator and the explainer.

Rendering is bounded (engine/template_limits.py): every loop iteration, call and operator is a counted step
under a CPU deadline, no value grows past a size bound, and the output is at most MAX_SUMMARY_BYTES. A render
that goes past a bound raises RenderRefused; the explainer then stores the rule's default text.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sized
from typing import Any

from jinja2 import nodes
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.visitor import NodeTransformer

from gpuslo.engine.template_limits import (
    MAX_SUMMARY_BYTES,
    Budget,
    RenderRefused,
    bounded_filter,
    check_binop,
    check_call,
    checked,
)

_STEP = "gpuslo_step"  # the internal filter every loop item and `~` concatenation passes through
# Globals a summary may call; `lipsum`, `cycler`, `joiner` and `namespace` are left out (none bounds its size).
_GLOBALS = ("range", "dict")

__all__ = ["MAX_SUMMARY_BYTES", "RenderRefused", "SummaryEnvironment", "human_bytes", "summary_environment"]

# A summary made only of text and `{{ name.key.key }}` lookups (each optionally through the `bytes` filter),
# compiled to its pieces: a text, or (filter or None, path: the context name, then dict keys). Most shipped
# summaries are such; SummaryEnvironment.render_compiled renders them without Jinja's generated code and the
# sandbox's getattr (bench/RESULTS.md, (d) stress).
_Lookup = tuple[str | None, tuple[str, ...]]
_Plan = tuple[str | _Lookup, ...]
_PLAN = "gpuslo_plan"  # the attribute from_string sets on a compiled template: its _Plan, or None
_PLAIN = (str, int, float, bool)  # values whose text is str(value) in Jinja's output as here
_PLAN_FILTERS = frozenset({"bytes"})  # filters of one argument and no context: called as Jinja calls them
_UNDEFINED = object()


def _path(node: nodes.Node) -> tuple[str, ...] | None:
    """`event.attrs.xid` → ("event", "attrs", "xid"); None for any other expression, or a key that names a
    dict attribute (`items`, `get`, dunders): Jinja's getattr would find the method, not the key."""
    keys: list[str] = []
    while isinstance(node, nodes.Getattr):
        if hasattr(dict, node.attr):
            return None
        keys.append(node.attr)
        node = node.node
    if not isinstance(node, nodes.Name) or node.ctx != "load":
        return None
    return (node.name, *reversed(keys))


def _lookup(node: nodes.Node) -> _Lookup | None:
    if (isinstance(node, nodes.Filter) and node.name in _PLAN_FILTERS and node.node is not None
            and not (node.args or node.kwargs or node.dyn_args or node.dyn_kwargs)):
        path = _path(node.node)
        return None if path is None else (node.name, path)
    path = _path(node)
    return None if path is None else (None, path)


def _plan(tree: nodes.Template) -> _Plan | None:
    """The pieces of a template of text and plain lookups only; None for anything else."""
    pieces: list[str | _Lookup] = []
    for statement in tree.body:
        if not isinstance(statement, nodes.Output):
            return None
        for child in statement.nodes:
            if isinstance(child, nodes.TemplateData):
                pieces.append(child.data)
                continue
            lookup = _lookup(child)
            if lookup is None:
                return None
            pieces.append(lookup)
    return tuple(pieces)


def _render_plan(plan: _Plan, context: Mapping[str, Any], filters: Mapping[str, Any]) -> list[str] | None:
    """The output pieces Jinja would produce for this context, or None where it might differ (a name or an
    inner key that is missing, a value on the way that is not a dict, a value that is not a str, number, bool
    or None): the caller then renders with Jinja. A missing last key is Jinja's undefined: no text."""
    out: list[str] = []
    for piece in plan:
        if isinstance(piece, str):
            out.append(piece)
            continue
        name, path = piece
        value: Any = context
        for depth, key in enumerate(path):
            if type(value) is not dict:
                return None
            if key not in value:
                if depth == 0 or depth < len(path) - 1 or name is not None:
                    return None
                value = _UNDEFINED
                break
            value = value[key]
        if value is _UNDEFINED:
            continue  # str() of an undefined is ''
        if name is not None:
            value = filters[name](value)
        if value is None:
            out.append("?")  # the environment's finalize
        elif type(value) in _PLAIN:
            out.append(str(value))
        else:
            return None
    return out


def human_bytes(value: Any) -> str:
    """`2147483648` → `2.00 GiB` (the `bytes` filter of summaries); anything else is shown as it is."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "?" if value is None else str(value)
    size, unit = float(value), "B"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(size) < 1024 or unit == "PiB":
            break
        size /= 1024
    return f"{int(size)} B" if unit == "B" else f"{size:.2f} {unit}"


class _Steps(NodeTransformer):
    """Routes each `for` loop's items and each `~` concatenation through the step filter."""

    def visit_For(self, node: nodes.For) -> nodes.Node:
        self.generic_visit(node)
        node.iter = _step(node.iter)
        return node

    def visit_Concat(self, node: nodes.Concat) -> nodes.Node:
        self.generic_visit(node)
        return _step(node)


def _step(node: nodes.Node) -> nodes.Filter:  # jinja2 types For.iter as any Node
    return nodes.Filter(node, _STEP, [], [], None, None, lineno=node.lineno)


class SummaryEnvironment(ImmutableSandboxedEnvironment):
    """The immutable sandbox with every operation counted and sized (see the module docstring)."""

    intercepted_binops = frozenset({"*", "**", "+", "-", "/", "//", "%"})

    def __init__(self) -> None:
        # optimized=False: no constant folding at compile time, so every operation runs under the guards
        super().__init__(autoescape=False, finalize=lambda v: "?" if v is None else v, optimized=False)
        self.budget = Budget()
        self.filters["bytes"] = human_bytes
        self.filters = {name: bounded_filter(name, func, self.budget) for name, func in self.filters.items()}
        self.filters[_STEP] = self._stepped
        self.globals = {name: self.globals[name] for name in _GLOBALS}

    def _parse(self, source: str, name: str | None, filename: str | None) -> nodes.Template:
        tree = super()._parse(source, name, filename)
        result: nodes.Template = _Steps().visit(tree)
        return result

    def from_string(self, source: Any, globals: Any = None, template_class: Any = None) -> Any:  # noqa: A002
        """Compile as Jinja does, and note the template's plan when it is text and plain lookups only."""
        template = super().from_string(source, globals, template_class)
        if isinstance(source, str) and globals is None:
            setattr(template, _PLAN, _plan(self.parse(source)))
        return template

    def _stepped(self, value: Any) -> Any:
        self.budget.tick()
        if isinstance(value, str):
            return checked(value)
        return self._items(value)

    def _items(self, iterable: Any) -> Iterator[Any]:
        for item in iterable:
            self.budget.tick()
            yield item

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        self.budget.tick()
        check_binop(operator, left, right)
        return checked(super().call_binop(context, operator, left, right))

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        __self.budget.tick()
        method = getattr(__obj, "__wrapped__", __obj)  # the sandbox wraps str.format / str.format_map
        owner = getattr(method, "__self__", None)
        if isinstance(owner, str | list | tuple | dict):
            name = getattr(method, "__name__", "")
            if name == "join" and args and isinstance(args[0], Iterable) and not isinstance(args[0], Sized):
                args = (list(args[0]), *args[1:])  # a generator is measured once, then joined
            check_call(name, owner, args, kwargs, method=True)
        return checked(super().call(__context, __obj, *args, **kwargs))

    def render(self, template_text: str, context: Mapping[str, Any]) -> str:
        """Compile and render within the bounds (compiling is not counted: callers cache templates)."""
        return self.render_compiled(self.from_string(template_text), context)

    def render_compiled(self, template: Any, context: Mapping[str, Any]) -> str:
        """Render a template of this environment within the bounds; the output as one string."""
        self.budget.start()
        plan = getattr(template, _PLAN, None)
        planned = None if plan is None else _render_plan(plan, context, self.filters)
        pieces: list[str] = []
        size = 0
        for piece in planned if planned is not None else template.generate(**context):
            self.budget.tick()
            size += len(piece)
            if size > MAX_SUMMARY_BYTES:
                raise RenderRefused(f"the summary is longer than {MAX_SUMMARY_BYTES} characters")
            pieces.append(piece)
        text = "".join(pieces)
        if len(text.encode("utf-8", "surrogatepass")) > MAX_SUMMARY_BYTES:
            raise RenderRefused(f"the summary is longer than {MAX_SUMMARY_BYTES} bytes")
        return text


def summary_environment() -> SummaryEnvironment:
    """A bounded sandbox with gpuslo's filters; None renders as `?`."""
    return SummaryEnvironment()

