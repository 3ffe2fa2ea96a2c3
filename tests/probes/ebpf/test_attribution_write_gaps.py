"""Send gaps and blocked sends of a server that writes with write/writev (Go, Node, asyncio transports), with a
real BPF program: a gap between two writes to a socket is a send gap, a gap between two writes to a log file is
none, and a write that waits for room in a full socket send queue is the network's `send_blocked`."""

from __future__ import annotations

from bpf_support import requires_bpf
from ebpf_support import watch_child_step

from gpuslo.probes.attribution.collector import SEND_GAP, SYSCALL, Record, to_interval

CHILD = r"""
import ctypes, os, socket, sys, threading, time
ctypes.CDLL(None).prctl(15, b"gs-engine", 0, 0, 0)
server = socket.create_server(("127.0.0.1", 0))
client = socket.create_connection(server.getsockname())
peer, _ = server.accept()
log = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT)
sock = client.fileno()
print("ready", flush=True); sys.stdin.readline()
os.write(sock, b"token 1"); os.write(log, b"line 1\n")
time.sleep(0.15)
os.write(sock, b"token 2"); os.write(log, b"line 2\n")      # a 150 ms gap on the socket and on the log file
time.sleep(0.15)
os.writev(sock, [b"token ", b"3"])                          # a 150 ms gap, writev after write on the same fd
peer.recv(1 << 16)
client.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
def drain(left=1 << 20):
    time.sleep(0.2)
    while left > 0:
        left -= len(peer.recv(1 << 20))
threading.Thread(target=drain).start()
os.write(sock, b"x" * (1 << 20))                            # blocks until the peer reads, 0.2 s from now
time.sleep(0.6)                                             # fds still open while the ring buffer is read
print("done", flush=True)
"""


@requires_bpf
def test_write_gaps_on_a_socket_are_send_gaps_and_a_blocked_write_is_the_networks(tmp_path, fake_build):
    step = watch_child_step(fake_build.lib, CHILD, str(tmp_path / "server.log"))
    assert step.drained.reply == "done\n"
    mine = [i for i in step.drained.found if i.pid == step.pid]
    gaps = [(i.detail.split(" on ")[0], i.detail.split(" on ")[1][:8], i.duration_ms) for i in mine
            if i.kind == "send_gap"]
    assert [g[:2] for g in gaps] == [("write", "socket:["), ("writev", "socket:[")], gaps
    assert all(140 <= ms < 400 for _, _, ms in gaps), gaps
    blocked = [i for i in mine if i.kind == "send_blocked"]
    assert len(blocked) == 1 and blocked[0].detail.startswith("write on socket:["), mine
    assert blocked[0].duration_ms >= 150, blocked[0]
    assert not [i for i in mine if "server.log" in i.detail], mine


def test_a_write_record_is_a_send_only_on_a_socket():
    names = {(4242, 5): "socket:[81]", (4242, 6): "/var/log/server.log"}

    def record(kind: int, number: int, fd: int) -> Record:
        return Record(kind=kind, arg=number | fd << 32, pid=4242, start_ns=0, end_ns=150_000_000)

    def interval(kind: int, number: int, fd: int):
        found = to_interval(record(kind, number, fd), lambda pid, fd: names.get((pid, fd)))
        return found and (found.kind, found.detail)

    assert interval(SEND_GAP, 1, 5) == ("send_gap", "write on socket:[81]")
    assert interval(SEND_GAP, 20, 5) == ("send_gap", "writev on socket:[81]")
    assert interval(SEND_GAP, 1, 6) is None                 # a log file written now and then
    assert interval(SEND_GAP, 1, 7) is None                 # closed before it was read: unknown, left out
    assert interval(SEND_GAP, 44, 0) == ("send_gap", "sendto")
    assert interval(SYSCALL, 1, 5) == ("send_blocked", "write on socket:[81]")
    assert interval(SYSCALL, 20, 6) == ("syscall", "writev to /var/log/server.log")
    assert interval(SYSCALL, 1, 7) == ("syscall", "write")
