"""`gpuslo slo list` and `gpuslo slo backfill` on a database the recorded H200 token run was replayed into
(SQLite and PostgreSQL); a restarted core starts its burn windows from the stored buckets."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner
from sqlalchemy import delete

from gpuslo.cli.main import main
from gpuslo.engine.config import Settings
from gpuslo.engine.core import Gpuslo
from gpuslo.engine.store.models import SloBucketRow, SloCauseRow, SloDayRow, SloHourRow

ROOT = Path(__file__).resolve().parents[2]
RECORDING = ROOT / "examples" / "incidents" / "h200-token-requests.jsonl"


def _replay(database):
    core = Gpuslo.open(Settings(database_url=database.url, rules_dir=ROOT / "rules", rules_poll_seconds=0))
    core.ingest([json.loads(line) for line in RECORDING.read_text().splitlines()])
    assert core.wait_idle(30)
    return core


def _cli(database, *args):
    result = CliRunner(env={"GPUSLO_DATABASE_URL": database.url}).invoke(
        main, ["slo", *args, "--rules", str(ROOT / "rules")], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_list_and_backfill_restore_the_same_figures(database):
    core = _replay(database)
    before = [g.to_dict(causes=True) for g in (core.slos.group(g.id) for g in core.slos.groups())]
    core.close()
    listing = _cli(database, "list").stdout.splitlines()
    assert any(line.startswith("token-latency~") and "8 bad of 19" in line for line in listing)
    with database.session() as session:  # the counts are lost (a new SLO, say): backfill recounts them
        for table in (SloCauseRow, SloBucketRow, SloHourRow, SloDayRow):
            session.execute(delete(table))
    result = _cli(database, "backfill")
    assert "ok: 57 requests counted for token-latency, first-token-latency, stream-success" in result.stdout
    _cli(database, "backfill", "token-latency")  # again: replaces, never adds
    core = Gpuslo.open(Settings(database_url=database.url, rules_dir=ROOT / "rules", rules_poll_seconds=0))
    try:
        after = [g.to_dict(causes=True) for g in (core.slos.group(g.id) for g in core.slos.groups())]
    finally:
        core.close()
    assert after == before


def test_backfill_names_an_unknown_slo(database):
    result = CliRunner(env={"GPUSLO_DATABASE_URL": database.url}).invoke(
        main, ["slo", "backfill", "nope", "--rules", str(ROOT / "rules")])
    assert result.exit_code == 2 and "no measured SLO nope" in result.output


def test_a_restarted_core_starts_from_the_stored_buckets(database):
    core = _replay(database)
    (itl,) = [g for g in core.slos.groups() if g.sli.slo_id == "token-latency"]
    core.close()
    restarted = Gpuslo.open(Settings(database_url=database.url, rules_dir=ROOT / "rules", rules_poll_seconds=0))
    try:
        (seeded,) = [f for f in restarted.runtime.evaluator.slo.figures() if f.sli.slo_id == "token-latency"]
    finally:
        restarted.close()
    assert (seeded.good, seeded.total) == (itl.good, itl.total)
    assert seeded.lookbacks == itl.lookbacks
