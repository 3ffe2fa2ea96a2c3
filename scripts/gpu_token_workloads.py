"""The two GPU processes of the token-stream proof (scripts/gpu_tokens.py starts each in its own process).

    python3 scripts/gpu_token_workloads.py serve --port P --gpuslo URL   # a streaming OpenAI-style endpoint
    python3 scripts/gpu_token_workloads.py squeeze --leave-gib 40        # another tenant crowding the GPU

`serve`: a small Llama built from a `transformers` config with random weights (nothing is downloaded), a byte
tokenizer, greedy decoding one token per server-sent event on /v1/completions and /v1/chat/completions, and
the gpuslo allocator reporter (`torch_allocator.start`) in the same process. POST /control/fragment starts a
thread that fragments this process's caching allocator (mixed sizes, every other one freed), then, while a
stream is mid-decode, asks for a block larger than any cached one and than the device has free: the
allocator flushes its cache (cudaFree of every free segment) and retries, under the decode loop. Every window
(fill, retry, cleanup) is timed in wall-clock nanoseconds and served on GET /control/state, so each stall the
client measures can be matched to what the allocator was doing.

POST /control/sdpa {"cudnn": false} turns PyTorch's cuDNN attention backend off (on: true). With it on (the
default of the H200's torch 2.11), the engine thread compiles with NVRTC at every decoded token: PyTorch caches
cuDNN attention plans per thread (aten/src/ATen/native/cudnn/MHA.cpp) and per KV length, which grows by one each
token, and each request runs on a new thread. Measured on the H200 (h14d): 75-83 % of a quiet request's time in
libnvrtc, ITL p50 57-74 ms; with it off, none and 7.7-10.7 ms. `--sdpa no-cudnn` starts with it off.

`squeeze`: fills the device with mixed-size blocks, frees every other one, then makes one large request that
forces its own allocator to flush and retry; prints `RESULT {json}` and holds what it has until killed
(SIGUSR1 makes it give the large block back, leaving the mixed-size half held).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from gpu_side_stream import GpuHold  # GPU contention from a side stream (POST /control/gpu)
from gpu_workloads import expected_fr, fill_blocks  # the same fill and FR maths as the e2e run

MIB, GIB = 1 << 20, 1 << 30
MODEL = "tiny-llama-random"
VOCAB = 256  # byte tokenizer: token id = byte value
MAX_PROMPT = 512
# Above 10 MiB each block gets its own cudaMalloc'd segment, so every freed one stays a separate cached block.
SERVE_SIZES_MIB = (12, 18, 14, 22, 16)
SQUEEZE_SIZES_MIB = (512, 1024, 1536, 768, 1280)


# ---------------------------------------------------------------------------------------------- serving


class Generator:
    """Greedy decoding with a KV cache, one request at a time; says how far the current stream is."""

    def __init__(self, model: Any, device: str):
        self.model, self.device = model, device
        self.lock = threading.Lock()
        self.active = False
        self.position = -1
        self.requests = 0
        self.between_tokens: Any = None  # called on the engine thread between two tokens (the kernel storm)

    def stream(self, prompt: str, max_tokens: int) -> Any:
        import torch

        ids = list(prompt.encode("utf-8"))[-MAX_PROMPT:] or [0]
        with self.lock, torch.inference_mode():
            self.requests += 1
            out = self.model(input_ids=torch.tensor([ids], device=self.device), use_cache=True)
            self.active = True
            try:
                for index in range(max_tokens):
                    token = out.logits[:, -1].argmax(-1)
                    value = int(token.item())  # waits for the GPU: this token exists now
                    self.position = index
                    yield bytes([value]).decode("latin-1")  # one printable-or-not char, never empty
                    if self.between_tokens is not None:
                        self.between_tokens()
                    if index + 1 < max_tokens:
                        out = self.model(input_ids=token[:, None], past_key_values=out.past_key_values,
                                         use_cache=True)
            finally:
                self.active, self.position = False, -1


@dataclass(frozen=True)
class FragConfig:
    margin_bytes: int = 1 * GIB      # left free on the device after the fill
    big_bytes: int = 4 * GIB         # > any cached block and > device free: cudaMalloc fails, flush, retry
    hold_s: float = 2.5              # the reporter (1 s interval) samples the fragmented state meanwhile
    min_token_index: int = 8         # the retry lands mid-stream, under the decode loop
    pause_s: float = 1.0


def _wall_ms(start_ns: int, end_ns: int) -> float:
    return round((end_ns - start_ns) / 1e6, 3)


class Fragmenter(threading.Thread):
    """Fragments this process's caching allocator, then forces a flush-and-retry mid-stream, in cycles."""

    def __init__(self, generator: Generator, config: FragConfig):
        super().__init__(name="fragmenter", daemon=True)
        self.generator, self.config = generator, config
        self.stop_event = threading.Event()
        self.cycles: list[dict[str, Any]] = []
        self.error: str | None = None

    def _wait(self, ready: Any, timeout: float) -> float:
        started = time.monotonic()
        while not ready() and time.monotonic() - started < timeout and not self.stop_event.is_set():
            time.sleep(0.002)
        return round(time.monotonic() - started, 3)

    def cycle(self, torch: Any) -> dict[str, Any]:
        gen, cfg = self.generator, self.config
        rec: dict[str, Any] = {"cycle": len(self.cycles)}
        free, _ = torch.cuda.mem_get_info()
        rec["fill_start_ns"] = time.time_ns()
        blocks = fill_blocks(torch, free - cfg.margin_bytes, SERVE_SIZES_MIB)
        rec["fill_end_ns"] = time.time_ns()
        freed = [b.numel() for b in blocks[0::2]]
        kept = blocks[1::2]
        del blocks
        rec.update(segments=len(freed) + len(kept), freed_segments=len(freed), freed_bytes=sum(freed),
                   expected_fr=round(expected_fr(freed), 6), device_free_after_fill=torch.cuda.mem_get_info()[0])
        self.stop_event.wait(cfg.hold_s)
        rec["waited_for_stream_s"] = self._wait(lambda: gen.active and gen.position >= cfg.min_token_index, 15)
        rec["mid_stream"] = gen.active
        retries = torch.cuda.memory_stats().get("num_alloc_retries", 0)
        rec["retry_start_ns"] = time.time_ns()
        try:
            big = torch.empty(cfg.big_bytes, dtype=torch.uint8, device="cuda")
            rec["oom"] = None
        except torch.OutOfMemoryError as exc:
            big, rec["oom"] = None, str(exc).splitlines()[0][:200]
        rec["retry_end_ns"] = time.time_ns()
        rec["retry_ms"] = _wall_ms(rec["retry_start_ns"], rec["retry_end_ns"])
        rec["alloc_retries"] = torch.cuda.memory_stats().get("num_alloc_retries", 0) - retries
        del big, kept
        rec["waited_for_idle_s"] = self._wait(lambda: not gen.active, 5)
        rec["cleanup_start_ns"] = time.time_ns()
        torch.cuda.empty_cache()  # a clean start for the next cycle; timed, since it frees segments too
        rec["cleanup_end_ns"] = time.time_ns()
        rec["cleanup_ms"] = _wall_ms(rec["cleanup_start_ns"], rec["cleanup_end_ns"])
        print("CYCLE " + json.dumps(rec), flush=True)
        return rec

    def run(self) -> None:
        import torch

        try:
            while not self.stop_event.is_set():
                self.cycles.append(self.cycle(torch))
                self.stop_event.wait(self.config.pause_s)
        except Exception as exc:  # noqa: BLE001 - reported on /control/state, never kills the server
            self.error = f"{type(exc).__name__}: {exc}"
            print(f"FRAGMENTER FAILED {self.error}", flush=True)


class KernelStorm:
    """Blocking file I/O on the engine thread itself: every `every_s`, between two tokens, write `mib` MiB to a
    file and fsync it (the kernel cause of the labelled attribution run). Each storm is timed."""

    def __init__(self, every_s: float = 1.0, mib: int = 256, path: str = "/tmp/gpuslo-kernel-storm.bin"):
        self.every_s, self.mib, self.path = every_s, mib, path
        self.last = time.monotonic()
        self.storms: list[dict[str, Any]] = []
        self._data = os.urandom(MIB) * mib  # one write(2) of it all: one long system call, then the fsync

    def __call__(self) -> None:
        if time.monotonic() - self.last < self.every_s:
            return
        start = time.time_ns()
        with open(self.path, "wb") as f:
            os.write(f.fileno(), self._data)
            os.fsync(f.fileno())
        self.storms.append({"start_ns": start, "end_ns": time.time_ns()})
        self.last = time.monotonic()


class App:
    """What the HTTP handler needs: the generator, the fragmenter, the reporter."""

    def __init__(self, generator: Generator, reporter: Any, device: str):
        self.generator, self.reporter, self.device = generator, reporter, device
        self.fragmenter: Fragmenter | None = None
        self.gpu_hold: GpuHold | None = None

    def state(self) -> dict[str, Any]:
        frag = self.fragmenter
        return {"pid": os.getpid(), "device": self.device, "requests": self.generator.requests,
                "sdpa_cudnn": set_cudnn_sdp(self.device, None),
                "reporter": asdict(self.reporter.stats) if self.reporter else None,
                "fragmenter": None if frag is None else {"running": frag.is_alive(), "error": frag.error,
                                                         "cycles": list(frag.cycles)}}


def _chunk(api: str, token: str, request_id: str) -> dict[str, Any]:
    if api == "chat":
        return {"id": request_id, "object": "chat.completion.chunk", "model": MODEL,
                "choices": [{"index": 0, "delta": {"content": token}, "finish_reason": None}]}
    return {"id": request_id, "object": "text_completion", "model": MODEL,
            "choices": [{"index": 0, "text": token, "finish_reason": None}]}


ENGINE_THREAD = b"gs-engine"


def _name_thread(name: bytes) -> None:
    """Set this OS thread's name (its comm): prctl(PR_SET_NAME)."""
    import ctypes

    ctypes.CDLL(None).prctl(15, name, 0, 0, 0)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.0"   # the body ends when the connection closes: no chunked framing to buffer
    disable_nagle_algorithm = True  # each small SSE write leaves at once (Nagle would add ~40 ms gaps)
    app: App

    def log_message(self, *_args: Any) -> None:
        """Quiet: one line per request would drown the run's log."""

    def _json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if self.path == "/healthz":
            self._json(200, {"ok": True, "model": MODEL})
        elif self.path == "/control/state":
            self._json(200, self.app.state())
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length) or b"{}")
        if self.path == "/control/fragment":
            self._fragment(body)
        elif self.path == "/control/kernel":
            gen = self.app.generator
            storm = gen.between_tokens
            gen.between_tokens = KernelStorm(float(body.get("every_s", 1.0)), int(body.get("mib", 256))) \
                if body.get("on") else None
            self._json(200, {"storms": storm.storms if storm else []})
        elif self.path == "/control/gpu":
            self._gpu_hold(body)
        elif self.path == "/control/sdpa":
            self._json(200, {"cudnn": set_cudnn_sdp(self.app.device, body.get("cudnn"))})
        elif self.path in ("/v1/completions", "/v1/chat/completions"):
            self._complete("chat" if "chat" in self.path else "completions", body)
        else:
            self._json(404, {"error": {"message": f"no route {self.path}"}})

    def _gpu_hold(self, body: dict[str, Any]) -> None:
        """{"on": true, "mode": "matmul"|"spin", "hold_ms": 300, "every_s": 1} starts the side-stream contention;
        {"on": false} stops it and answers its holds."""
        app = self.app
        if app.device != "cuda":
            self._json(409, {"error": {"message": "GPU contention needs the GPU"}})
            return
        hold = app.gpu_hold
        if hold is not None:
            hold.stop_event.set()
            hold.join(30)
            app.gpu_hold = None
        if body.get("on"):
            app.gpu_hold = GpuHold(str(body.get("mode", "matmul")), float(body.get("hold_ms", 300.0)),
                                   float(body.get("every_s", 1.0)))
            app.gpu_hold.start()
            self._json(200, {"started": True})
            return
        self._json(200, {"holds": hold.holds if hold else [], "setup": hold.setup if hold else {},
                         "error": hold.error if hold else None})

    def _fragment(self, body: dict[str, Any]) -> None:
        app = self.app
        if app.device != "cuda":
            self._json(409, {"error": {"message": "fragmenting needs the CUDA caching allocator"}})
            return
        if body.get("stop"):
            if app.fragmenter:
                app.fragmenter.stop_event.set()
                app.fragmenter.join(60)
            self._json(200, app.state())
            return
        if app.fragmenter is None:
            app.fragmenter = Fragmenter(app.generator, FragConfig(**body.get("config", {})))
            app.fragmenter.start()
        self._json(200, {"started": True})

    def _complete(self, api: str, body: dict[str, Any]) -> None:
        _name_thread(ENGINE_THREAD)  # the attribution probe picks the serving threads by this name (comm=)
        prompt = body.get("prompt") if api == "completions" else " ".join(
            str(m.get("content", "")) for m in body.get("messages", []))
        max_tokens = max(1, min(int(body.get("max_tokens") or 16), 2048))
        request_id = f"cmpl-{uuid.uuid4().hex[:16]}"
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        for token in self.app.generator.stream(str(prompt or ""), max_tokens):
            self.wfile.write(b"data: " + json.dumps(_chunk(api, token, request_id)).encode() + b"\n\n")
        self.wfile.write(b"data: [DONE]\n\n")


def set_cudnn_sdp(device: str, on: Any) -> bool | None:
    """Turn PyTorch's cuDNN attention backend on or off (None: leave it); whether it is on now (None on the CPU)."""
    if device != "cuda":
        return None
    import torch

    if on is not None:
        torch.backends.cuda.enable_cudnn_sdp(bool(on))
    return bool(torch.backends.cuda.cudnn_sdp_enabled())


def build_model(device: str, layers: int, hidden: int) -> Any:
    """A Llama with random weights from a config: no download, no tokenizer files."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=hidden, intermediate_size=hidden * 11 // 4,
                         num_hidden_layers=layers, num_attention_heads=hidden // 64,
                         num_key_value_heads=hidden // 64, max_position_embeddings=4096,
                         bos_token_id=1, eos_token_id=2, pad_token_id=0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    with torch.device(device):  # initialised where it runs: no host copy of the weights
        return LlamaForCausalLM(config).to(dtype=dtype).eval()


def serve(args: argparse.Namespace) -> None:
    started = time.monotonic()
    if args.sdpa == "no-cudnn":
        set_cudnn_sdp(args.device, False)
    model = build_model(args.device, args.layers, args.hidden)
    generator = Generator(model, args.device)
    warm = "".join(generator.stream("warm-up", 8))  # first-call kernels and cuBLAS handles, outside any timing
    reporter = None
    if args.device == "cuda" and args.gpuslo:  # --gpuslo '': no allocator reporter (the overhead runs)
        from gpuslo.probes import torch_allocator

        # Interval 1 s and a snapshot each tick, so every fragmented state between requests is seen.
        reporter = torch_allocator.start(server=args.gpuslo, interval=1.0, snapshot_min_interval=1.0)
    Handler.app = App(generator, reporter, args.device)
    httpd = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    params = sum(p.numel() for p in model.parameters())
    print(f"SERVING pid {os.getpid()} port {args.port} model {MODEL} params {params} device {args.device} "
          f"warm-up {len(warm)} tokens, ready in {time.monotonic() - started:.1f}s", flush=True)
    signal.signal(signal.SIGTERM, lambda *_: threading.Thread(target=httpd.shutdown).start())
    httpd.serve_forever(poll_interval=0.2)
    if reporter is not None:
        reporter.stop()


# ---------------------------------------------------------------------------------------------- squeezing


def squeeze(args: argparse.Namespace) -> None:
    import torch

    from gpuslo.probes.torch_allocator import device_states

    torch.zeros(1, device="cuda")
    free, total = torch.cuda.mem_get_info()
    tensors = fill_blocks(torch, free - args.leave_gib * GIB, SQUEEZE_SIZES_MIB)
    freed = [t.numel() for t in tensors[0::2]]
    kept = tensors[1::2]
    del tensors
    before = device_states(torch.cuda.memory_snapshot(), {0: torch.cuda.memory_stats()})[0]
    device_free = torch.cuda.mem_get_info()[0]
    # Larger than the device has free, yet within what the flush gives back: a retry that succeeds.
    big_bytes = max(device_free + GIB, sum(freed) - GIB) // (2 * MIB) * (2 * MIB)
    t0 = time.monotonic()
    big = torch.empty(big_bytes, dtype=torch.uint8, device="cuda")
    retry_ms = (time.monotonic() - t0) * 1e3
    stats = torch.cuda.memory_stats()
    held = sum(t.numel() for t in kept) + big.numel()
    print("RESULT " + json.dumps({
        "pid": os.getpid(), "device_total": total, "device_free_before": free, "blocks": len(freed) + len(kept),
        "freed_bytes": sum(freed), "fr_before_retry": round(before.fragmentation_ratio, 6),
        "largest_free_before_retry": before.largest_free_bytes, "big_request_bytes": big_bytes,
        "retry_ms": round(retry_ms, 3), "num_alloc_retries": stats.get("num_alloc_retries", 0),
        "held_bytes": held, "device_free_after": torch.cuda.mem_get_info()[0]}), flush=True)
    print("READY", flush=True)
    # SIGUSR1: give back the large block (the orchestrator's escalation when the server's flushes are short).
    release = threading.Event()
    signal.signal(signal.SIGUSR1, lambda *_: release.set())
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    deadline = time.monotonic() + args.hold_s
    while time.monotonic() < deadline:
        if release.wait(0.2) and big is not None:
            released = big.numel()
            del big
            big = None
            torch.cuda.empty_cache()
            print("RELEASED " + json.dumps({"released_bytes": released, "held_bytes": held - released,
                                            "device_free": torch.cuda.mem_get_info()[0]}), flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="workload", required=True)
    s = sub.add_parser("serve")
    s.add_argument("--port", type=int, default=8000)
    s.add_argument("--gpuslo", default="http://127.0.0.1:8765")
    s.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    s.add_argument("--layers", type=int, default=8)
    s.add_argument("--hidden", type=int, default=1024)
    s.add_argument("--sdpa", choices=("default", "no-cudnn"), default="default",
                   help="no-cudnn: PyTorch's cuDNN attention backend off from the start (see /control/sdpa)")
    q = sub.add_parser("squeeze")
    q.add_argument("--leave-gib", type=float, default=40.0)
    q.add_argument("--hold-s", type=float, default=600.0)
    args = parser.parse_args()
    serve(args) if args.workload == "serve" else squeeze(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
