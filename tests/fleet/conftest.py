"""Fixtures of the fleet tests: one real 3-node NATS JetStream cluster for the module (R3 stream), stopped at
the end (one per session: a cluster takes ~10 s to elect its JetStream leaders); each test gets a fresh stream
on it and a fresh PostgreSQL database."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fleet_cluster_support import NATS_SERVER, NatsCluster
from fleet_support import postgres_database

from gpuslo.engine.fleet.bus import Bus, StreamSettings
from gpuslo.engine.store.db import Database


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsCluster]:
    if not Path(NATS_SERVER).exists():
        pytest.fail(f"nats-server is not installed at {NATS_SERVER} (Debian package nats-server)", pytrace=False)
    nodes = NatsCluster.create(tmp_path_factory.mktemp("nats"))
    nodes.start()
    # Until the cluster has elected its JetStream meta leader, API requests go unanswered: a client with a short
    # request timeout asks again every 1.5 s instead of waiting out the usual 10 s for each unanswered one.
    ready = Bus(nodes.urls, name="fleet-test-ready", timeout_s=1.0)
    try:
        ready.ensure_stream(StreamSettings(replicas=3))
    finally:
        ready.close()
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


@pytest.fixture
def fleet_database() -> Iterator[Database]:
    with postgres_database("fleet") as database:
        yield database

