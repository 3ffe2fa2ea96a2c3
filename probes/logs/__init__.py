"""Log probe: recognizes GPU incidents (OOM, NCCL timeouts and errors, CUDA and graph errors, Xid) in text logs.

Conventions of its events: `host` is the probe's host; a host named by the line (syslog's, NCCL's `host:pid:tid`)
is the label `log_host`, as logs may be collected centrally. `pci_bus` is `dddd:bb:dd` (domain:bus:device,
lower case), the form Xid lines print. A syslog stamp without a year takes the latest year that does not put it
more than a day ahead of the probe's clock, read as UTC.
"""

from gpuslo.probes.logs.agent_probe import LogsAgentProbe, build_probe
from gpuslo.probes.logs.parser import LogParser, ParserSettings
from gpuslo.probes.logs.sources import FileFollower, JournalSource, KmsgSource, StreamSource

__all__ = ["FileFollower", "JournalSource", "KmsgSource", "LogParser", "LogsAgentProbe", "ParserSettings",
           "StreamSource", "build_probe"]
