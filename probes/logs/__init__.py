"""Log probe: recognizes GPU incidents (OOM, NCCL timeouts and errors, CUDA and graph errors, Xid) in text logs."""

from gpuslo.probes.logs.parser import LogParser, ParserSettings
from gpuslo.probes.logs.sources import FileFollower, JournalSource, KmsgSource, StreamSource

__all__ = ["FileFollower", "JournalSource", "KmsgSource", "LogParser", "ParserSettings", "StreamSource"]


def build_probe(arg: str | None, host: str):  # type: ignore[no-untyped-def]
    """The agent's entry point (`--probe logs:PATH[,PATH...]`); see agent_probe.py."""
    from gpuslo.probes.logs.agent_probe import build_probe as build

    return build(arg, host)
