"""A delivery lane per receiver: a few threads of its own, so a receiver that hangs holds only its own lane.

The worker reserves free slots before it claims rows (never more claimed than threads free to send them at
once, so a lease only has to outlast one send), then runs each claimed row on the lane.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_all


class Lane:
    """`width` threads for one receiver, and the count of slots reserved or running."""

    def __init__(self, name: str, width: int):
        self.name, self.width = name, width
        self._executor = ThreadPoolExecutor(max_workers=width, thread_name_prefix=f"gpuslo-deliver-{name[:24]}")
        self._lock = threading.Lock()
        self._released = threading.Condition(self._lock)  # notified when the last reserved slot is freed
        self._busy = 0
        self._futures: set[Future[None]] = set()

    def reserve(self) -> int:
        """Reserve every free slot; how many (0: the lane is full)."""
        with self._lock:
            free = max(0, self.width - self._busy)
            self._busy += free
            return free

    def release(self, slots: int) -> None:
        with self._lock:
            self._busy -= slots
            if self._busy == 0:
                self._released.notify_all()

    @property
    def busy(self) -> int:
        with self._lock:
            return self._busy

    def run(self, task: Callable[[], None], after: Callable[[], None] | None = None) -> None:
        """Run `task` on a reserved slot; the slot is free again before `after` runs (it may claim more)."""

        def slot() -> None:
            try:
                task()
            finally:
                self.release(1)
            if after is not None:
                after()

        future = self._executor.submit(slot)
        with self._lock:
            self._futures.add(future)
        future.add_done_callback(self._forget)

    def _forget(self, future: Future[None]) -> None:
        with self._lock:
            self._futures.discard(future)

    def wait(self, timeout: float | None = None) -> bool:
        """Wait until nothing runs on the lane and no slot is reserved (a dispatch between reserving and handing
        rows on holds slots with nothing running yet), or the timeout; True when idle."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                running = list(self._futures)
            _done, pending = wait_all(running, timeout=_left(deadline))
            if pending:
                return False
            with self._released:
                while self._busy > 0:
                    left = _left(deadline)
                    if left == 0.0 or not self._released.wait(left):
                        return False
                if not self._futures:
                    return True

    def close(self) -> None:
        """Take no more work; sends under way finish on their own (bounded by the HTTP timeout)."""
        self._executor.shutdown(wait=False, cancel_futures=True)


def _left(deadline: float | None) -> float | None:
    """Seconds left before `deadline` (None: no deadline), never negative."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())
