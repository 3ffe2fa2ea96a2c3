"""A real 3-node NATS JetStream cluster on free loopback ports, its store under a temporary folder; nodes can be
killed and restarted one by one. Never the machine's own nats-server (127.0.0.1:4222)."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

NATS_SERVER = shutil.which("nats-server") or "/usr/sbin/nats-server"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Node:
    name: str
    port: int
    cluster_port: int
    config: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.port}"


@dataclass
class NatsCluster:
    root: Path
    nodes: list[Node] = field(default_factory=list)

    @classmethod
    def create(cls, root: Path, size: int = 3) -> NatsCluster:
        cluster = cls(root)
        ports = [(free_port(), free_port()) for _ in range(size)]
        routes = ", ".join(f"nats://127.0.0.1:{c}" for _, c in ports)
        for i, (port, cport) in enumerate(ports):
            name = f"n{i + 1}"
            store = root / name
            store.mkdir(parents=True, exist_ok=True)
            config = root / f"{name}.conf"
            config.write_text(
                f"server_name: {name}\nlisten: 127.0.0.1:{port}\n"
                f'jetstream {{ store_dir: "{store}", max_memory_store: 64MB, max_file_store: 1GB }}\n'
                f"cluster {{ name: gpuslo-test, listen: 127.0.0.1:{cport}, routes: [{routes}] }}\n")
            cluster.nodes.append(Node(name, port, cport, config))
        return cluster

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def start(self, node: Node | None = None) -> None:
        for one in [node] if node else self.nodes:
            with open(self.root / f"{one.name}.log", "ab") as log:  # the server keeps its own copy of the fd
                one.process = subprocess.Popen([NATS_SERVER, "-c", str(one.config)], stdout=log, stderr=log)
        for one in [node] if node else self.nodes:
            _wait_port(one.port)

    def kill(self, node: Node) -> None:
        """SIGKILL: no goodbye to the cluster, as a crashed machine."""
        if node.process is not None:
            node.process.send_signal(signal.SIGKILL)
            node.process.wait(10)
            node.process = None

    def stop(self) -> None:
        for node in self.nodes:
            if node.process is not None:
                node.process.terminate()
        for node in self.nodes:
            if node.process is not None:
                try:
                    node.process.wait(10)
                except subprocess.TimeoutExpired:
                    node.process.kill()
                    node.process.wait(5)
                node.process = None


def wait_jetstream(urls: list[str], timeout: float = 60.0) -> None:
    """Until the stream has a leader (and is created, when missing). While the cluster elects one, JetStream
    requests go unanswered: a client with a 1 s request timeout asks again every 1.5 s, where the usual client
    would wait out 10 s for each unanswered request."""
    from gpuslo.engine.fleet.bus import Bus, StreamSettings

    ready = Bus(urls, name="fleet-test-ready", timeout_s=1.0)
    try:
        ready.ensure_stream(StreamSettings(replicas=3))
        deadline = time.monotonic() + timeout
        while not ready.stream_leader():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the stream had no leader within {timeout}s")
            time.sleep(0.2)
    finally:
        ready.close()


def _wait_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"nats-server did not listen on 127.0.0.1:{port} within {timeout}s")
