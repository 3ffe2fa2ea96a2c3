"""The HTTP load generator of bench/engine.py's (c) and (d), in a process of its own.

The server, the engine thread and the store writes share one interpreter and its GIL; a client thread in that
interpreter would take its share of the GIL too and be counted as the server's cost. The parent starts this file
as a script and talks to it over its stdin (pickled bodies, then the start time) and stdout (one line per step).
"""

from __future__ import annotations

import pickle
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

import httpx

HEADERS = {"Content-Type": "application/json"}


def clock() -> float:
    """CLOCK_MONOTONIC, one time line for both processes (time.perf_counter's origin is per process)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def _post_all(base: str, bodies: Sequence[bytes], interval_s: float, commands: BinaryIO) -> str:
    """Warm up, say ready, wait for the start time, POST every body (body i at start + i * interval_s when
    paced, else back to back); the last line: when the last response came back, or the first failure."""
    with httpx.Client(base_url=base, timeout=60) as client:
        client.get("/api/v1/schema/event").raise_for_status()  # the first request pays for lazy set-up
        print("ready", flush=True)
        started: float = pickle.load(commands)
        for index, body in enumerate(bodies):
            pause = started + index * interval_s - clock()
            if interval_s and pause > 0:
                time.sleep(pause)
            response = client.post("/api/v1/events", content=body, headers=HEADERS)
            if response.status_code >= 300:
                return f"failed POST {index}: {response.status_code} {response.text[:300]}"
    return f"done {clock()!r}"


def _answer(process: subprocess.Popen[bytes], expected: str) -> str:
    assert process.stdout is not None
    line = process.stdout.readline().decode().strip()
    word, _, rest = line.partition(" ")
    if word != expected:
        process.wait(10)
        raise RuntimeError(f"load client: {line or f'exited with {process.returncode}'}")
    return rest


@contextmanager
def posting_process(base: str, bodies: Sequence[bytes], *,
                    interval_s: float = 0.0) -> Iterator[Callable[[float], float]]:
    """A client process, started and warmed up; yields `send(start_at)`, which has it POST every body from
    `start_at` on (`clock()` time) and returns the moment the last response came back."""
    process = subprocess.Popen([sys.executable, str(Path(__file__).resolve())], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE)
    assert process.stdin is not None
    stdin = process.stdin

    def send(start_at: float) -> float:
        pickle.dump(start_at, stdin)
        stdin.flush()
        return float(_answer(process, "done"))

    try:
        pickle.dump((base, list(bodies), interval_s), stdin)
        stdin.flush()
        _answer(process, "ready")
        yield send
    finally:
        stdin.close()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> None:
    commands = sys.stdin.buffer
    base, bodies, interval_s = pickle.load(commands)
    try:
        outcome = _post_all(base, bodies, interval_s, commands)
    except Exception as exc:  # whatever broke, the parent reports it
        outcome = f"failed {type(exc).__name__}: {exc}"
    print(outcome, flush=True)


if __name__ == "__main__":
    main()
