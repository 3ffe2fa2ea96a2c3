"""The ITL A/B's statistics (scripts/gpu_ab_stats.py) and the h14f cycle analysis (scripts/gpu_itl_ab.py) on
synthetic gaps with a known overhead: a state that lasts a round cancels, a drift within a cycle cancels in the
difference-in-differences, and the pre-registered verdict follows the interval."""

from __future__ import annotations

import json
import math
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
from gpu_ab_stats import contrast, paired_positions, round_log_ratios  # noqa: E402
from gpu_itl_ab import analyse  # noqa: E402

POSITIONS = 31


def _profile(rng: random.Random) -> list[float]:
    """One request's gaps by position: a KV-length trend plus per-position noise, ~8 ms."""
    return [8.0 + 0.02 * k + rng.gauss(0, 0.15) for k in range(POSITIONS)]


def _rounds(overhead: float, rounds: int, seed: int, state: bool = True) -> list[dict]:
    rng, blocks = random.Random(seed), []
    for r in range(rounds):
        scale = rng.choice([0.65, 1.0, 1.3]) if state else 1.0  # a host state lasting the round: 5-10.6 ms
        base = _profile(rng)
        blocks.append({"round": r, "arm": "off", "values": [v * scale * rng.gauss(1, 0.01) for v in base]})
        blocks.append({"round": r, "arm": "on", "values": [v * scale * (1 + overhead) * rng.gauss(1, 0.01)
                                                           for v in base]})
    return blocks


def test_a_state_that_lasts_a_round_cancels_and_the_overhead_is_found_with_its_interval():
    found = paired_positions(_rounds(0.03, 60, 1))
    assert found["rounds"] == 60 and found["rounds_slower"] >= 55
    assert found["paired_position_pct"] == pytest.approx(3.0, abs=0.3)
    lo, hi = found["ci95_pct"]
    assert lo < 3.0 < hi and hi - lo < 1.0


def test_no_overhead_gives_an_interval_around_zero():
    lo, hi = paired_positions(_rounds(0.0, 60, 2))["ci95_pct"]
    assert lo < 0 < hi


def test_round_log_ratios_leave_out_rounds_missing_an_arm():
    blocks = _rounds(0.05, 4, 3)
    blocks = [b for b in blocks if not (b["round"] == 2 and b["arm"] == "on")]
    ratios = round_log_ratios(blocks)
    assert sorted(ratios) == [0, 1, 3]
    assert all(math.exp(v) - 1 == pytest.approx(0.05, abs=0.01) for v in ratios.values())


def test_a_paired_contrast_takes_the_rounds_all_terms_have_and_sums_per_round():
    a = {0: math.log(1.05), 1: math.log(1.07), 2: math.log(1.06)}
    b = {0: math.log(1.01), 1: math.log(1.03), 3: 9.0}
    found = contrast([(1.0, a), (-1.0, b)], paired=True)
    assert found["rounds"] == 2
    assert found["pct"] == pytest.approx((1.06 / 1.02 - 1) * 100, abs=0.01)  # median of 1.05/1.01, 1.07/1.03


def test_an_unpaired_contrast_resamples_each_term_on_its_own():
    rng = random.Random(4)
    inside = {r: math.log(1.06) + rng.gauss(0, 0.01) for r in range(40)}
    outside = {r: math.log(1.02) + rng.gauss(0, 0.01) for r in range(100, 180)}
    found = contrast([(1.0, inside), (-1.0, outside)], paired=False)
    assert found["rounds"] == [40, 80]
    assert found["pct"] == pytest.approx((1.06 / 1.02 - 1) * 100, abs=0.6)
    lo, hi = found["ci95_pct"]
    assert lo < found["pct"] < hi and lo > 2.0


def _cycles(overhead: float, drift: float, cycles: int, seed: int, inside_extra: float = 0.0,
            nvml_share: float = 0.0) -> list[dict]:
    """Cycles as gpu_itl_ab writes them: slot k of a cycle is slowed by (1 + drift)^k (a drift within the cycle),
    the probed slots by the overhead (the Y slots also by inside_extra for the client inside the probe's process),
    nvml_share of which leaves with NVML (Z1, V1)."""
    rng, blocks = random.Random(seed), []
    for c in range(cycles):
        client = ("out", "in", "out")[c % 3]
        scale = rng.choice([0.65, 1.0, 1.3])
        base = _profile(rng)
        for k, slot in enumerate(("W", "X1", "X2", "Y1", "Y2", "Z1", "V1")):
            f = scale * (1 + drift) ** k
            if slot in ("Y1", "Y2"):
                f *= (1 + overhead) * (1 + (inside_extra if client == "in" else 0.0))
            elif slot in ("Z1", "V1"):
                f *= 1 + overhead - nvml_share
            values = [v * f * rng.gauss(1, 0.01) for v in base]
            blocks.append({"cycle": c, "client": client, "slot": slot, "values": values,
                           "median_ms": sorted(values)[POSITIONS // 2]})
    return blocks


def test_the_cycle_analysis_finds_the_overhead_the_floor_and_cancels_a_drift_in_the_did():
    found = analyse(_cycles(0.005, 0.01, 90, 5))
    out = found["out"]
    assert out["ab"]["paired_position_pct"] == pytest.approx(1.5, abs=0.3)  # 0.5 % overhead + 1 % drift
    assert out["aa"]["paired_position_pct"] == pytest.approx(1.0, abs=0.3)  # the drift alone
    assert out["did"]["pct"] == pytest.approx(0.5, abs=0.3)
    assert found["verdict"]["decided_by"] == "did" and found["verdict"]["below_2pct_shown"]


def test_the_verdict_is_not_shown_for_a_real_four_per_cent_and_the_inside_client_is_seen():
    found = analyse(_cycles(0.04, 0.0, 90, 6, inside_extra=0.03))
    assert found["verdict"]["aa_holds_zero"] and found["verdict"]["decided_by"] == "ab"
    assert not found["verdict"]["below_2pct_shown"]
    assert found["out"]["ab"]["paired_position_pct"] == pytest.approx(4.0, abs=0.4)
    assert found["in_minus_out"]["ab"]["pct"] == pytest.approx(3.0, abs=0.5)
    assert found["in_minus_out"]["ab"]["ci95_pct"][0] > 1.5
    assert found["out"]["nvml"]["paired_position_pct"] == pytest.approx(0.0, abs=0.3)  # the cost stays without it
    assert found["out"]["perf"]["paired_position_pct"] == pytest.approx(0.0, abs=0.3)


def test_a_cost_that_leaves_with_the_nvml_thread_is_the_nvml_share():
    found = analyse(_cycles(0.04, 0.0, 60, 7, nvml_share=0.03))
    assert found["out"]["nvml"]["paired_position_pct"] == pytest.approx(100 * (1.04 / 1.01 - 1), abs=0.4)
    assert found["out"]["perf"]["paired_position_pct"] == pytest.approx(0.0, abs=0.3)


RECORDING = Path(__file__).resolve().parents[1] / "examples" / "incidents" / "h200-itl-overhead-cycles.json"


def test_the_h200_cycle_recording_gives_its_stored_figures_and_verdict():
    run = json.loads(RECORDING.read_text())["itl_ab"]
    found = analyse(run["blocks"])
    assert found == run["figures"]  # every figure recomputed from the stored gaps, same seeds
    assert found["out"]["ab"]["rounds"] == 45 and found["in"]["ab"]["rounds"] == 23
    upper = found["out"]["ab"]["ci95_pct"][1]
    assert found["verdict"] == {"aa_holds_zero": True, "decided_by": "ab", "upper_pct": upper, "below_2pct_shown": True}
    assert found["out"]["ab"]["ci95_pct"][1] < 2.0 < found["out"]["did"]["ci95_pct"][1]
    assert {c["clock"]["sm_mhz"] for c in run["cycles"]} == {1980}


def test_the_h200_recording_names_every_long_ioctl_on_the_real_driver_by_its_nvidia_file():
    ioctl = json.loads(RECORDING.read_text())["ioctl_real_driver"]
    assert ioctl["pass"] and ioctl["nvidia_named_as_kernel"] == 0
    assert ioctl["driver_named"] == ioctl["long_ioctls"] == 8
    assert all(i["kind"] == "ioctl" and i["detail"].startswith("ioctl on /dev/nvidia") for i in ioctl["longest"])


SECOND = RECORDING.with_name("h200-itl-overhead-cycles-2.json")


def test_the_second_h200_run_gives_its_stored_figures_and_fails_the_rule_alone():
    run = json.loads(SECOND.read_text())["itl_ab"]
    found = analyse(run["blocks"])
    assert found == run["figures"]
    assert found["out"]["ab"]["rounds"] == 62 and "in" not in found
    assert found["verdict"]["decided_by"] == "ab" and not found["verdict"]["below_2pct_shown"]  # upper 2.32 %
    assert {c["clock"]["sm_mhz"] for c in run["cycles"]} == {1980} and run["lost"] == 0


def test_the_registered_pooled_verdict_of_both_h200_runs_shows_the_itl_cost_under_two_per_cent():
    # docs/notes/stop26-itl-prereg.md: the out cycles of both runs pooled; AB's upper bound decides when AA's
    # interval holds 0
    from gpu_itl_pool import load, runs_blocks

    runs = [load(RECORDING), load(SECOND)]
    pooled = analyse(runs_blocks(runs))
    assert pooled["out"]["ab"]["rounds"] == 45 + 62
    aa = pooled["out"]["aa"]["ci95_pct"]
    assert aa[0] <= 0 <= aa[1]
    assert pooled["verdict"] == {"aa_holds_zero": True, "decided_by": "ab",
                                 "upper_pct": pooled["out"]["ab"]["ci95_pct"][1], "below_2pct_shown": True}
    assert pooled["out"]["ab"]["ci95_pct"][1] < 2.0 < pooled["out"]["did"]["ci95_pct"][1]  # the DiD does not decide


def test_runs_blocks_never_pairs_cycles_of_two_runs():
    one = {"blocks": [{"cycle": 0, "client": "out", "slot": "X2", "values": [1.0]},
                      {"cycle": 1, "client": "out", "slot": "X2", "values": [1.0]}]}
    two = {"blocks": [{"cycle": 0, "client": "out", "slot": "Y1", "values": [2.0]}]}
    from gpu_itl_pool import runs_blocks

    assert [b["cycle"] for b in runs_blocks([one, two])] == [0, 1, 2]


def test_the_second_run_names_every_long_ioctl_on_the_real_driver_by_its_nvidia_file():
    ioctl = json.loads(SECOND.read_text())["ioctl_real_driver"]
    assert ioctl["pass"] and ioctl["nvidia_named_as_kernel"] == 0 and ioctl["driver_named"] == ioctl["long_ioctls"]
