"""Replay recorded events (JSON Lines) into a running gpuslo server over HTTP, in batches."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import httpx

from gpuslo.engine.errors import GpusloError

EVENTS_PATH = "/api/v1/events"
STATUSES = ("accepted", "duplicate", "rejected", "conflict")


class ReplayError(GpusloError):
    """The server could not be reached or refused a whole batch; nothing more was sent."""


@dataclass(frozen=True)
class LineVerdict:
    """Why one line of the file was not accepted: its 1-based line number, event id, status and reasons."""

    line: int
    id: str | None
    status: str
    problems: tuple[str, ...]

    def __str__(self) -> str:
        ident = f" id {self.id}" if self.id else ""
        reasons = "; ".join(self.problems) or "no reason given"
        return f"line {self.line}:{ident} {self.status}: {reasons}"


@dataclass(frozen=True)
class ReplayReport:
    """Counts per ingest status and the lines that were rejected or in conflict, in file order."""

    accepted: int
    duplicate: int
    rejected: int
    conflict: int
    refused: tuple[LineVerdict, ...]

    @property
    def total(self) -> int:
        return self.accepted + self.duplicate + self.rejected + self.conflict

    @property
    def ok(self) -> bool:
        """True when every line was accepted or was a duplicate."""
        return self.rejected == 0 and self.conflict == 0


@dataclass(frozen=True)
class _Item:
    line: int
    event: Any


@dataclass
class _Tally:
    counts: dict[str, int]
    refused: list[LineVerdict]

    def add(self, verdict: LineVerdict | None, status: str) -> None:
        self.counts[status] = self.counts.get(status, 0) + 1
        if verdict is not None:
            self.refused.append(verdict)

    def report(self) -> ReplayReport:
        refused = tuple(sorted(self.refused, key=lambda v: v.line))
        return ReplayReport(*(self.counts.get(s, 0) for s in STATUSES), refused=refused)


def _read_items(stream: BinaryIO, tally: _Tally, on_bytes: Callable[[int], None]) -> Iterator[_Item]:
    """Decoded JSON lines; a line that is not JSON is tallied as rejected here and never sent."""
    for number, raw in enumerate(stream, start=1):
        on_bytes(len(raw))
        text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
        if not text.strip():
            continue
        try:
            yield _Item(number, json.loads(text))
        except json.JSONDecodeError as exc:
            reason = f"not JSON: {exc.msg} at column {exc.colno}"
            tally.add(LineVerdict(number, None, "rejected", (reason,)), "rejected")


def _batches(items: Iterator[_Item], size: int) -> Iterator[list[_Item]]:
    batch: list[_Item] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch


def _error_message(response: httpx.Response) -> str:
    try:
        error = response.json()["error"]
        return f"{error['code']}: {error['message']}"
    except (ValueError, KeyError, TypeError):
        return response.text.strip().splitlines()[0] if response.text.strip() else response.reason_phrase


def _post(client: httpx.Client, url: str, batch: list[_Item]) -> list[dict[str, Any]]:
    try:
        response = client.post(url, json=[item.event for item in batch])
    except httpx.ConnectError as exc:
        raise ReplayError(f"cannot connect to {url}: {exc} (is `gpuslo serve` running there?)") from exc
    except httpx.HTTPError as exc:
        raise ReplayError(f"request to {url} failed: {exc or type(exc).__name__}") from exc
    if response.status_code not in (200, 409, 422):
        raise ReplayError(f"server refused the batch: HTTP {response.status_code} {_error_message(response)}")
    try:
        results = response.json()["results"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ReplayError(f"server sent an unexpected answer (HTTP {response.status_code})") from exc
    if len(results) != len(batch):
        raise ReplayError(f"server answered {len(results)} results for {len(batch)} events")
    return list(results)


def _tally_results(tally: _Tally, batch: list[_Item], results: list[dict[str, Any]]) -> None:
    for item, result in zip(batch, results, strict=True):
        status = result.get("status", "rejected")
        verdict = None
        if status in ("rejected", "conflict"):
            problems = tuple(f"{p.get('field')}: {p.get('reason')}" for p in result.get("problems", []))
            if status == "conflict" and not problems:
                problems = ("this id was stored before with another body",)
            verdict = LineVerdict(item.line, result.get("id"), status, problems)
        tally.add(verdict, status if status in STATUSES else "rejected")


def replay_file(
    path: Path,
    server: str,
    *,
    batch_size: int = 500,
    token: str | None = None,
    timeout_s: float = 60.0,
    on_bytes: Callable[[int], None] = lambda _n: None,
    transport: httpx.BaseTransport | None = None,
) -> ReplayReport:
    """Post every line of a JSON Lines file to `server` as JSON arrays of `batch_size` events.

    `on_bytes` is called with the size of each line read (for a progress bar). Raises ReplayError when the
    server cannot be reached or refuses a whole batch; re-running is safe, since event ids are idempotent.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be at least 1")
    url = server.rstrip("/") + EVENTS_PATH
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    tally = _Tally({}, [])
    with (
        httpx.Client(headers=headers, timeout=timeout_s, transport=transport) as client,
        Path(path).open("rb") as stream,
    ):
        for batch in _batches(_read_items(stream, tally, on_bytes), batch_size):
            _tally_results(tally, batch, _post(client, url, batch))
    return tally.report()
