"""A real Alertmanager (Debian's prometheus-alertmanager) on free loopback ports, routing to one webhook URL."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

ALERTMANAGER = shutil.which("prometheus-alertmanager") or shutil.which("alertmanager")
ALERTMANAGER_NEEDED = pytest.mark.skipif(
    ALERTMANAGER is None, reason="needs Debian's prometheus-alertmanager (scripts/install.sh installs it)")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[Callable[[str], str]]:
    """Start a real Alertmanager that sends every alert at once to the webhook `url` given; returns its URL."""
    started: list[tuple[subprocess.Popen[bytes], object]] = []

    def start(webhook_url: str, extra_webhook_config: str = "") -> str:
        port, cluster = free_port(), free_port()
        home = tmp_path / f"am-{len(started)}"
        home.mkdir()
        config = home / "alertmanager.yml"
        config.write_text(
            "route:\n  receiver: hook\n  group_by: [alertname]\n  group_wait: 0s\n  group_interval: 1s\n"
            "  repeat_interval: 1h\n"
            f"receivers:\n  - name: hook\n    webhook_configs:\n      - url: {webhook_url}\n"
            f"        send_resolved: true\n{extra_webhook_config}")
        log = (home / "alertmanager.log").open("wb")
        process = subprocess.Popen(
            [str(ALERTMANAGER), f"--config.file={config}", f"--storage.path={home / 'data'}",
             f"--web.listen-address=127.0.0.1:{port}", f"--cluster.listen-address=127.0.0.1:{cluster}",
             "--log.level=warn"], stdout=subprocess.DEVNULL, stderr=log)
        started.append((process, log))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(f"{url}/-/ready", timeout=1).status_code == 200:
                    return url
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("alertmanager did not start: " + (home / "alertmanager.log").read_text()[-2000:])
            time.sleep(0.1)

    try:
        yield start
    finally:
        for process, log in started:
            process.terminate()
            process.wait(10)
            log.close()  # type: ignore[attr-defined]
