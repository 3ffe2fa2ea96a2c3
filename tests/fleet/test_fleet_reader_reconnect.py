"""The stream reader across a cut connection, on the real 3-node cluster: with acks off, what a consumer had in
flight when the connection went is counted as delivered and never sent again, so the Reader must make a new
consumer after the last sequence it returned (bus.py) — no gap and no duplicate."""

from __future__ import annotations

import threading
import time

from gpuslo.engine.fleet.bus import Bus, Delivered

SUBJECT = "gpuslo.ev.test.reconnect"


def _cut(bus: Bus) -> None:
    """Abort the client's TCP connection under it (a reset, as when the server cuts a slow consumer)."""
    done = threading.Event()

    def abort() -> None:
        bus._nc._transport._io_writer.transport.abort()  # noqa: SLF001 - nothing public cuts a connection
        done.set()

    bus._loop.call_soon_threadsafe(abort)  # noqa: SLF001
    assert done.wait(5.0)


def _read_to(reader_fetch, last: int, timeout_s: float = 30.0) -> list[Delivered]:  # type: ignore[no-untyped-def]
    got: list[Delivered] = []
    deadline = time.monotonic() + timeout_s
    while (not got or got[-1].seq < last) and time.monotonic() < deadline:
        got += reader_fetch()
    return got


def test_a_reader_whose_connection_is_cut_mid_fetch_resumes_after_its_last_sequence(bus: Bus) -> None:
    total = 3000
    acked = bus.publish([(SUBJECT, f"m-{i}", b"%d" % i) for i in range(total)])
    assert acked == [False] * total
    last = bus.last_sequence(SUBJECT)
    reader = bus.reader(SUBJECT)
    before = bus.connection_generation
    try:
        first = reader.fetch(100, 2.0)  # a consumer exists, 100 returned, more requested below
        assert [int(d.data) for d in first] == list(range(100))
        in_flight: list[Delivered] = []
        fetching = threading.Thread(target=lambda: in_flight.extend(reader.fetch(1000, 2.0)))
        fetching.start()
        _cut(bus)  # while a pull of 1000 is answered
        fetching.join(30.0)
        assert not fetching.is_alive()
        deadline = time.monotonic() + 20.0
        while bus.connection_generation == before and time.monotonic() < deadline:
            time.sleep(0.05)
        assert bus.connection_generation > before, "the client never saw the connection go"
        rest = _read_to(lambda: reader.fetch(500, 1.0), last)
    finally:
        reader.close()
    seqs = [d.seq for d in [*first, *in_flight, *rest]]
    assert len(seqs) == len(set(seqs)), "a message was returned twice"
    assert seqs == sorted(seqs)
    assert [int(d.data) for d in [*first, *in_flight, *rest]] == list(range(total)), "a gap after the cut"
    assert seqs[-1] == last
