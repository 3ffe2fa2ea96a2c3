"""Rank-mismatch analysis: victims, the op and seq, and the ranks that never joined."""

from __future__ import annotations

from gpuslo.engine.collectives import analyze_hang, world_size_of


def timeout(event, rank, seq, at=0.0, world=None, **attrs):
    labels = {"world_size": str(world)} if world is not None else {}
    return event("nccl_timeout", at=at, job="train-42", rank=rank, labels=labels,
                 **{"op": "ALLREDUCE", "seq": seq, "pg": "0", "timeout_ms": 20000, **attrs})


def test_the_rank_that_never_joined_is_the_suspect(event):
    hang = analyze_hang([timeout(event, 0, 7, elapsed_ms=20046, world=2)])
    assert hang is not None
    assert (hang.op, hang.seq, hang.pg, hang.timed_out, hang.world_size, hang.suspects) == \
        ("ALLREDUCE", 7, "0", (0,), 2, (1,))
    assert hang.elapsed_ms == 20046 and hang.timeout_ms == 20000 and hang.job == "train-42"
    assert hang.sentence == ("Timed out in ALLREDUCE seq 7 (process group 0): rank 0; never joined: rank 1 of "
                             "world size 2 (the suspect).")
    assert hang.to_dict()["suspects"] == [1] and hang.to_dict()["sentence"] == hang.sentence


def test_many_victims_leave_the_missing_ranks_as_suspects(event):
    events = [timeout(event, r, 1107, at=r) for r in (0, 1, 2, 4, 5, 6, 7)]
    hang = analyze_hang(events, world_size=8)
    assert hang is not None and hang.timed_out == (0, 1, 2, 4, 5, 6, 7) and hang.suspects == (3,)
    assert "ranks 0, 1, 2, 4, 5, 6, 7; never joined: rank 3 of world size 8" in hang.sentence


def test_the_collective_most_ranks_hang_in_wins_and_other_kinds_are_ignored(event):
    events = [timeout(event, 0, 9), timeout(event, 1, 8), timeout(event, 2, 8),
              event("nccl_error", rank=3, error_name="ncclRemoteError"),
              event("nccl_timeout", rank=3, op="heartbeat_monitor")]  # no seq: not a collective
    hang = analyze_hang(events, world_size=4)
    assert hang is not None and (hang.seq, hang.timed_out, hang.suspects) == (8, (1, 2), (0, 3))


def test_a_tie_picks_the_lowest_seq(event):
    hang = analyze_hang([timeout(event, 0, 9), timeout(event, 1, 8)], world_size=2)
    assert hang is not None and (hang.seq, hang.timed_out, hang.suspects) == (8, (1,), (0,))


def test_without_a_world_size_the_suspects_are_unknown(event):
    hang = analyze_hang([timeout(event, 0, 7), timeout(event, 5, 7)])
    assert hang is not None and hang.world_size is None and hang.suspects is None
    assert "world size is unknown (label world_size)" in hang.sentence and "ranks 0, 5" in hang.sentence


def test_every_rank_timing_out_leaves_no_suspect(event):
    hang = analyze_hang([timeout(event, 0, 3, world=2), timeout(event, 1, 3, world=2)])
    assert hang is not None and hang.suspects == ()
    assert "every rank of world size 2 timed out" in hang.sentence


def test_no_timeout_with_a_seq_is_no_hang(event):
    assert analyze_hang([]) is None
    assert analyze_hang([event("nccl_timeout", rank=0, op="heartbeat_monitor")]) is None


def test_world_size_comes_from_labels_and_bad_values_are_ignored(event):
    assert world_size_of([timeout(event, 0, 1, world=4), timeout(event, 1, 1, world=2)]) == 4
    bad = event("nccl_timeout", rank=0, seq=1, labels={"world_size": "two"})
    assert world_size_of([bad]) is None and world_size_of([timeout(event, 0, 1)]) is None


def _progress(event, rank: int, seq: int, lag: int = 0, world: int | None = 2):
    labels = {"world_size": str(world)} if world else {}
    return event("nccl_progress", job="train-42", rank=rank, labels=labels, op="ALLREDUCE", seq=seq, state="idle",
                 lag=lag)


def test_ebpf_counts_name_the_rank_behind_beside_the_watchdog(event) -> None:
    hang = analyze_hang([timeout(event, 0, 7), _progress(event, 0, 7), _progress(event, 1, 6, lag=1)])
    assert hang is not None and hang.suspects == (1,) and hang.ebpf_behind == (1,)
    assert [(p.rank, p.seq) for p in hang.ebpf] == [(0, 7), (1, 6)]
    assert hang.sentence.endswith("eBPF: rank 0 entered ALLREDUCE #7, rank 1 entered ALLREDUCE #6; never entered "
                                  "the next collective: rank 1 (the suspect, from eBPF).")


def test_ebpf_alone_names_the_suspect_without_any_log_line(event) -> None:
    hang = analyze_hang([_progress(event, 0, 12), _progress(event, 1, 12), _progress(event, 2, 11)])
    assert hang is not None and hang.seq is None and hang.suspects == (2,)
    assert hang.to_dict()["ebpf_behind"] == [2] and hang.sentence.startswith("eBPF: rank 0 entered ALLREDUCE #12")


def test_ebpf_counts_level_with_each_other_blame_nobody(event) -> None:
    hang = analyze_hang([_progress(event, 0, 5), _progress(event, 1, 5)])
    assert hang is not None and hang.suspects == () and hang.sentence.endswith("no rank is behind.")
