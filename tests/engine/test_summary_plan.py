"""A summary of text and plain `{{ name.key }}` lookups renders from its plan (engine/templates.py) to exactly
the text Jinja renders; anything the plan cannot vouch for goes to Jinja."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from gpuslo.engine import templates
from gpuslo.engine.rulebook import load_directory
from gpuslo.engine.runtime import RuleEvaluator

ROOT = Path(__file__).resolve().parents[2]


def _jinja_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(templates, "_plan", lambda _tree: None)


def _outcome(env: templates.SummaryEnvironment, template: Any, context: dict[str, Any]) -> str:
    """The text, or the exception's type (the renderer stores the default text then)."""
    try:
        return env.render_compiled(template, context)
    except Exception as exc:  # noqa: BLE001  # any failure must be the same failure
        return f"raised {type(exc).__name__}"


def _both(source: str, context: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[str | None, str, str]:
    """(the plan's pieces joined, or None when it defers to Jinja; render_compiled's outcome; Jinja's)."""
    env = templates.summary_environment()
    template = env.from_string(source)
    plan = getattr(template, templates._PLAN)
    planned = None if plan is None else templates._render_plan(plan, context, env.filters)
    rendered = _outcome(env, template, context)
    with monkeypatch.context() as patch:
        _jinja_only(patch)
        jinja_env = templates.summary_environment()
        jinja = _outcome(jinja_env, jinja_env.from_string(source), context)
    return None if planned is None else "".join(planned), rendered, jinja


CONTEXT = {"event": {"host": "node-a", "big": 2147483648, "gpu": 3, "value": 97.5, "up": True, "none": None,
                     "items": "k",
                     "attrs": {"xid": 79, "detail": "fell off", "nested": {"a": 1}, "list": [1, 2]}},
           "group": {"host": "node-a"}, "collective": None}


@pytest.mark.parametrize(("source", "planned"), [
    ("GPU {{ event.gpu }} on {{ event.host }} (Xid {{ event.attrs.xid }}: {{ event.attrs.detail }})",
     "GPU 3 on node-a (Xid 79: fell off)"),
    ("{{ event.value }} {{ event.up }} {{ event.none }} {{ group.host }}", "97.5 True ? node-a"),
    ("plain text only\n", "plain text only"),
    ("{{ event.missing }}|{{ event.attrs.missing }}|", "||"),  # a missing last key: Jinja's undefined, ''
    ("{{ event.attrs.missing.deeper }}", None),  # an undefined's attribute: Jinja's
    ("{{ event.attrs.xid | bytes }} {{ event.none | bytes }} {{ event.host | bytes }}", "79 B ? node-a"),
    ("{{ event.big | bytes }} of {{ event.value | bytes }}", "2.00 GiB of 97 B"),
    ("{{ event.missing | bytes }}", None),
    ("{{ event.attrs.nested }} {{ event.attrs.list }}", None),  # not a str, number or bool
    ("{{ nothing }}", None),
])
def test_a_plan_renders_what_jinja_renders(source, planned, monkeypatch):
    got, rendered, jinja = _both(source, CONTEXT, monkeypatch)
    assert got == planned
    assert rendered == jinja


@pytest.mark.parametrize("source", [
    "{{ event.items }}",  # Jinja finds dict.items, not the key
    "{{ event.get }}", "{{ event.__class__ }}", "{{ event['host'] }}", "{{ event.host | upper }}",
    "{{ event.gpu + 1 }}", "{% if event.up %}up{% endif %}", "{% for k in event %}{{ k }}{% endfor %}",
    "{{ 'x' }}", "{% set h = event.host %}{{ h }}", "{{ event.host ~ '!' }}", "{{ event.big | bytes(1) }}",
    "{{ event.big | filesizeformat }}",
])
def test_anything_but_text_and_lookups_has_no_plan(source, monkeypatch):
    env = templates.summary_environment()
    assert getattr(env.from_string(source), templates._PLAN) is None
    _, rendered, jinja = _both(source, CONTEXT, monkeypatch)
    assert rendered == jinja


def _summaries(items: list[dict[str, Any]]) -> list[tuple[str, str, str]]:
    runner = RuleEvaluator()
    runner.load(load_directory(ROOT / "rules")[0])
    sys.path.insert(0, str(ROOT / "bench"))
    import engine_workload as workload

    events = [workload.to_event(item) for item in items]
    found = []
    for start in range(0, len(events), 500):
        found += [(m.rule_id, m.group_key, m.summary) for m in runner.evaluate(events[start:start + 500])]
    return found


def test_the_shipped_rulebooks_store_the_same_summaries(monkeypatch):
    sys.path.insert(0, str(ROOT / "bench"))
    import engine_workload as workload

    items = workload.mixed(6000, seed=11) + workload.incidents(3000, prefix="plan")
    planned_renders = Counter[str]()
    real = templates._render_plan

    def counted(plan, context, filters):
        out = real(plan, context, filters)
        planned_renders[str(out is not None)] += 1
        return out

    monkeypatch.setattr(templates, "_render_plan", counted)
    fast = _summaries(items)
    assert planned_renders["True"] > 1000, planned_renders  # the plan is what renders most of them
    with monkeypatch.context() as patch:
        _jinja_only(patch)
        jinja = _summaries(items)
    assert len(fast) > 2000
    assert fast == jinja


def test_a_none_on_the_way_goes_to_jinja(monkeypatch):
    """`collective` is None for most rules: the plan defers, and Jinja's own text (an undefined: '') is kept."""
    got, rendered, jinja = _both("{{ collective.root }}", CONTEXT, monkeypatch)
    assert got is None
    assert rendered == jinja == ""
