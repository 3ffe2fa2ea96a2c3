"""Send-queue stalls on the serving port, with the real BPF program over loopback: a non-blocking server whose
slow reader lets its TCP send queue fill waits (select, a chosen wait) until the reader takes the bytes; that
wait is a send_stall on the serving port, attributed to the network. The same stall on another port is not."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
import time

import pytest
from bpf_support import requires_bpf

from gpuslo.probes.attribution.attribute import attribute
from gpuslo.probes.attribution.bpf import has_tracepoint
from gpuslo.probes.attribution.collector import Collector
from gpuslo.probes.ebpf.libraries import LibrarySet

pytestmark = [
    requires_bpf,
    pytest.mark.skipif(not has_tracepoint("sock", "sock_send_length"),
                       reason="the kernel has no sock:sock_send_length tracepoint (Linux 6.3 on)"),
]

SERVER = r"""
import select, socket, sys, time
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
conn.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)
conn.setblocking(False)
sys.stdin.readline()
def fill():                              # fill the send queue: the reader does not read yet
    while True:
        try:
            conn.send(b"x" * 65536)
        except BlockingIOError:
            return
fill()
time.sleep(0.1)                          # the reader's delayed ACK frees what it took into its receive queue
fill()                                   # now its window is closed: nothing frees room until it reads
print("full", flush=True)
if sys.argv[1] == "close":                # give up: the stall ends with the connection, unreported
    conn.close()
    print("closed", flush=True)
    sys.stdin.readline()
    sys.exit()
select.select([], [conn], [])            # wait for room (a chosen wait, no signal of its own)
conn.send(b"y" * 1024)                   # the queue takes bytes again
print("sent", flush=True)
conn.close()
"""


class Stream:
    """A server child and its slow reader: the reader connects, and reads only when told to."""

    def __init__(self, mode: str = "wait") -> None:
        self.server = subprocess.Popen([sys.executable, "-c", SERVER, mode], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True)
        assert self.server.stdout is not None
        self.port = int(self.server.stdout.readline())
        self.reader = socket.socket()
        self.reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
        self.reader.connect(("127.0.0.1", self.port))
        self.drained = threading.Thread(target=self._drain)

    def fill(self) -> None:
        assert self.server.stdin is not None and self.server.stdout is not None
        self.server.stdin.write("go\n")
        self.server.stdin.flush()
        assert self.server.stdout.readline() == "full\n"

    def read_late(self) -> None:
        time.sleep(0.3)  # the slow reader: the server's queue stays full at least this long
        self.drained.start()

    def _drain(self) -> None:
        while self.reader.recv(65536):
            pass

    def finish(self) -> None:
        assert self.server.stdout is not None and self.server.stdin is not None
        assert self.server.stdout.readline() == "sent\n"
        self.server.wait(10)
        self.drained.join(10)
        self.reader.close()
        self.server.stdin.close()
        self.server.stdout.close()


def test_a_full_send_queue_on_the_serving_port_is_a_network_stall_and_another_port_is_not():
    served, other = Stream(), Stream()
    collector = Collector(LibrarySet(), port=served.port, sample_hz=0)
    collector.start()
    try:
        assert collector.send_stalls
        collector.watch(served.server.pid)
        collector.watch(other.server.pid)
        for stream in (served, other):
            stream.fill()
        for stream in (served, other):
            stream.read_late()
        for stream in (served, other):
            stream.finish()
        time.sleep(0.1)
        found = collector.poll(100) + collector.open_bursts()
    finally:
        collector.close()
    stalls = [i for i in found if i.kind == "send_stall"]
    assert {i.pid for i in stalls} == {served.server.pid}, [(i.pid, i.duration_ms) for i in stalls]
    assert all(f"port {served.port}" in i.detail for i in stalls)
    assert max(i.duration_ms for i in stalls) >= 299, [i.duration_ms for i in stalls]
    # The server's own send gap (its last send that found no room to the next that queued bytes) was spent in
    # select(), which no other signal covers: the stall is what attributes it.
    gap = next(i for i in found if i.kind == "send_gap" and i.pid == served.server.pid)
    mine = [i for i in found if i.pid == served.server.pid]
    a = attribute(gap.start_ns, gap.end_ns, mine, own_pids={served.server.pid})
    assert a.dominant == "network" and a.shares_ms["network"] >= 0.9 * a.gap_ms, a.attrs()
    assert "TCP send queue full on port" in a.evidence["network"]
    # The other server's gap has no stall (its port is not the serving port): nothing covers its select().
    other_gap = next(i for i in found if i.kind == "send_gap" and i.pid == other.server.pid)
    theirs = [i for i in found if i.pid == other.server.pid]
    b = attribute(other_gap.start_ns, other_gap.end_ns, theirs, own_pids={other.server.pid})
    assert b.shares_ms["network"] == 0.0, b.attrs()


def test_a_stall_whose_connection_closes_is_not_left_open():
    stream = Stream("close")
    collector = Collector(LibrarySet(), port=stream.port, sample_hz=0)
    collector.start()
    try:
        collector.watch(stream.server.pid)
        stream.fill()  # the second fill's stall is open from here
        filled = time.monotonic_ns()
        assert stream.server.stdout is not None and stream.server.stdin is not None
        assert stream.server.stdout.readline() == "closed\n"
        found = collector.poll(100) + collector.open_bursts()
        assert len(collector._bpf[b"send_full"]) == 0
        stream.server.stdin.write("exit\n")
        stream.server.stdin.flush()
        stream.server.wait(10)
    finally:
        collector.close()
        stream.reader.close()
        for pipe in (stream.server.stdin, stream.server.stdout):
            if pipe is not None:
                pipe.close()
    # Only the first fill's stall (ended by the second fill's sends) was reported; none is left open.
    assert all(i.end_ns < filled and "open" not in i.detail for i in found if i.kind == "send_stall"), found


TOKENS = r"""
import socket, sys, time
srv = socket.socket(); srv.bind(("127.0.0.1", 0)); srv.listen()
print(srv.getsockname()[1], flush=True)
conn, _ = srv.accept()
sys.stdin.readline()
for _ in range(150):                     # 1 KiB tokens every 10 ms: the send buffer holds them all
    conn.send(b"t" * 1024)
    time.sleep(0.01)
print("sent", flush=True)
sys.stdin.readline()
conn.close()
"""


class TokenStream:
    """A blocking server sending small tokens on time, and a reader that does not read for a while."""

    def __init__(self) -> None:
        self.server = subprocess.Popen([sys.executable, "-c", TOKENS], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, text=True)
        assert self.server.stdout is not None and self.server.stdin is not None
        self.port = int(self.server.stdout.readline())
        self.reader = socket.socket()
        self.reader.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        self.reader.connect(("127.0.0.1", self.port))
        self.reader.settimeout(10)

    def start(self) -> None:
        assert self.server.stdin is not None
        self.server.stdin.write("go\n")
        self.server.stdin.flush()

    def read_all(self) -> None:
        self.reader.settimeout(0.5)
        try:
            while self.reader.recv(65536):
                pass
        except TimeoutError:
            pass

    def finish(self) -> None:
        assert self.server.stdout is not None and self.server.stdin is not None
        assert self.server.stdout.readline() == "sent\n"
        self.server.stdin.write("close\n")
        self.server.stdin.flush()
        self.server.wait(10)
        self.reader.close()
        self.server.stdin.close()
        self.server.stdout.close()


def test_a_client_that_does_not_read_closes_its_window_and_that_is_the_network_evidence():
    served, other = TokenStream(), TokenStream()
    collector = Collector(LibrarySet(), port=served.port, sample_hz=0)
    collector.start()
    try:
        for stream in (served, other):
            stream.start()
        time.sleep(0.6)  # neither reader reads: their receive windows close
        read_at = time.monotonic_ns()
        for stream in (served, other):
            stream.read_all()
        for stream in (served, other):
            stream.finish()
        found = collector.poll(100)
    finally:
        collector.close()
    zero = [i for i in found if i.kind == "zero_window"]
    assert zero and all(f"port {served.port}" in i.detail for i in zero), found
    # Causal, not timed: the window closed before the reader read and opened only after. Both readers' windows
    # did; only the serving port's socket is followed, so exactly one interval spans the moment of reading.
    spanning = [i for i in zero if i.start_ns < read_at <= i.end_ns]
    assert len(spanning) == 1, [(i.start_ns - read_at, i.end_ns - read_at) for i in zero]
    # The server sent every token on time (no server gap): the time is the network's, with the window as why.
    a = attribute(read_at - 200_000_000, read_at, found, own_pids=())
    assert a.dominant == "network" and "receive window was 0" in a.evidence["network"], a.attrs()
