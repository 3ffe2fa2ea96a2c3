#!/usr/bin/env bash
# Issue 7 (and issue 20: the NCCL eBPF probe beside the watchdog; not yet run on two GPUs) on a 2-GPU host (nvidia-h200-x2): a two-rank NCCL job whose rank 1 skips one all-reduce; rank 0's
# ProcessGroupNCCL watchdog times out (20 s) and aborts the communicator. gpuslo serve runs beside it with the
# eBPF probe (libnccl ncclCommAbort / ncclCommGetAsyncError) and NVML through `gpuslo agent`, and the log probe
# on both ranks' output. Asserts a violation naming the op, seq, the rank that timed out and the rank that
# never joined; saves the recorded events as examples/incidents/h200x2-nccl-hang.jsonl.
# Needs: torch with CUDA in $PYTHON, BCC for the eBPF probe (scripts/setup-bcc-venv.sh), root for uprobes.
# Run on 2026-11-29 (the GPU machine's Python: PYTHON=python3, GPUSLO a `python3 -c` shim; see the closing note);
# the CPU version is tests/engine/test_nccl_hang_example.py.
set -euo pipefail
cd "$(dirname "$0")/.."

PYTHON=${PYTHON:-.venv/bin/python}
GPUSLO=${GPUSLO:-.venv/bin/gpuslo}
OUT=${OUT:-var/h200x2-nccl-hang}
PORT=${PORT:-18080}
JOB=nccl-hang-h200x2
SERVER=http://127.0.0.1:$PORT
rm -rf "$OUT" && mkdir -p "$OUT"
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; }
trap cleanup EXIT

[ "$(nvidia-smi -L | wc -l)" -ge 2 ] || { echo "needs 2 GPUs" >&2; exit 2; }
export NCCL_NVLS_ENABLE=0  # never NVLink multicast (shared hosts); the job creates no multicast objects either
export NCCL_DEBUG=INFO TORCH_NCCL_ASYNC_ERROR_HANDLING=1 TORCH_CPP_LOG_LEVEL=INFO

GPUSLO_DATABASE_URL="sqlite:///$PWD/$OUT/gpuslo.db" GPUSLO_AUTH_REQUIRED=false \
    "$GPUSLO" serve --port "$PORT" --rules rules > "$OUT/serve.log" 2>&1 &
pids+=($!)
for _ in $(seq 60); do curl -sf "$SERVER/api/v1/rulebooks" > /dev/null && break; sleep 1; done

"$GPUSLO" agent --server "$SERVER" --spool "$OUT/spool.db" --probe ebpf --probe nvml --probe nccl > "$OUT/agent.log" 2>&1 &
pids+=($!)
: > "$OUT/rank0.log"; : > "$OUT/rank1.log"
"$GPUSLO" probe logs --host "$(hostname)" --job "$JOB" --label world_size=2 --interval 0.5 \
    "$OUT/rank0.log" "$OUT/rank1.log" > "$OUT/log-events.jsonl" 2> "$OUT/log-probe.err" &
logprobe=$!
pids+=($logprobe)
sleep 5  # let the eBPF probe attach to libnccl before the job loads it

stamp() { "$PYTHON" -u -c 'import sys, datetime as d
for line in sys.stdin: sys.stdout.write(d.datetime.now(d.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ ") + line); sys.stdout.flush()'; }
export MASTER_ADDR=127.0.0.1 MASTER_PORT=29511 WORLD_SIZE=2
ranks=()
for rank in 0 1; do
    (RANK=$rank "$PYTHON" -u scripts/nccl_hang_job.py --backend nccl --timeout-s 20 --skip-step 5 --idle-s 45 2>&1 \
        | stamp >> "$OUT/rank$rank.log") &
    ranks+=($!)
done
for pid in "${ranks[@]}"; do wait "$pid" || true; done  # rank 0 is expected to die (SIGABRT)
sleep 3
kill "$logprobe"
"$GPUSLO" replay "$OUT/log-events.jsonl" --server "$SERVER"
sleep 5  # the agent ships every 2 s

"$PYTHON" - "$SERVER" "$JOB" "$OUT" <<'EOF'
import json, sys, time, urllib.request
server, job, out = sys.argv[1:]
def get(path):
    with urllib.request.urlopen(server + path, timeout=10) as response:
        return json.load(response)
for _ in range(30):
    violations = get("/api/v1/violations").get("items", [])
    hits = [v for v in violations if v.get("rule_id", v.get("rule")) in ("nccl-watchdog-timeout", "collective-hang")
            and "never joined: rank 1" in v.get("summary", "")]
    if hits:
        break
    time.sleep(2)
else:
    sys.exit(f"no collective-hang/nccl-watchdog-timeout violation naming rank 1; got {json.dumps(violations)[:2000]}")
summary = hits[0]["summary"]
for needle in ("ALLREDUCE", "seq 7", "rank 0", "never joined: rank 1"):
    assert needle in summary, (needle, summary)
print("OK:", summary)
events, page = [], 1
while True:  # at most 500 a page
    listing = get(f"/api/v1/events?page_size=500&page={page}")
    events += listing.get("items", [])
    if not listing.get("has_next"):
        break
    page += 1
events = [{k: v for k, v in e.items() if k not in ("received_at", "processed_at")} for e in events]
with open(f"{out}/events.jsonl", "w") as handle:
    for event in sorted(events, key=lambda e: (e["time"], e["id"])):
        handle.write(json.dumps(event, sort_keys=True) + "\n")
sources = {e.get("source") for e in events}
print("event sources on the timeline:", sorted(s for s in sources if s))
# Issue 20: eBPF's view of the same hang: each rank's collective count from the NCCL probe, and the hang named
# from eBPF beside the watchdog (collective-hang-ebpf) and from eBPF alone (nccl-rank-behind).
progress = [e for e in events if e["kind"] == "nccl_progress"]
print("nccl_progress:", [(e.get("rank"), e["attrs"]["state"], e["attrs"]["seq"], e["attrs"]["lag"]) for e in progress])
assert {e.get("rank") for e in progress} == {0, 1}, "the NCCL probe saw both ranks"
ebpf = [v for v in violations if v.get("rule_id") in ("collective-hang-ebpf", "nccl-rank-behind")]
print("eBPF violations:", [(v["rule_id"], v["summary"]) for v in ebpf])
assert any(v["rule_id"] == "nccl-rank-behind" and v["summary"].startswith("Rank 1 ") for v in ebpf), ebpf
EOF
cp "$OUT/events.jsonl" examples/incidents/h200x2-nccl-hang.jsonl
echo "saved examples/incidents/h200x2-nccl-hang.jsonl; add a rule-test case from it (issue 7)"
