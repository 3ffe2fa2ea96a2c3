"""`gpuslo probe tokens`: measure time-to-first-token and inter-token gaps of a streaming LLM endpoint."""

from __future__ import annotations

import json
import time

import click

from gpuslo.probes.tokens import ActiveProbeConfig, ActiveTokenProbe


@click.command("tokens")
@click.argument("url")
@click.option("--model", required=True, help="Model name sent in the request.")
@click.option("--api", type=click.Choice(["chat", "completions"]), default=None,
              help="Endpoint flavour when URL is a base URL (default: chat).")
@click.option("--max-tokens", type=click.IntRange(1), default=64, show_default=True)
@click.option("--stall-ms", type=click.FloatRange(min=1), default=200.0, show_default=True,
              help="Gaps at or above this become token_stall events.")
@click.option("--timeout", "timeout_s", type=click.FloatRange(min=0.1), default=30.0, show_default=True)
@click.option("--count", type=click.IntRange(1), default=1, show_default=True, help="Requests to send.")
@click.option("--interval", type=click.FloatRange(min=0), default=10.0, show_default=True,
              help="Seconds between requests when --count > 1.")
@click.option("--host", default=None, help="Host name put in events (default: this machine's).")
@click.option("--gpu", type=click.IntRange(0, 1023), default=None,
              help="Index of the GPU serving the endpoint, put in events so rules can join them with GPU events.")
def tokens_command(url: str, model: str, api: str | None, max_tokens: int, stall_ms: float, timeout_s: float,
                   count: int, interval: float, host: str | None, gpu: int | None) -> None:
    """Send streaming requests to URL and print token_request / token_latency / token_stall events as JSON lines."""
    config = ActiveProbeConfig(url=url, model=model, api=api, max_tokens=max_tokens,
                               stall_threshold_ms=stall_ms, timeout_s=timeout_s, gpu=gpu)
    with ActiveTokenProbe(config, host=host) as probe:
        for index in range(count):
            if index:
                time.sleep(interval)
            # Each event is printed as it is made (a request's start while it is in flight), flushed per line,
            # so a pipe reader (replay, a shipper) sees a request that hangs while it hangs.
            probe.run_once(sink=lambda event: click.echo(json.dumps(event.to_dict(), sort_keys=True)))
