"""Summary templates render within bounds (engine/template_limits.py): any failure or bound gives the default
text, never an exception out of the renderer, a huge string, or a stalled engine thread."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from types import MappingProxyType

import pytest

from gpuslo.engine.events import Event
from gpuslo.engine.explain import SummaryRenderer
from gpuslo.engine.rulebook.model import EventPattern, Rule, SingleEvent
from gpuslo.engine.template_limits import MAX_SUMMARY_BYTES
from gpuslo.engine.templates import RenderRefused, summary_environment

CONTEXT = {"event": {"host": "node-a", "message": "m" * 8000, "attrs": {"requested_bytes": 2147483648}},
           "group": {"host": "node-a"}, "collective": None}
HOSTILE = {
    "{{ '{0.__class__}'.format_map(event) }}": IndexError,
    "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}": RecursionError,
    "{% macro m(n) %}{% if n %}{{ m(n-1) }}{{ m(n-1) }}{% endif %}{% endmacro %}{{ m(60) }}": RenderRefused,
    "{{ event.host * 4000000 }}": RenderRefused,
    "{{ 10 ** 5000 }}": RenderRefused,
    "{% set x = 10 ** 1000 %}{{ x * x * x * x * x }}": RenderRefused,
    "{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}": RenderRefused,
    "{{ event.host|center(1000000000) }}": RenderRefused,
    "{{ event.host.ljust(1000000000) }}": RenderRefused,
    "{{ '{:>999999999}'.format(1) }}": RenderRefused,
    "{{ '{0:{1}}'.format(1, 999999999) }}": RenderRefused,
    "{{ '%999999999d' % 1 }}": RenderRefused,
    "{{ '%*d' % (999999999, 1) }}": RenderRefused,
    "{{ '%999999999d'|format(1) }}": RenderRefused,
    "{{ event.message|replace('m', event.message) }}": RenderRefused,
    "{{ event.message.replace('m', event.message) }}": RenderRefused,
    "{{ range(10000)|join(event.message) }}": RenderRefused,
    "{{ event.message.join(range(1000)|map('string')) }}": RenderRefused,
    "{% set a = event.message %}" + "{% set a = a ~ a %}" * 40 + "{{ a|length }}": RenderRefused,
    "{% set a = event.message %}" + "{% set a = a + a %}" * 40 + "{{ a|length }}": RenderRefused,
    "{{ [1]|batch(1000000000, 'x')|list }}": RenderRefused,
    "{{ [event.message] * 100000 }}": RenderRefused,
    "{% for i in range(3) %}{{ event.message }}{% endfor %}": RenderRefused,  # 24,000 characters > 16 KiB
    "{{ lipsum(100000) }}": Exception,  # not a global of the summary sandbox
    "{{ 1 / 0 }}": ZeroDivisionError,
}


@pytest.mark.parametrize("template", list(HOSTILE))
def test_a_hostile_template_is_refused_quickly_and_small(template: str) -> None:
    env = summary_environment()
    compiled = env.from_string(template)
    tracemalloc.start()
    try:
        with pytest.raises(HOSTILE[template]):
            env.render_compiled(compiled, CONTEXT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 1024 * 1024


def _rule(summary: str) -> Rule:
    from gpuslo.engine.errors import Location
    from gpuslo.engine.rulebook.model import Lifecycle

    return Rule(id="r", title="Title", slo="s", severity="info", when=SingleEvent(EventPattern("cuda_oom", None)),
                group_by=("host",), summary=summary, remediation="x", location=Location("t.yaml", 1, 1),
                labels=MappingProxyType({}), lifecycle=Lifecycle())


@pytest.mark.parametrize("template", list(HOSTILE))
def test_the_renderer_falls_back_to_the_default_text(template: str, make_event: Callable[..., Event]) -> None:
    event = make_event(message="m" * 8000)
    assert SummaryRenderer().render(_rule(template), event, {"host": "node-a"}) == "Title (host=node-a)"


@pytest.mark.parametrize(("template", "text"), [
    ("{{ '{:,}'.format(event.attrs.requested_bytes) }}", "2,147,483,648"),
    ("{{ '%.1f'|format(1.25) }} {{ '%5s' % 'x' }}", "1.2     x"),
    ("{{ event.attrs.requested_bytes|bytes }} {{ event.host|upper|center(10) }}", "2.00 GiB   NODE-A  "),
    ("{% for k in ['a', 'b'] %}{{ k ~ '!' }}{% endfor %} {{ ['x', 'y']|join(', ') }}", "a!b! x, y"),
    ("{{ (event.message * 2)|length }} {{ 2 ** 64 }} {{ event.host.replace('-', '_') }}",
     "16000 18446744073709551616 node_a"),
    ("{% if event.nope is defined %}no{% else %}{{ event.nope }}{% endif %}", ""),
])
def test_ordinary_templates_still_render(template: str, text: str) -> None:
    assert summary_environment().render(template, CONTEXT) == text


def test_a_summary_of_exactly_the_limit_is_kept(make_event: Callable[..., Event]) -> None:
    event = make_event(message="é" * 4096)  # 8 KiB of UTF-8
    rule = _rule("{{ event.message }}{{ event.message }}")
    assert SummaryRenderer().render(rule, event, {"host": "node-a"}) == "é" * 8192
    over = _rule("{{ event.message }}{{ event.message }}!")
    assert len(("é" * 8192).encode()) == MAX_SUMMARY_BYTES
    assert SummaryRenderer().render(over, event, {"host": "node-a"}) == "Title (host=node-a)"


def test_a_template_that_uses_up_its_budget_is_not_rendered_again(make_event: Callable[..., Event]) -> None:
    renderer = SummaryRenderer()
    rule = _rule("{% for a in range(1000) %}{% for b in range(1000) %}{% endfor %}{% endfor %}")
    calls = []
    real = renderer._render

    def counting(*args: object) -> str:
        calls.append(1)
        return real(*args)  # type: ignore[arg-type]

    renderer._render = counting  # type: ignore[method-assign]
    for _ in range(10):
        assert renderer.render(rule, make_event(), {"host": "node-a"}) == "Title (host=node-a)"
    assert len(calls) == 3  # COSTLY_STRIKES: then the default text without rendering


def test_a_render_that_burns_cpu_in_few_steps_is_refused_at_the_cpu_deadline() -> None:
    """Under MAX_STEPS but each step costly (a 30,000-piece split, sorted and joined: ~5x the deadline on a
    fast 2026 Xeon core, where a split alone had finished inside it): the CPU deadline, read every few steps,
    stops it, and a summary of a few steps never reads the clock (engine/template_limits.py, Budget)."""
    env = summary_environment()
    burner = "{% for i in range(2400) %}{{ ('ab' * 30000).split('a') | sort | join | length }}{% endfor %}"
    with pytest.raises(RenderRefused, match="of CPU") as refused:
        env.render(burner, CONTEXT)
    assert refused.value.costly
    assert env.render("{{ group.host }} {{ event.attrs.requested_bytes|bytes }}", CONTEXT) == "node-a 2.00 GiB"
