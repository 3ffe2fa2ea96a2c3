"""Line normalisation: strip the prefixes that loggers, runtimes and collectors put before a message."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}
_ISO = (r"(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?)\s?(?P<zone>Z|UTC|[+-]\d\d:?\d\d)?")
_KV = r"(?:pid=(?P<pid>\d+)|rank=(?P<wrank>\d+)|\w+=[^\s,)]+)"
_SYSLOG_HOST = r" (?P<sysloghost>[\w.-]+) (?:kernel|[\w.@/-]+\[(?P<syspid>\d+)\]): "
# Tried in order, repeatedly, at the start of the line; each strips one layer.
_PREFIXES: tuple[re.Pattern[str], ...] = tuple(re.compile(p) for p in (
    # containerd/CRI log files: "<time> stderr F <line>"
    _ISO + r" (?:stdout|stderr) [FP] ",
    _ISO + _SYSLOG_HOST,  # journalctl -o short-iso
    r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d+ \d\d:\d\d:\d\d" + _SYSLOG_HOST,
    r"\[?" + _ISO + r"\]?:?\s+",
    # dmesg -T
    r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>\w{3}) +(?P<day>\d+) (?P<hms>\d\d:\d\d:\d\d) (?P<year>\d{4})\]\s*",
    r"\[\s*\d+\.\d+\]\s*",  # dmesg uptime
    r"(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d+ \d\d:\d\d:\d\d ",  # syslog, no year
    r"\[rank(?P<rank>\d+)\]: ?",  # torchrun
    r"\[default\d+\]: ?",  # older torchrun --tee
    r"\[pod/[^\]\s]+\] ",  # kubectl logs --prefix
    r"[\w.-]+ +\| ",  # docker compose
    # Ray and vLLM worker prefixes: "(RayWorkerWrapper pid=1, ip=10.0.0.2)", "(VllmWorker rank=1 pid=7)"
    r"\((?:[\w.-]+[, ]+)?" + _KV + r"(?:[, ]+" + _KV.replace("?P<pid>", "?:").replace("?P<wrank>", "?:")
    + r")*\) ",
    r"\((?:raylet|gcs_server|[\w.-]+)\) ",
    # vLLM's logger: "ERROR 08-01 10:00:00 [core.py:12] " (newer) or "... core.py:12] " (older)
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w./-]+:\d+\] ",
    # glog / c10 / absl: "[E ProcessGroupNCCL.cpp:475] ", "[E1015 12:34:56.7 ProcessGroupNCCL.cpp:616] ",
    # "E0101 12:00:00.000000 1234 client.cc:12] ", TF's "W tensorflow/core/x.cc:12] "
    r"\[?[IWEF](?:\d{4} \d\d:\d\d:\d\d\.\d+)?(?: +\d+)? [\w./-]+:\d+\]\s?",
    # NCCL's own "host:pid:tid [cudaDev] "
    r"(?P<ncclhost>[\w.-]+):(?P<ncclpid>\d+):\d+ \[(?P<ncclgpu>\d+)\] ",
))
MAX_LAYERS = 10


@dataclass(frozen=True)
class Line:
    """One message with its prefixes removed and what they told: time, rank, pid, gpu."""

    text: str
    raw: str
    time: datetime | None = None
    rank: int | None = None
    pid: int | None = None
    gpu: int | None = None


def _time_of(groups: dict[str, str | None]) -> datetime | None:
    try:
        if groups.get("iso"):
            stamp = groups["iso"].replace(",", ".").replace(" ", "T")  # type: ignore[union-attr]
            if "." in stamp:  # fromisoformat takes at most 6 fraction digits
                head, frac = stamp.split(".", 1)
                stamp = f"{head}.{frac[:6]}"
            zone = groups.get("zone") or "Z"
            zone = "+00:00" if zone in ("Z", "UTC") else zone
            if len(zone) == 5:
                zone = zone[:3] + ":" + zone[3:]
            return datetime.fromisoformat(stamp + zone).astimezone(UTC)
        if groups.get("year"):
            hms = [int(x) for x in groups["hms"].split(":")]  # type: ignore[union-attr]
            return datetime(int(groups["year"]), _MONTHS[groups["mon"]], int(groups["day"]),  # type: ignore[arg-type,index]
                            *hms, tzinfo=UTC)
    except (ValueError, KeyError):
        return None
    return None


def _int(value: str | None) -> int | None:
    return int(value) if value is not None else None


def normalise(raw: str) -> Line:
    """Strip prefixes layer by layer; the first time stamp, rank, pid and gpu seen are kept."""
    text = raw.rstrip("\r\n")
    moment = rank = pid = gpu = None
    for _ in range(MAX_LAYERS):
        for pattern in _PREFIXES:
            match = pattern.match(text)
            if match and match.end() > 0:
                break
        else:
            break
        groups = match.groupdict()
        moment = moment or _time_of(groups)
        rank = rank if rank is not None else _int(groups.get("rank") or groups.get("wrank"))
        pid = pid if pid is not None else _int(groups.get("pid") or groups.get("ncclpid")
                                               or groups.get("syspid"))
        gpu = gpu if gpu is not None else _int(groups.get("ncclgpu"))
        text = text[match.end():]
    return Line(text=text, raw=raw.rstrip("\r\n"), time=moment, rank=rank, pid=pid, gpu=gpu)


def segments(raw: str) -> list[str]:
    """Split a physical line on carriage returns: progress bars redraw with `\\r`, a message may follow."""
    if "\r" not in raw:
        return [raw]
    return [part for part in raw.split("\r") if part.strip()]
