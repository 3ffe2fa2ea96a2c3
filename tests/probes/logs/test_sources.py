"""Sources: file following through rotation and truncation, resume without repeats, garbage, journald, kmsg."""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

from logprobe_helpers import fixture_bytes

from gpuslo.engine.events import parse_event
from gpuslo.probes.logs.parser import LogParser, ParserSettings
from gpuslo.probes.logs.sources import FileFollower, JournalSource, StreamSource, journal_line, kmsg_line
from gpuslo.probes.logs.state import StateStore

XID = b"[ 10.000001] NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=python3, GPU has fallen off the bus.\n"
IMA = b"RuntimeError: CUDA error: an illegal memory access was encountered\n"
NOISE = b"INFO 08-01 10:00:00 [metrics.py:351] Avg generation throughput: 345.6 tokens/s\n"


def follower(path: Path, state: StateStore) -> FileFollower:
    return FileFollower(path, LogParser(ParserSettings(host="n", source=str(path))), state, quiet_flush_s=0.0)


def test_follows_appends_and_a_partial_line_waits(tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(NOISE + IMA[:20])
    tail = follower(log, StateStore(None))
    assert tail.poll() == []
    with log.open("ab") as out:
        out.write(IMA[20:] + NOISE)
    (event,) = tail.poll()
    assert event.attrs["error_name"] == "cudaErrorIllegalAddress"
    assert tail.poll() == []


def test_rotation_by_rename_reads_the_old_tail_then_the_new_file(tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(NOISE)
    tail = follower(log, StateStore(None))
    assert tail.poll() == []
    with log.open("ab") as out:
        out.write(IMA)  # written just before the rename, not yet read
    log.rename(tmp_path / "a.log.1")
    log.write_bytes(NOISE + XID)
    events = tail.poll()
    assert [e.kind for e in events] == ["cuda_error", "gpu_xid"]
    assert tail.poll() == []


def test_truncation_starts_over(tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(NOISE * 3 + IMA)
    tail = follower(log, StateStore(None))
    assert len(tail.poll()) == 1
    log.write_bytes(XID)  # truncated and rewritten, shorter than before
    assert [e.kind for e in tail.poll()] == ["gpu_xid"]


def test_copytruncate_then_longer_rewrite_is_noticed(tmp_path):
    log = tmp_path / "a.log"
    log.write_bytes(NOISE + IMA)
    tail = follower(log, StateStore(None))
    assert len(tail.poll()) == 1
    log.write_bytes(XID + NOISE * 5)  # same inode, new first line, longer than the old offset
    assert [e.kind for e in tail.poll()] == ["gpu_xid"]


def test_restart_resumes_from_state_without_duplicates(tmp_path):
    log, state_file = tmp_path / "a.log", tmp_path / "state" / "logs.json"
    log.write_bytes(NOISE + IMA)
    state = StateStore(state_file)
    first = follower(log, state).poll()
    state.save()
    with log.open("ab") as out:
        out.write(XID)
    again = follower(log, StateStore(state_file)).poll()
    assert [e.kind for e in first] == ["cuda_error"] and [e.kind for e in again] == ["gpu_xid"]
    saved = json.loads(state_file.read_text())
    assert saved[f"file:{log.resolve()}"]["offset"] == len(NOISE + IMA)
    assert not list(state_file.parent.glob(".state-*"))  # no temp file left by the atomic write


def test_restart_mid_incident_rereads_it_with_the_same_id(tmp_path):
    log, state_file = tmp_path / "a.log", tmp_path / "logs.json"
    head = b"[rank3]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.50 GiB. GPU 3 has a total"
    log.write_bytes(NOISE + head + b"\n")
    state = StateStore(state_file)
    tail = FileFollower(log, LogParser(ParserSettings(host="n", source="a")), state, quiet_flush_s=60)
    assert tail.poll() == []
    state.save()
    with log.open("ab") as out:
        out.write(b"[rank3]:  capacity of 79.11 GiB of which 1.02 GiB is free. 1.25 GiB is reserved by PyTorch but "
                  b"unallocated.\n")
    (event,) = FileFollower(log, LogParser(ParserSettings(host="n", source="a")), StateStore(state_file)).poll()
    assert event.attrs["total_bytes"] == int(79.11 * 2**30 + 0.5)
    whole = LogParser(ParserSettings(host="n", source="a"))
    assert whole.scan(log.read_bytes(), 0)[0].id == event.id


def test_a_replaced_file_is_not_resumed_at_a_stale_offset(tmp_path):
    log, state_file = tmp_path / "a.log", tmp_path / "logs.json"
    log.write_bytes(NOISE * 4)
    state = StateStore(state_file)
    follower(log, state).poll()
    state.save()
    log.unlink()
    log.write_bytes(XID + NOISE * 4)  # a different file under the same name
    assert [e.kind for e in follower(log, StateStore(state_file)).poll()] == ["gpu_xid"]


def test_garbage_binary_huge_line_and_bad_utf8_do_not_stop_the_probe(tmp_path):
    log = tmp_path / "a.log"
    huge = b"CUDA error: " + b"x" * (10 * 1024 * 1024) + b"\n"
    binary = bytes(range(256)) * 64 + b"\n"
    bad = b"RuntimeError: CUDA error: \xff\xfe an illegal memory access was encountered\n"
    log.write_bytes(binary + huge + b"\x00\x00CUDA out of memory\xc3\n" + bad + XID)
    events = follower(log, StateStore(None)).finish()
    assert events[-1].kind == "gpu_xid"
    for event in events:
        assert parse_event(event.to_dict()) == event
        assert len(event.message or "") <= 8192


def test_stream_source_reads_stdin_like_bytes():
    source = StreamSource(io.BytesIO(NOISE + XID + IMA[:-1]), LogParser(ParserSettings(host="n", source="-")))
    events = []
    while not source.done:
        events += source.poll(wait_s=0.5)
    assert [e.kind for e in events] == ["gpu_xid", "cuda_error"]


def test_journal_records_become_prefixed_lines():
    cursor, line = journal_line({"__CURSOR": "s=1;i=2", "__REALTIME_TIMESTAMP": "1700000000000000",
                                 "_HOSTNAME": "gpu1", "SYSLOG_IDENTIFIER": "kernel",
                                 "MESSAGE": list(b"NVRM: Xid (PCI:0000:3b:00): 48, pid=9, name=x, DBE")})
    assert cursor == "s=1;i=2"
    assert line == b"2023-11-14T22:13:20.000000Z gpu1 kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid=9, name=x, DBE"
    assert journal_line({"MESSAGE": "x"}) is None


def test_journal_source_runs_a_real_subprocess(tmp_path):
    records = tmp_path / "journal.json"
    records.write_text("\n".join(json.dumps(r) for r in [
        {"__CURSOR": "c1", "MESSAGE": "hello", "_PID": "7", "SYSLOG_IDENTIFIER": "python"},
        {"__CURSOR": "c2", "__REALTIME_TIMESTAMP": "1700000000000000", "_PID": "7", "SYSLOG_IDENTIFIER": "python",
         "_HOSTNAME": "gpu1", "MESSAGE": "RuntimeError: CUDA error: unspecified launch failure"},
    ]) + "\nnot json\n")
    state = StateStore(None)
    source = JournalSource(LogParser(ParserSettings(host="n", source="journal")), state,
                           argv=[sys.executable, "-c", f"import sys; sys.stdout.write(open({str(records)!r}).read())"])
    events = []
    while not source.done:
        events += source.poll(wait_s=1.0)
    source.close()
    (event,) = events
    assert (event.kind, event.pid, event.time.year) == ("cuda_error", 7, 2023)
    assert state.get("journal") == {"cursor": "c2"}


def test_kmsg_records_parse_with_boot_time():
    seq, line = kmsg_line(b"3,1234,5000000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n"
                          b" SUBSYSTEM=pci\n", boot_time=1_700_000_000.0)
    assert seq == 1234
    assert line.startswith(b"2023-11-14T22:13:25.000000Z NVRM: Xid")
    assert kmsg_line(b"garbage", 0.0) is None


def test_fixture_through_a_file_matches_the_parser(tmp_path):
    log = tmp_path / "nccl.log"
    log.write_bytes(fixture_bytes("nccl_timeouts.log"))
    events = follower(log, StateStore(None)).finish()
    assert [e.kind for e in events] == ["nccl_timeout"] * 3 + ["nccl_error"]
    assert os.path.exists(log)
