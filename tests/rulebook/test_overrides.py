"""Site overrides (`rules_overrides_dir/<rulebook>.yaml`): each kind changes behaviour on the real engine, every
error class is reported at its exact file:line:col, and the content hash and provenance record the override."""

from __future__ import annotations

import hashlib
import itertools
import shutil
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpuslo.engine.errors import RulebookError
from gpuslo.engine.events import Event, format_time, parse_event
from gpuslo.engine.rulebook import check_paths, load_directory, load_rulebook
from gpuslo.engine.rulebook.model import Rulebook
from gpuslo.engine.runtime import RuleEvaluator
from gpuslo.web.serialize import rulebook_json

RULES = Path(__file__).resolve().parents[2] / "rules"
T0 = datetime(2026, 11, 29, 12, 0, 0, tzinfo=UTC)
_ids = itertools.count()


def _event(kind: str, at: float = 0.0, **attrs: object) -> Event:
    return parse_event({"id": f"ov-{next(_ids)}", "kind": kind, "time": format_time(T0 + timedelta(seconds=at)),
                        "host": "node-7", "gpu": 3, "attrs": attrs})


def _fired(book: Rulebook, *events: Event) -> list[str]:
    runner = RuleEvaluator()
    runner.load([book])
    got = []
    for event in events:
        got += runner.tick(event.timestamp)
        got += runner.evaluate([event])
    return sorted(m.rule_id for m in got)


@pytest.fixture
def site(tmp_path: Path):
    """Writes `<name>.yaml` into a fresh overrides folder and returns the folder."""
    folder = tmp_path / "rules.d"
    folder.mkdir()

    def write(name: str, text: str) -> Path:
        (folder / f"{name}.yaml").write_text(textwrap.dedent(text))
        return folder

    return write


def _problems(call) -> list[str]:
    with pytest.raises(RulebookError) as caught:
        call()
    return [str(p) for p in caught.value.problems]


FR_071 = {"fragmentation_ratio": 0.71, "free_bytes": 2 << 30, "largest_free_bytes": 1 << 29}


# ---- behaviour ------------------------------------------------------------------------------------------


def test_raised_threshold_stops_an_fr_071_event_firing(site):
    shipped = load_rulebook(RULES / "memory.yaml")
    assert "fragmentation-high" in _fired(shipped, _event("mem_fragmentation", **FR_071))
    folder = site("memory", """\
        rulebook: memory
        rules:
          fragmentation-high:
            if: fragmentation_ratio > 0.8
    """)
    book = load_rulebook(RULES / "memory.yaml", overrides_dir=folder)
    assert "fragmentation-high" not in _fired(book, _event("mem_fragmentation", **FR_071))
    assert "fragmentation-high" in _fired(book, _event("mem_fragmentation", **{**FR_071, "fragmentation_ratio": 0.85}))
    (override,) = book.rule("fragmentation-high").overrides
    assert (override.kind, override.name, override.field, override.value) == (
        "rule", "fragmentation-high", "if", "fragmentation_ratio > 0.8")
    assert str(override.location) == f"{folder / 'memory.yaml'}:4:9"
    assert book.rule("cuda-oom").overrides == ()


def test_a_disabled_rule_never_fires_and_is_listed(site):
    folder = site("memory", """\
        rulebook: memory
        rules:
          cuda-oom: {enabled: false}
          oom-storm: {enabled: true}
    """)
    book = load_rulebook(RULES / "memory.yaml", overrides_dir=folder)
    oom = _event("cuda_oom", requested_bytes=2 << 30, free_bytes=1 << 20)
    assert _fired(book, oom) == ["cuda-oom-large-request"]
    assert book.disabled == ("cuda-oom",)
    assert "cuda-oom" not in [r.id for r in book.rules] and "oom-storm" in [r.id for r in book.rules]


def test_a_replaced_macro_changes_every_rule_that_uses_it(site):
    folder = site("memory", """\
        rulebook: memory
        macros:
          big_request: requested_bytes >= 4GiB
    """)
    book = load_rulebook(RULES / "memory.yaml", overrides_dir=folder)
    assert _fired(book, _event("cuda_oom", requested_bytes=2 << 30)) == ["cuda-oom"]
    assert _fired(book, _event("cuda_oom", requested_bytes=5 << 30)) == ["cuda-oom", "cuda-oom-large-request"]
    assert [o.name for o in book.rule("cuda-oom-large-request").overrides] == ["big_request"]
    assert book.rule("cuda-oom").overrides == ()  # it does not use the macro


def test_lists_can_be_appended_to_or_replaced(site):
    folder = site("probes", """\
        rulebook: probes
        lists:
          broken_states: {append: [degraded]}
    """)
    site("hardware", """\
        rulebook: hardware
        lists:
          application_xids: [13]
    """)
    probes = load_rulebook(RULES / "probes.yaml", overrides_dir=folder)
    degraded = _event("probe_status", probe="nvml", state="degraded")
    assert "probe-down" in _fired(probes, degraded)
    assert "probe-down" not in _fired(load_rulebook(RULES / "probes.yaml"), degraded)
    hardware = load_rulebook(RULES / "hardware.yaml", overrides_dir=folder)
    assert "xid-application" in _fired(hardware, _event("gpu_xid", xid=13))
    assert "xid-application" not in _fired(hardware, _event("gpu_xid", xid=31))
    assert [(o.field, o.value) for o in probes.overrides] == [("append", '["degraded"]')]


def test_count_and_within_of_a_count_rule(site):
    folder = site("memory", """\
        rulebook: memory
        rules:
          oom-storm: {count: 5, within: 10m}
    """)
    book = load_rulebook(RULES / "memory.yaml", overrides_dir=folder)
    ooms = [_event("cuda_oom", at=60.0 * i) for i in range(5)]
    assert _fired(load_rulebook(RULES / "memory.yaml"), *ooms[:3]).count("oom-storm") == 1
    assert "oom-storm" not in _fired(book, *ooms[:4])
    assert _fired(book, *ooms).count("oom-storm") == 1
    assert [o.field for o in book.rule("oom-storm").overrides] == ["count", "within"]


def test_the_condition_of_a_named_correlation_pattern(site):
    folder = site("memory", """\
        rulebook: memory
        rules:
          fragmentation-then-stall:
            all:
              frag: {if: "fragmentation_ratio > 0.8"}
    """)
    book = load_rulebook(RULES / "memory.yaml", overrides_dir=folder)
    chain = [_event("mem_fragmentation", **FR_071), _event("token_stall", at=1.8, gap_ms=640.0)]
    assert "fragmentation-then-stall" in _fired(load_rulebook(RULES / "memory.yaml"), *chain)
    assert "fragmentation-then-stall" not in _fired(book, *chain)
    assert [o.field for o in book.rule("fragmentation-then-stall").overrides] == ["all.frag.if"]


def test_severity_labels_and_lifecycle_reach_the_match(site):
    folder = site("memory", """\
        rulebook: memory
        rules:
          fragmentation-high:
            severity: critical
            labels: {site: lab-2, team: infra}
            repeat_interval: 1h
            flap_window: 2m
            resolve: {after: 15m}
    """)
    book = load_rulebook(RULES / "memory.yaml", overrides_dir=folder)
    runner = RuleEvaluator()
    runner.load([book])
    matches = runner.evaluate([_event("mem_fragmentation", **FR_071)])
    (match,) = [m for m in matches if m.rule_id == "fragmentation-high"]
    assert match.severity == "critical"
    assert dict(match.labels) == {"team": "infra", "site": "lab-2"}  # merged: shipped team replaced, site added
    assert (match.repeat_interval_s, match.flap_window_s, match.resolve_after_s) == (3600.0, 120.0, 900.0)
    assert match.rulebook_hash == book.content_hash
    assert [o.field for o in book.rule("fragmentation-high").overrides] == [
        "severity", "labels.site", "labels.team", "repeat_interval", "flap_window", "resolve"]


# ---- provenance -----------------------------------------------------------------------------------------


def test_the_content_hash_covers_the_override(site):
    source = (RULES / "memory.yaml").read_text()
    plain = load_rulebook(RULES / "memory.yaml")
    assert plain.content_hash == hashlib.sha256(source.encode()).hexdigest()
    assert plain.override_file is None and plain.overrides == ()
    folder = site("memory", "rulebook: memory\nrules: {oom-storm: {count: 4}}\n")
    first = load_rulebook(RULES / "memory.yaml", overrides_dir=folder)
    site("memory", "rulebook: memory\nrules: {oom-storm: {count: 5}}\n")
    second = load_rulebook(RULES / "memory.yaml", overrides_dir=folder)
    assert len({plain.content_hash, first.content_hash, second.content_hash}) == 3
    assert first.source == source and first.override_source == "rulebook: memory\nrules: {oom-storm: {count: 4}}\n"
    assert first.override_file == str(folder / "memory.yaml")
    # an overrides folder without a file for this rulebook changes nothing
    assert load_rulebook(RULES / "latency.yaml", overrides_dir=folder).content_hash == \
        load_rulebook(RULES / "latency.yaml").content_hash


def test_load_directory_applies_each_rulebooks_own_override(site):
    folder = site("memory", "rulebook: memory\nrules: {cuda-oom: {enabled: false}}\n")
    site("nccl", "rulebook: nccl\n")
    books, problems = load_directory(RULES, folder)
    assert problems == ()
    by_name = {b.name: b for b in books}
    assert by_name["memory"].disabled == ("cuda-oom",)
    assert by_name["nccl"].override_file is not None and by_name["nccl"].overrides == ()
    assert by_name["latency"].override_file is None


# ---- errors, with their exact location -------------------------------------------------------------------


def test_unknown_rule_id_macro_list_and_pattern_with_did_you_mean(site):
    folder = site("memory", """\
        rulebook: memory
        macros:
          big_reqest: requested_bytes > 1GiB
        lists:
          xids: [1]
        rules:
          fragmentation-hgh: {severity: info}
          fragmentation-then-stall:
            all:
              frg: {if: "fragmentation_ratio > 0.9"}
    """)
    path = folder / "memory.yaml"
    assert _problems(lambda: load_rulebook(RULES / "memory.yaml", overrides_dir=folder)) == [
        f"{path}:3:3: unknown macro 'big_reqest' (did you mean 'big_request'?)",
        f"{path}:5:3: unknown list 'xids' (rulebook 'memory' has no lists)",
        f"{path}:7:3: unknown rule id 'fragmentation-hgh' (did you mean 'fragmentation-high'?)",
        f'{path}:10:7: rule "fragmentation-then-stall": unknown pattern \'frg\' of rule '
        "'fragmentation-then-stall' (did you mean 'frag'?)",
        f"{RULES / 'memory.yaml'}:1:11: rulebook 'memory' not loaded: its site override {path} has problems",
    ]


def test_fields_that_cannot_be_overridden_or_do_not_apply(site):
    folder = site("memory", """\
        rulebook: memory
        rulbook: memory
        rules:
          oom-storm:
            summary: hi
            severty: info
            for: 5m
            enabled: "no"
    """)
    path = folder / "memory.yaml"
    assert _problems(lambda: load_rulebook(RULES / "memory.yaml", overrides_dir=folder))[:-1] == [
        f"{path}:2:1: unknown field 'rulbook' (did you mean 'rulebook'?)",
        f'{path}:5:5: rule "oom-storm": field \'summary\' cannot be overridden (overridable: enabled, severity, '
        "if, all, within, count, for, repeat_interval, flap_window, resolve, labels)",
        f"{path}:6:5: rule \"oom-storm\": field 'severty' cannot be overridden (did you mean 'severity'?)",
        f"{path}:7:5: rule \"oom-storm\": 'for' does not apply to rule 'oom-storm' (a count)",
        f"{path}:8:14: rule \"oom-storm\": 'enabled' must be true or false, got 'no'",
    ]


def test_a_bad_expression_is_type_checked_like_a_shipped_one(site):
    folder = site("memory", """\
        rulebook: memory
        rules:
          fragmentation-high:
            if: fragmentation_ratio > 'high'
          cuda-oom-large-request:
            if: "requested_bytes > 1GiB and free_byts < 1GiB"
    """)
    path = folder / "memory.yaml"
    assert _problems(lambda: load_rulebook(RULES / "memory.yaml", overrides_dir=folder))[:-1] == [
        f"{path}:4:31: rule \"fragmentation-high\": 'fragmentation_ratio' is a number field; it cannot be "
        "compared with string 'high'",
        # quoted: the column is that of the offending token inside the quotes
        f"{path}:6:37: rule \"cuda-oom-large-request\": unknown field 'free_byts' for event cuda_oom "
        "(did you mean 'free_bytes'?)",
    ]


def test_bad_values_are_checked_by_the_rulebook_schema_at_the_override(site):
    folder = site("memory", """\
        rulebook: memory
        rules:
          oom-storm: {count: 1, within: 5 parsecs, severity: loud}
    """)
    path = folder / "memory.yaml"
    assert _problems(lambda: load_rulebook(RULES / "memory.yaml", overrides_dir=folder))[:-1] == [
        f"{path}:3:22: rule \"oom-storm\": 'count': 1 is less than the minimum of 2",
        f"{path}:3:33: rule \"oom-storm\": '5 parsecs': unknown duration unit 'parsecs' (known: us, ms, s, m, h, d)",
        f"{path}:3:54: rule \"oom-storm\": severity 'loud' must be one of critical, error, warning, info",
    ]


def test_a_bad_macro_or_list_is_reported_where_the_override_wrote_it(site):
    folder = site("memory", """\
        rulebook: memory
        macros:
          big_request: requested_byts >= 4GiB
    """)
    site("hardware", """\
        rulebook: hardware
        lists:
          application_xids: [thirteen]
    """)
    problems = _problems(lambda: load_rulebook(RULES / "memory.yaml", overrides_dir=folder))
    assert problems[0].startswith(
        f"{folder / 'memory.yaml'}:3:16: rule \"cuda-oom-large-request\": in macro 'big_request': unknown field "
        f"'requested_byts' for event cuda_oom (used at {RULES / 'memory.yaml'}:")
    assert problems[0].endswith("(did you mean 'requested_bytes'?)")
    problems = _problems(lambda: load_rulebook(RULES / "hardware.yaml", overrides_dir=folder))
    assert problems[0].startswith(
        f"{folder / 'hardware.yaml'}:3:21: rule \"xid-application\": list 'application_xids' holds 'thirteen', "
        f"but 'xid' is a number field (used at {RULES / 'hardware.yaml'}:")


def test_unknown_or_mismatched_rulebook_names(site, tmp_path):
    folder = site("memry", "rulebook: memry\n")
    site("latency", "rulebook: memory\n")
    assert [str(p) for p in check_paths([RULES], folder)] == [
        f"{folder / 'memry.yaml'}:1:11: unknown rulebook 'memry': no rulebook of that name to override "
        "(did you mean 'memory'?)",
        f"{folder / 'latency.yaml'}:1:11: rulebook 'memory' does not match the file name: this file overrides "
        "rulebook 'latency' (write 'rulebook: latency')",
        f"{RULES / 'latency.yaml'}:1:11: rulebook 'latency' not loaded: its site override "
        f"{folder / 'latency.yaml'} has problems",
    ]


def test_yaml_errors_and_folder_mistakes(site, tmp_path):
    folder = site("memory", "rulebook: memory\nrules: [\n")
    problems = _problems(lambda: load_rulebook(RULES / "memory.yaml", overrides_dir=folder))
    assert problems[0].startswith(f"{folder / 'memory.yaml'}:3:1: YAML syntax error")
    assert [str(p) for p in check_paths([RULES], RULES)] == [
        f"{RULES}: the overrides folder must not be the rules folder (e.g. /etc/gpuslo/rules.d)"]
    assert [str(p) for p in load_directory(RULES, tmp_path / "absent")[1]] == [
        f"{tmp_path / 'absent'}: overrides folder is not a directory (rulebooks load without site overrides)"]


def test_a_broken_override_withholds_only_its_rulebook(site, tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(RULES, rules, ignore=shutil.ignore_patterns("*.test.yaml", "conftest.py"))
    folder = site("memory", "rulebook: memory\nrules: {oom-storm: {count: one}}\n")
    books, problems = load_directory(rules, folder)
    assert "memory" not in {b.name for b in books} and len(books) == len(load_directory(rules)[0]) - 1
    assert {p.location.file for p in problems} == {str(folder / "memory.yaml"), str(rules / "memory.yaml")}


def test_the_rulebook_json_shows_the_site_override(site):
    folder = site("memory", "rulebook: memory\nrules: {cuda-oom: {enabled: false}, oom-storm: {count: 4}}\n")
    data = rulebook_json(load_rulebook(RULES / "memory.yaml", overrides_dir=folder))
    path = folder / "memory.yaml"
    assert data["site_override"] == {"file": str(path), "disabled": ["cuda-oom"], "changes": [
        {"kind": "rule", "name": "cuda-oom", "field": "enabled", "value": "false", "location": f"{path}:2:29"},
        {"kind": "rule", "name": "oom-storm", "field": "count", "value": "4", "location": f"{path}:2:56"}]}
    storm = next(r for r in data["rules"] if r["id"] == "oom-storm")
    assert [o["field"] for o in storm["overridden"]] == ["count"]
    assert rulebook_json(load_rulebook(RULES / "memory.yaml"))["site_override"] is None
