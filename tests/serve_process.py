"""`gpuslo serve --port 0` as a real child process, for any test folder: its URL once it listens, its log."""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

GPUSLO = Path(sys.executable).with_name("gpuslo")
LISTENING = re.compile(r"gpuslo listening on (http://127\.0\.0\.1:\d+)")


@contextmanager
def serving_process(where: Path, rules: Path, *extra: str,
                    timeout_s: float = 60) -> Iterator[tuple[subprocess.Popen[str], str, list[str]]]:
    """`gpuslo serve` on its own SQLite file in `where`; yields the process, its URL and its log lines (still
    growing). A process still running at the end is asked to stop (SIGTERM), then killed."""
    env = {**os.environ, "GPUSLO_DATABASE_URL": f"sqlite:///{where / 'served.db'}"}
    process = subprocess.Popen([str(GPUSLO), "serve", "--port", "0", "--rules", str(rules), *extra], cwd=where,
                               env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    lines: list[str] = []
    listening: queue.Queue[str] = queue.Queue()

    def drain() -> None:  # keeps reading so the server never blocks on a full pipe
        for line in process.stderr or ():
            lines.append(line)
            found = LISTENING.search(line)
            if found:
                listening.put(found.group(1))
        listening.put("")

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    try:
        url = listening.get(timeout=timeout_s)
        if not url:
            pytest.fail("gpuslo serve exited before listening:\n" + "".join(lines))
        yield process, url, lines
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
        process.wait(timeout=20)
        reader.join(timeout=10)
        if process.stderr:
            process.stderr.close()
