"""Log probe: recognizes GPU incidents (OOM, NCCL timeouts and errors, CUDA and graph errors, Xid) in text logs."""

from gpuslo.probes.logs.parser import LogParser, ParserSettings
from gpuslo.probes.logs.sources import FileFollower, JournalSource, KmsgSource, StreamSource

__all__ = ["FileFollower", "JournalSource", "KmsgSource", "LogParser", "ParserSettings", "StreamSource"]
