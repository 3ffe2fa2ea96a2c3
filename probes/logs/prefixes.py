"""Line normalisation: strip the prefixes that loggers, runtimes and collectors put before a message."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

_MONTHS = {m: i for i, m in enumerate(
    ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"), start=1)}
_ISO = (r"(?P<iso>\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?)\s?(?P<zone>Z|UTC|[+-]\d\d:?\d\d)?")
_KV = r"(?:pid=(?P<pid>\d+)|rank=(?P<wrank>\d+)|\w+=[^\s,)]+)"
_SYSLOG_HOST = r" (?P<sysloghost>[\w.-]+) (?:kernel|[\w.@/-]+\[(?P<syspid>\d+)\]): "
# RFC 3164 syslog and journalctl's default form: no year and no zone ("Feb 14 05:03:44")
_SYSLOG_TIME = (r"(?P<mon>Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +(?P<day>\d+) "
                r"(?P<hms>\d\d:\d\d:\d\d)")
# A yearless stamp is taken from the latest year that does not put it in the future; "future" allows a day,
# because local-time stamps read as UTC run up to 14 h ahead, and a central collector's clock may lag.
_FUTURE_SLACK = timedelta(days=1)
# Tried in order, repeatedly, at the start of the line; each strips one layer.
_PREFIXES: tuple[re.Pattern[str], ...] = tuple(re.compile(p) for p in (
    # containerd/CRI log files: "<time> stderr F <line>"
    _ISO + r" (?:stdout|stderr) [FP] ",
    _ISO + _SYSLOG_HOST,  # journalctl -o short-iso
    _SYSLOG_TIME + _SYSLOG_HOST,
    # SGLang: "[2024-10-22 06:31:49 TP0] ", "[2025-01-01 10:00:00 DP1 TP3] "
    r"\[" + _ISO + r"(?: (?:TP|DP|PP|EP)\d+)+\] ",
    r"\[?" + _ISO + r"\]?:?\s+",
    # a console that stamps lines to the minute (" 2025-02-18 12:54 [rank12]:[E218 ...")
    r"\s*(?P<minute>\d{4}-\d\d-\d\d \d\d:\d\d) (?=\S)",
    # TensorRT's trtexec/logger ("[05/25/2023-20:44:13] [W] ", "[TRT] [E] "), TensorRT-LLM's ("[TensorRT-LLM][ERROR] ")
    r"\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\] (?:\[[VIWEF]\] )?",
    r"(?:\[TRT\] )?\[[VIWEF]\] (?:\[TRT\] )?",
    r"\[TensorRT-LLM\](?:\[[A-Z]+\])+ ",
    # TensorRT-LLM's Python logger: "[TRT-LLM] [RANK 2] [E] ", and the same line quoted in a reply ("> [09/17/...")
    r"\[TRT-LLM\] (?:\[RANK (?P<trtrank>\d+)\] )?\[[VIWEF]\] ",
    r"> (?=\[\d\d/\d\d/\d{4}-\d\d:\d\d:\d\d\] )",
    # dmesg -T
    r"\[(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>\w{3}) +(?P<day>\d+) (?P<hms>\d\d:\d\d:\d\d) (?P<year>\d{4})\]\s*",
    r"\[\s*\d+\.\d+\]\s*",  # dmesg uptime
    _SYSLOG_TIME + " ",  # syslog without a host
    # Go's log package (k8s device plugin, NVSentinel, DCGM tools): "2020/08/10 19:09:42 " with an optional level
    r"(?P<goday>\d{4}/\d\d/\d\d) (?P<gohms>\d\d:\d\d:\d\d)(?:\.\d+)? (?:(?:DEBUG|INFO|WARN|WARNING|ERROR) )?",
    # llama.cpp's logger since 2025: "[56285] 0.54.236.075 E " (pid, time since start, level)
    r"(?:\[(?P<lcpid>\d+)\] )?\d+\.\d\d\.\d\d\d\.\d\d\d [DIWE] ",
    r"\[rank(?P<rank>\d+)\]: ?",  # torchrun
    r"\[default\d+\]: ?",  # older torchrun --tee
    r"\[pod/[^\]\s]+\] ",  # kubectl logs --prefix
    r"[\w.-]+ +\| ",  # docker compose
    # Ray and vLLM worker prefixes: "(RayWorkerWrapper pid=1, ip=10.0.0.2)", "(VllmWorker rank=1 pid=7)", and a
    # Ray actor named by its role: "(ActorWorker(actor_train-1) pid=18175, ip=...)", vLLM's "(VllmWorker TP1 pid=409)"
    r"\((?:[\w.-]+(?:\([\w.-]+\))?[, ]+){0,2}" + _KV
    + r"(?:[, ]+" + _KV.replace("?P<pid>", "?:").replace("?P<wrank>", "?:") + r")*\) ",
    r"\((?:raylet|gcs_server|[\w.-]+)\) ",
    # vLLM's logger: "ERROR 08-01 10:00:00 [core.py:12] " (newer) or "... core.py:12] " (older)
    r"(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[?[\w./-]+:\d+\] ",
    # glog / c10 / absl: "[E ProcessGroupNCCL.cpp:475] ", "[E1015 12:34:56.7 ProcessGroupNCCL.cpp:616] ",
    # "E0101 12:00:00.000000 1234 client.cc:12] ", TF's "W tensorflow/core/x.cc:12] "
    r"\[?[IWEF](?:\d{4} \d\d:\d\d:\d\d\.\d+)?(?: +\d+)? [\w./-]+:\d+\]\s?",
    # Open MPI's --timestamp-output and --tag-output: "Fri Aug 11 12:31:45 2023[1,0]<stdout>:" (job, rank, stream)
    r"(?:(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) (?P<mon>\w{3}) +(?P<day>\d+) (?P<hms>\d\d:\d\d:\d\d) (?P<year>\d{4}))?"
    r"\[\d+,(?P<mpirank>\d+)\]<(?:stdout|stderr|stddiag)>: ?",
    # mpirun's rank tag in front of NCCL's prefix: "[2] node0:13572:13640 [1] "
    r"\[(?P<mpirank>\d+)\] (?=[\w.-]+:\d+:\d+ \[\d+\] )",
    # srun --label's task tag in front of NCCL's prefix or a traceback: "201: :41367:41367 [1] ", "201: Traceback"
    r"\d{1,5}: (?=[\w.-]*:\d+:\d+ \[\d+\] |Traceback|\s+File \")",
    # NCCL's own "host:pid:tid [cudaDev] " (some builds print an empty host: ":41367:41367 [1] ")
    r"(?P<ncclhost>[\w.-]*):(?P<ncclpid>\d+):(?P<nccltid>\d+) \[(?P<ncclgpu>\d+)\] ",
))
MAX_LAYERS = 10
_TAG_KV = re.compile(r"\b(pid|rank)=(\d+)")


Clock = Callable[[], datetime]


@dataclass(frozen=True)
class Line:
    """One message with its prefixes removed and what they told: time, rank, pid, gpu, and who printed it.

    `log_host` is the host the line names (syslog's or NCCL's), which differs from the probe's host when logs
    are collected centrally; `origin` is NCCL's `host:pid:tid`, the one thread that printed the line.
    """

    text: str
    raw: str
    time: datetime | None = None
    rank: int | None = None
    pid: int | None = None
    gpu: int | None = None
    log_host: str | None = None
    origin: str | None = None


def _iso_time(groups: dict[str, str | None]) -> datetime:
    stamp = groups["iso"].replace(",", ".").replace(" ", "T")  # type: ignore[union-attr]
    if "." in stamp:  # fromisoformat takes at most 6 fraction digits
        head, frac = stamp.split(".", 1)
        stamp = f"{head}.{frac[:6]}"
    zone = groups.get("zone") or "Z"
    zone = "+00:00" if zone in ("Z", "UTC") else zone
    if len(zone) == 5:
        zone = zone[:3] + ":" + zone[3:]
    return datetime.fromisoformat(stamp + zone).astimezone(UTC)


def _yearless_time(month: int, day: int, hms: tuple[int, int, int], now: datetime) -> datetime | None:
    """A syslog stamp without a year, in UTC: the latest year (Feb 29 may look back years) that does not put
    it more than `_FUTURE_SLACK` after `now`."""
    for year in range(now.year, now.year - 8, -1):
        try:
            moment = datetime(year, month, day, *hms, tzinfo=UTC)
        except ValueError:  # Feb 29 outside a leap year, or a day the month lacks
            continue
        if moment <= now + _FUTURE_SLACK:
            return moment
    return None


def _time_of(groups: dict[str, str | None], clock: Clock | None) -> datetime | None:
    try:
        if groups.get("iso"):
            return _iso_time(groups)
        hms_text, mon, day, year = groups.get("hms"), groups.get("mon"), groups.get("day"), groups.get("year")
        if hms_text and mon and day:
            hour, minute, second = (int(x) for x in hms_text.split(":"))
            if year:
                return datetime(int(year), _MONTHS[mon], int(day), hour, minute, second, tzinfo=UTC)
            return _yearless_time(_MONTHS[mon], int(day), (hour, minute, second), (clock or _utc_now)())
    except (ValueError, KeyError):
        return None
    return None


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _int(value: str | None) -> int | None:
    return int(value) if value is not None else None


def normalise(raw: str, clock: Clock | None = None) -> Line:
    """Strip prefixes layer by layer; the first time stamp, rank, pid, gpu and host seen are kept. `clock`
    (read only for a stamp without a year) gives the year such a stamp belongs to."""
    text = raw.rstrip("\r\n")
    moment = rank = pid = gpu = log_host = origin = None
    for _ in range(MAX_LAYERS):
        for pattern in _PREFIXES:
            match = pattern.match(text)
            if match and match.end() > 0:
                break
        else:
            break
        groups = match.groupdict()
        if groups.get("minute"):
            groups["iso"] = groups["minute"] + ":00"
        if groups.get("goday"):  # Go's "2006/01/02 15:04:05"
            groups["iso"] = f"{groups['goday'].replace('/', '-')} {groups['gohms']}"
        if "=" in match.group(0):  # a Ray/vLLM worker tag names pid and rank in any order: "(VllmWorker rank=1 pid=7)"
            tag = dict(_TAG_KV.findall(match.group(0)))
            groups.setdefault("pid", None)
            groups["pid"] = groups["pid"] or tag.get("pid")
            groups["wrank"] = groups.get("wrank") or tag.get("rank")
        moment = moment or _time_of(groups, clock)
        rank = rank if rank is not None else _int(groups.get("rank") or groups.get("wrank") or groups.get("mpirank")
                                                       or groups.get("trtrank"))
        pid = pid if pid is not None else _int(groups.get("pid") or groups.get("ncclpid")
                                               or groups.get("syspid") or groups.get("lcpid"))
        gpu = gpu if gpu is not None else _int(groups.get("ncclgpu"))
        log_host = log_host or groups.get("sysloghost") or groups.get("ncclhost") or None
        if origin is None and groups.get("nccltid"):
            origin = f"{groups['ncclhost']}:{groups['ncclpid']}:{groups['nccltid']}"
        text = text[match.end():]
    return Line(text=text, raw=raw.rstrip("\r\n"), time=moment, rank=rank, pid=pid, gpu=gpu,
                log_host=log_host, origin=origin)


# A glog/c10 record header inside a line, after the end of an earlier record's sentence: lines whose newlines a
# paste or a progress bar lost ("... incomplete data. [E ProcessGroupNCCL.cpp:460] To avoid ...").
_GLUED_RECORD = re.compile(r"(?:(?<=[.!])\s|(?<=\]))(?=\[(?:rank\d+\]:\[)?[EWIF]\d{0,4}[\d:. ]*?\s?[\w./-]+\."
                           r"(?:cpp|cc|cu|h|hpp|py):\d+\] )")


# a source location near the head of a code span that opens a line: the span holds a pasted log record
_PASTED_RECORD = re.compile(r"\s*`+ ?(?=[^`\n]{0,300}?(?:[A-Za-z]:)?[\w./\\-]+\.(?:cc|cpp|cu|cuh|c|h|hpp|py)[:(]\d+)")


_PLAIN_WORD = re.compile(r"\b[A-Za-z][a-z']+\b")


def _inline_code(part: str) -> list[str]:
    opened = _PASTED_RECORD.match(part)
    if opened:  # "` onnx runtime error 6: ... einsum_auxiliary_ops.cc:298 ... CUDA failure 1: ...`"
        return [part[opened.end():]]
    at = part.find("`")
    if at < 0 or not any(p.match(part, at + 1) for p in _PREFIXES):
        return [part]
    close = part.find("`", at + 1)
    if part[:at].strip() and close > 0 and len(_PLAIN_WORD.findall(part[close + 1:])) >= 8:
        return [part]  # a record quoted inside a sentence that goes on: "I encountered a `[rank0]:[E1010 ...] ...`,
        # when training a LLaVA model with ..." (prose.py reads the whole sentence)
    return [part[:at], part[at + 1:]] if part[:at].strip() else [part[at + 1:]]


def segments(raw: str) -> list[str]:
    """Split a physical line into the records it holds: progress bars redraw with `\\r` and a message may follow;
    a paste that lost its newlines glues glog records together."""
    parts = raw.split("\r") if "\r" in raw else [raw]
    if "] " in raw:
        parts = [piece for part in parts for piece in _GLUED_RECORD.split(part)]
    if "`" in raw:  # a paste that opens inline code at a log record: "error log `H100-2:1:2 [1] ... NCCL WARN ..."
        parts = [piece for part in parts for piece in _inline_code(part)]
    return [part for part in parts if part.strip()] if len(parts) > 1 else parts
