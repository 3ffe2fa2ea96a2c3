"""The token probes' agent face: `--probe tokens:URL[,option=value...]`.

A URL whose path ends in `/metrics` is scraped (passive: vLLM, SGLang and TGI latency histograms); any other URL
is an OpenAI-compatible endpoint the active probe streams a request to (`model=` is then required).
Options: `model`, `interval` (seconds, default 15), `stall_ms` (active, default 200), `gpu` (index), `max_tokens`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from gpuslo.engine.errors import ConfigError, ProbeError
from gpuslo.engine.events import Event
from gpuslo.probes.probe_api import ProbeJob
from gpuslo.probes.tokens.active import ActiveProbeConfig, ActiveTokenProbe
from gpuslo.probes.tokens.passive import PassiveProbeConfig, PassiveTokenProbe

OPTIONS = frozenset({"model", "interval", "stall_ms", "gpu", "max_tokens"})
DEFAULT_INTERVAL_S = 15.0


@dataclass(frozen=True)
class TokenProbeSpec:
    url: str
    options: dict[str, str]

    @property
    def passive(self) -> bool:
        return urlsplit(self.url).path.rstrip("/").endswith("/metrics")

    @classmethod
    def parse(cls, arg: str | None) -> TokenProbeSpec:
        if not arg:
            raise ProbeError("tokens: give the endpoint, e.g. tokens:http://127.0.0.1:8000/metrics (scrape) or "
                             "tokens:http://127.0.0.1:8000/v1/chat/completions,model=NAME (streaming requests)")
        url, *rest = arg.split(",")
        options: dict[str, str] = {}
        for item in rest:
            name, equals, value = item.partition("=")
            if not equals or name.strip() not in OPTIONS:
                raise ProbeError(f"tokens: {item!r} is not one of {', '.join(sorted(OPTIONS))} as name=value")
            options[name.strip()] = value.strip()
        if not url.startswith(("http://", "https://")):
            raise ProbeError(f"tokens: expected an http:// or https:// URL, got {url!r}")
        return cls(url, options)

    def number(self, name: str, default: float) -> float:
        try:
            value = float(self.options.get(name, default))
        except ValueError as exc:
            raise ProbeError(f"tokens: {name}={self.options[name]!r} is not a number") from exc
        if value <= 0:
            raise ProbeError(f"tokens: {name} must be positive")
        return value


class TokenProbe:
    """Runs the active or the passive token probe as an agent probe: one job, every `interval` seconds."""

    name = "tokens"

    def __init__(self, spec: TokenProbeSpec, host: str):
        self.spec, self.host = spec, host
        self.interval_s = spec.number("interval", DEFAULT_INTERVAL_S)
        self._passive: PassiveTokenProbe | None = None
        self._active: ActiveTokenProbe | None = None

    def start(self) -> None:
        model = self.spec.options.get("model", "")
        try:
            if self.spec.passive:
                self._passive = PassiveTokenProbe(PassiveProbeConfig(self.spec.url, model=model), host=self.host)
                self._passive.scrape_once()  # the first scrape is the baseline of the first window
                return
            if not model:
                raise ProbeError("tokens: an endpoint to stream from needs model=NAME")
            gpu = self.spec.options.get("gpu")
            self._active = ActiveTokenProbe(ActiveProbeConfig(
                self.spec.url, model, stall_threshold_ms=self.spec.number("stall_ms", 200.0),
                max_tokens=int(self.spec.number("max_tokens", 64)), gpu=int(gpu) if gpu is not None else None),
                host=self.host)
        except (ConfigError, ValueError) as exc:
            raise ProbeError(f"tokens: {exc}") from exc

    def _run(self) -> Sequence[Event]:
        if self._passive is not None:
            return self._passive.scrape_once()
        assert self._active is not None, "start() first"
        return self._active.run_once()

    def jobs(self) -> Sequence[ProbeJob]:
        kind = "scrape" if self.spec.passive else "stream"
        return (ProbeJob(f"tokens-{kind}", self.interval_s, self._run),)

    def stop(self) -> None:
        for probe in (self._passive, self._active):
            if probe is not None:
                probe.close()


def build_probe(arg: str | None, host: str) -> TokenProbe:
    """The agent's entry point: `--probe tokens:URL[,model=M,interval=S,...]`."""
    return TokenProbe(TokenProbeSpec.parse(arg), host)
