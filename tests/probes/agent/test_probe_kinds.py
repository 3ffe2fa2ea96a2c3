"""The probe table: every kind has the same face (its module's build_probe(arg, host)), every module that has one
is in the table, and the README's agent row lists exactly the kinds."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

from gpuslo.engine.errors import ProbeError
from gpuslo.probes.agent import ProbeSpec, load_probe
from gpuslo.probes.kinds import PROBE_KINDS
from gpuslo.probes.torch_allocator import AllocatorProbe, build_probe

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("name", list(PROBE_KINDS))
def test_every_kind_has_the_same_face(name: str) -> None:
    kind = PROBE_KINDS[name]
    assert kind.module == f"gpuslo.probes.{name}"
    build = importlib.import_module(kind.module).build_probe
    assert list(inspect.signature(build).parameters) == ["arg", "host"]
    probe_type = inspect.signature(build).return_annotation
    assert isinstance(probe_type, str) and probe_type != "Probe"  # a concrete probe class, typed


def test_every_module_defining_build_probe_is_in_the_table() -> None:
    defined = set()
    for path in (ROOT / "probes").rglob("*.py"):
        if re.search(r"^def build_probe\(", path.read_text(encoding="utf-8"), re.MULTILINE):
            part = path.relative_to(ROOT / "probes").parts[0]
            defined.add(part.removesuffix(".py"))
    assert defined == set(PROBE_KINDS)


def test_the_readme_lists_every_probe_kind_of_the_agent() -> None:
    row = next(line for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
               if line.startswith("| `gpuslo agent --server"))
    kinds = row.split("probes:", 1)[1]
    while (shorter := re.sub(r"\([^()]*\)", "", kinds)) != kinds:  # asides, innermost first, name no probe
        kinds = shorter
    listed = {item.split(":")[0].split("[")[0] for item in re.findall(r"`([a-z_]+[:\[][^`]*|[a-z_]+)`", kinds)}
    assert listed == set(PROBE_KINDS)


def test_the_allocator_reporter_has_the_face_and_says_why_it_cannot_run_here() -> None:
    probe = load_probe(ProbeSpec.parse("torch_allocator:interval=5,snapshot_min_interval=60"), "node-1")
    assert isinstance(probe, AllocatorProbe) and (probe.interval_s, probe.snapshot_min_interval_s) == (5.0, 60.0)
    (job,) = probe.jobs()
    assert (job.name, job.interval_s) == ("torch-allocator-sample", 5.0)
    with pytest.raises(ProbeError, match="torch_allocator: not started"):
        job.run()
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(ProbeError, match="PyTorch is not installed"):
            probe.start()


@pytest.mark.parametrize(("arg", "message"), [
    ("colour=red", "is not one of interval, snapshot_min_interval"),
    ("interval=soon", "is not a number of seconds"),
    ("interval=0", "interval must be positive"),
])
def test_bad_allocator_arguments_name_the_problem(arg: str, message: str) -> None:
    with pytest.raises(ProbeError, match=message):
        build_probe(arg, "node-1")
