"""The log probe as a node-agent probe: `gpuslo agent --probe logs:PATH[,PATH...]` (also `serve --probe`)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpuslo.engine.errors import ProbeError
from gpuslo.engine.events import Event
from gpuslo.probes.logs.parser import LogParser, ParserSettings
from gpuslo.probes.logs.sources import FileFollower
from gpuslo.probes.logs.state import StateStore
from gpuslo.probes.probe_api import ProbeJob

POLL_INTERVAL_S = 1.0
STATE_FILE = Path("var") / "logs-probe-state.json"  # read positions, so a restarted agent repeats nothing


class LogsAgentProbe:
    """Follows log files and returns the incidents found since the last poll."""

    name = "logs"

    def __init__(self, paths: Sequence[Path], host: str, state_file: Path = STATE_FILE):
        self.paths = tuple(paths)
        self.host = host
        self._state_file = state_file
        self._followers: list[FileFollower] = []
        self._state = StateStore(None)

    def start(self) -> None:
        if not self.paths:
            raise ProbeError("logs: no file to follow; use --probe logs:PATH[,PATH...]")
        self._state_file.parent.mkdir(parents=True, exist_ok=True)
        state = self._state = StateStore(self._state_file)
        self._followers = [
            FileFollower(path, LogParser(ParserSettings(host=self.host, source=str(path.resolve()))), state)
            for path in self.paths
        ]

    def jobs(self) -> Sequence[ProbeJob]:
        return (ProbeJob("follow", POLL_INTERVAL_S, self.poll),)

    def poll(self) -> list[Event]:
        events = [event for follower in self._followers for event in follower.poll()]
        self._state.save()  # positions only advance past incidents already returned
        return events

    def stop(self) -> None:
        """Close the files; an incident still being assembled is read again from its start next time."""
        for follower in self._followers:
            follower.close()
        self._followers = []


def build_probe(arg: str | None, host: str) -> LogsAgentProbe:
    """`logs:PATH[,PATH...]`: a missing file is followed once it appears (rotation-safe)."""
    return LogsAgentProbe([Path(p) for p in (arg or "").split(",") if p], host)
