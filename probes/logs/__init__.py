"""Log probe: recognizes GPU incidents (OOM, NCCL timeouts and errors, CUDA and graph errors, Xid) in text logs.

Conventions of its events: `host` is the probe's host; a host named by the line (syslog's, NCCL's `host:pid:tid`)
is the label `log_host`, as logs may be collected centrally. `pci_bus` is `dddd:bb:dd` (domain:bus:device,
lower case), the form Xid lines print. A syslog stamp without a year takes the latest year that does not put it
more than a day ahead of the probe's clock, read as UTC.
"""

from gpuslo.probes.logs.parser import LogParser, ParserSettings
from gpuslo.probes.logs.sources import FileFollower, JournalSource, KmsgSource, StreamSource

__all__ = ["FileFollower", "JournalSource", "KmsgSource", "LogParser", "ParserSettings", "StreamSource"]


def build_probe(arg: str | None, host: str):  # type: ignore[no-untyped-def]
    """The agent's entry point (`--probe logs:PATH[,PATH...]`); see agent_probe.py."""
    from gpuslo.probes.logs.agent_probe import build_probe as build

    return build(arg, host)
