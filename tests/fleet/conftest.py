"""Fixtures of the fleet tests: one real 3-node NATS JetStream cluster for the session (R3 stream), stopped at
the end (a new cluster takes seconds to elect its JetStream leaders); each test gets a fresh stream on it and a
fresh PostgreSQL database, a copy of one migrated once per session."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_cluster_support import NATS_SERVER, NatsCluster, wait_jetstream
from fleet_support import postgres_database, postgres_template

from gpuslo.engine.fleet.bus import Bus, StreamSettings
from gpuslo.engine.store.db import Database


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    if not Path(NATS_SERVER).exists():
        pytest.fail(f"nats-server is not installed at {NATS_SERVER} (Debian package nats-server)", pytrace=False)
    nodes = NatsCluster.create(tmp_path_factory.mktemp("nats"))
    nodes.start()
    wait_jetstream(nodes.urls)  # the election, asked about every 1.5 s (fleet_cluster_support)
    try:
        yield nodes
    finally:
        nodes.stop()


@pytest.fixture
def bus(cluster: NatsCluster) -> Iterator[Bus]:
    """A client of the cluster, with the stream created afresh (R3) for this test."""
    client = Bus(cluster.urls, name="fleet-test")
    client.ensure_stream(StreamSettings(replicas=3))
    client.drop_stream()
    client.ensure_stream(StreamSettings(replicas=3))
    try:
        yield client
    finally:
        client.close()


@pytest.fixture(scope="session")
def migrated_template() -> Iterator[str]:
    """The schema migrated once; each test's database is a copy of it."""
    with postgres_template() as name:
        yield name


@pytest.fixture
def fleet_database(migrated_template: str) -> Iterator[Database]:
    with postgres_database("fleet", template=migrated_template) as database:
        yield database

