"""`gpuslo probe logs`: through click's runner and as a real process reading its standard input."""

from __future__ import annotations

import json
import subprocess
import sys

from click.testing import CliRunner
from logprobe_helpers import FIXTURES, fixture_bytes

from gpuslo.cli.probe_logs import logs_command
from gpuslo.engine.events import parse_event


def test_once_prints_one_json_event_per_incident(tmp_path):
    log = tmp_path / "train.log"
    log.write_bytes(fixture_bytes("nccl_timeouts.log") + fixture_bytes("negatives.log"))
    state = tmp_path / "state.json"
    result = CliRunner().invoke(logs_command, [str(log), "--once", "--format", "jsonl", "--host", "gpu7",
                                               "--state-file", str(state)])
    assert result.exit_code == 0, result.output
    events = [parse_event(json.loads(line)) for line in result.output.splitlines()]
    assert [(e.kind, e.host, e.rank) for e in events] == [
        ("nccl_timeout", "gpu7", 1), ("nccl_timeout", "gpu7", 0), ("nccl_timeout", "gpu7", 5),
        ("nccl_error", "gpu7", 3)]
    again = CliRunner().invoke(logs_command, [str(log), "--once", "--host", "gpu7", "--state-file", str(state)])
    assert again.exit_code == 0 and again.output == ""  # resumed at the end: nothing repeated


def test_stdin_dash_through_the_runner():
    result = CliRunner().invoke(logs_command, ["-", "--once", "--host", "h"],
                                input=fixture_bytes("kernel_xid.log"))
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["attrs"]["xid"] for line in result.output.splitlines()] == [79, 31, 94, 79]


def test_no_source_is_a_usage_error():
    result = CliRunner().invoke(logs_command, ["--once"])
    assert result.exit_code == 2 and "at least one PATH" in result.output


def test_real_process_reads_stdin_pipe():
    code = "from gpuslo.cli.probe_logs import logs_command; logs_command()"
    done = subprocess.run([sys.executable, "-c", code, "-", "--once", "--host", "h"],
                          input=fixture_bytes("torch_oom_new.log") + fixture_bytes("cuda_errors.log"),
                          capture_output=True, timeout=60, check=True)
    kinds = [json.loads(line)["kind"] for line in done.stdout.decode().splitlines()]
    # the second of cuda_errors.log is cuBLAS's ALLOC_FAILED by name: an OOM
    assert kinds == ["cuda_oom", "cuda_error", "cuda_oom", "cuda_error", "cuda_error", "cuda_error",
                     "cuda_graph_error", "cuda_graph_error", "cuda_oom"]
    assert FIXTURES.exists()
