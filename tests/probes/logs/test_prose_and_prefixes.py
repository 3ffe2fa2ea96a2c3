"""The look-alike rules and prefixes added for heldout3/tune-h15b, one behaviour each, and the size reader's
shortcut against the plain regex search it replaced (on every corpus and fixture line)."""

from __future__ import annotations

import re

import pytest
from corpus import READ_TIME, REPORTED, load
from logprobe_helpers import FIXTURES, fixture_bytes

from gpuslo.probes.logs import families_cuda, families_oom
from gpuslo.probes.logs.parser import LogParser, ParserSettings
from gpuslo.probes.logs.patterns import _size
from gpuslo.probes.logs.prefixes import normalise, segments
from gpuslo.probes.logs.units import SIZE, to_bytes


def kinds(text: str) -> list[str]:
    parser = LogParser(ParserSettings(host="n", source="t"), clock=lambda: READ_TIME)
    return [e.kind for e in parser.scan(text.encode() + b"\n", 0) + parser.flush()]


@pytest.mark.parametrize("text, expected", [
    # first-person narration is prose, the same message on its own line is an incident
    ("So I got this error : RuntimeError: CUDA error: an illegal memory access was encountered", []),
    ("RuntimeError: CUDA error: an illegal memory access was encountered", ["cuda_error"]),
    # a traceback's source line is code, behind a prefix too
    ('(VllmWorker rank=1 pid=9) ERROR 08-05 14:15:44 [x.py:4]     raise RuntimeError(f"NCCL error: {e}")', []),
    # a JSON log record's quotes are syntax, not a quotation
    ('{"level":"error","msg":"CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 8.00 '
     'GiB of which 1.00 MiB is free."}', ["cuda_oom"]),
    # a sentence in Chinese naming the error is prose
    ("服务器报错 Unable to determine the device handle for GPU0000:20:00.0: Unknown Error", []),
    # a long sentence that ends in "error:" is still a sentence
    ("When the job starts on the second node the monitoring tool prints the following error: Unable to determine "
     "the device handle for GPU 0000:0B:00.0: Unknown Error", []),
    ("Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error", ["gpu_fault"]),
])
def test_prose_rules(text, expected):
    assert kinds(text) == expected


def test_inline_code_that_opens_a_log_record_is_split_off():
    line = "see log `node1:12:34 [3] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion from peer 10.0.0.1<1>"
    assert segments(line) == ["see log ", "node1:12:34 [3] transport/net_ib.cc:1 NCCL WARN NET/IB : Got completion "
                              "from peer 10.0.0.1<1>"]
    assert segments("use `x` here") == ["use `x` here"]


def test_go_stamp_llama_cpp_logger_and_worker_tags():
    go = normalise("2020/08/10 19:09:42 XidCriticalError: Xid=69 on Device=GPU-1")
    assert go.text.startswith("XidCriticalError") and go.time and go.time.isoformat().startswith("2020-08-10T19:09:42")
    llama = normalise("[5629] 0.54.236.080 E   current device: 0, in function f")
    assert llama.pid == 5629 and llama.text.strip().startswith("current device")
    for tag in ("(VllmWorker rank=2 pid=77) ", "(VllmWorker pid=77 rank=2) "):
        line = normalise(tag + "ERROR 05-12 19:04:11 [a.py:1] boom")
        assert (line.rank, line.pid, line.text) == (2, 77, "boom")


def _size_patterns() -> set[str]:
    sources = [families_oom.__file__, families_cuda.__file__]
    found = set()
    for path in sources:
        with open(path) as handle:
            found |= set(re.findall(r'_size\(r"([^"]+)"', handle.read()))
    return found


def test_the_size_shortcut_reads_what_a_plain_search_reads():
    patterns = _size_patterns()
    assert len(patterns) >= 15 and any(p.startswith("(?:SIZE)") for p in patterns)
    texts = [fixture_bytes(p.name).decode("utf-8", "replace") for p in sorted(FIXTURES.glob("*.log"))]
    texts += [case.text for split in REPORTED for case in load(split)]
    checked = 0
    for text in texts:
        for pattern in patterns:
            plain = re.search(pattern.replace("SIZE", SIZE), text)
            assert _size(pattern, text) == (to_bytes(plain.group(1), plain.group(2)) if plain else None), pattern
            checked += bool(plain)
    assert checked > 100
