"""A lane is idle only when nothing runs on it and no slot is reserved (run_until_idle relies on it)."""

from __future__ import annotations

import threading

from gpuslo.engine.alerts.lanes import Lane


def test_a_reserved_slot_keeps_the_lane_busy_until_it_is_released():
    lane = Lane("hook", 1)
    try:
        assert lane.reserve() == 1  # a dispatch has reserved the slot and is still claiming rows
        assert lane.wait(timeout=0.2) is False
        threading.Timer(0.1, lane.release, args=(1,)).start()
        assert lane.wait(timeout=5) is True
        assert lane.busy == 0
    finally:
        lane.close()


def test_wait_covers_a_task_run_on_a_reserved_slot():
    lane = Lane("hook", 2)
    started, finish, done = threading.Event(), threading.Event(), []
    try:
        assert lane.reserve() == 2
        lane.release(1)

        def task() -> None:
            started.set()
            finish.wait(5)
            done.append(True)

        lane.run(task)
        assert started.wait(5)
        assert lane.wait(timeout=0.1) is False
        finish.set()
        assert lane.wait(timeout=5) is True and done == [True]
    finally:
        lane.close()
