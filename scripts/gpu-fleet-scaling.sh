#!/usr/bin/env bash
# Fleet scaling on the 16-core GPU machine (no registry there): PostgreSQL 15 and nats-server from the carried
# Debian packages, the Python packages from the carried wheels, then bench/fleet.py with 1, 2, 4 and 8 workers.
#
#   bash scripts/gpu-fleet-scaling.sh OUT_DIR      # as root, from the project root, with the kit carried as .fleet
#
# The kit is made on the CPU machine by scripts/fetch-fleet-kit.sh (docs/fleet.md, "Scaling run on the GPU
# machine"). Steps, each failing with its own exit status and a line saying what failed:
#   20 kit or Python   21 unpacking   22 a library PostgreSQL needs is neither there nor in the kit
#   23 PostgreSQL user  24 initdb / database `test`   25 server start   26 nats-server   27 Python packages
#   28 the bench failed or ran out of time   29 collecting results
# Environment (defaults in brackets): FLEET_KIT [.fleet], FLEET_ROOT [/tmp/gpuslo-fleet, wiped first],
# PGPORT [5432], FLEET_PG_USER [gpuslo-pg: PostgreSQL refuses to run as root], FLEET_PG_SHARED_BUFFERS [4GB],
# FLEET_EVENTS [150000], FLEET_WORKERS ["1 2 4 8"], FLEET_PARTITIONS [64],
# FLEET_DEADLINE_S [530: seconds after the start by which everything, results included, is done];
# FLEET_BENCH=engine runs bench/engine.py instead, pinned with PostgreSQL to ENGINE_CPUS [2,3], once for each
# project tree of ENGINE_TREES [.] (issue 17's 2-core figures on a quiet machine).
# OUT_DIR receives at most 7 files: fleet-scaling.log, machine.txt (uptime, nproc, packages), fleet-results.md (the
# bench's section of bench/RESULTS.md), sampled-scaling.md and stored-events.csv (the sampler's),
# postgresql.log, bench-logs.tar.gz (worker and NATS logs).
set -uo pipefail
out=${1:-${OUT:-}}
[ -n "$out" ] || { echo "usage: bash scripts/gpu-fleet-scaling.sh OUT_DIR" >&2; exit 2; }
mkdir -p "$out" && out=$(cd "$out" && pwd)
project=$(pwd)
kit=${FLEET_KIT:-.fleet}
root=${FLEET_ROOT:-/tmp/gpuslo-fleet}
pgport=${PGPORT:-5432}
pguser=${FLEET_PG_USER:-gpuslo-pg}
shared_buffers=${FLEET_PG_SHARED_BUFFERS:-4GB}
events=${FLEET_EVENTS:-150000}
read -r -a workers <<< "${FLEET_WORKERS:-1 2 4 8}"
partitions=${FLEET_PARTITIONS:-64}
deadline=${FLEET_DEADLINE_S:-530}

exec > >(tee "$out/fleet-scaling.log") 2>&1
teepid=$!
t0=$(date +%s)
elapsed() { echo $(( $(date +%s) - t0 )); }
step() { echo "=== [$(elapsed)s] $*"; }
fail() { local rc=$1; shift; echo "=== [$(elapsed)s] FAILED (exit $rc): $*"; exit "$rc"; }

pgbin=$root/pg/usr/lib/postgresql/15/bin
data=$root/data
pglibs=$root/lib  # only the carried libraries this machine lacks (symlinks), for PostgreSQL's processes alone
venv=$root/venv
started_pg=0

as_pg() {  # run a command as the PostgreSQL user, with the carried libraries, from a folder it can read
    if [ "$(id -u)" -ne 0 ]; then
        (cd "$root" && env LD_LIBRARY_PATH="$pglibs" "$@")
    elif command -v setpriv >/dev/null; then
        (cd "$root" && setpriv --reuid="$pguser" --regid="$(id -g "$pguser")" --clear-groups \
            env LD_LIBRARY_PATH="$pglibs" "$@")
    else
        (cd "$root" && runuser -u "$pguser" -- env LD_LIBRARY_PATH="$pglibs" "$@")
    fi
}

machine() { {
    echo "--- $1: $(date -u +%FT%TZ)"
    echo "uptime: $(uptime)"
    echo "nproc: $(nproc)"
}; }

collect() {
    local rc=$?
    trap - EXIT
    [ -z "${sampler:-}" ] || kill -TERM "$sampler" 2>/dev/null
    { machine "after"; } >> "$out/machine.txt" 2>&1
    if [ "$started_pg" = 1 ]; then
        as_pg "$pgbin/pg_ctl" -D "$data" -m fast -w stop >/dev/null 2>&1 || echo "pg_ctl stop failed"
    fi
    [ -f "$root/postgresql.log" ] && tail -c 2000000 "$root/postgresql.log" > "$out/postgresql.log"
    [ -f "$root/postgresql.log" ] && echo "PostgreSQL log: $(grep -c 'still waiting for' "$root/postgresql.log") lock" \
        "waits over deadlock_timeout (200ms), $(grep -c 'deadlock detected' "$root/postgresql.log") deadlocks"
    if [ -d "$root/tmp" ] && compgen -G "$root/tmp/gpuslo-bench-fleet-*" >/dev/null; then
        # worker and NATS logs of the bench (its JetStream stores left out), each cut to its last 2 MB
        (cd "$root/tmp" && find gpuslo-bench-fleet-* -name '*.log' -size +2M -exec truncate -s 2M {} + ;
         find gpuslo-bench-fleet-* -name '*.log' -print0 | tar czf "$out/bench-logs.tar.gz" --null -T -)
    fi
    # shellcheck disable=SC2012
    echo "=== [$(elapsed)s] exit $rc; files in $out: $(ls "$out" | tr '\n' ' ')"
    exec 1>&- 2>&-
    wait "$teepid" 2>/dev/null  # the log is whole when the script ends
    exit "$rc"
}
write_sampler() { cat > "$1" <<'EOF'
"""Beside bench/fleet.py: every 0.2 s, the stored events and offsets of each of its scratch databases and which worker
holds which partition (PostgreSQL's advisory locks); then, per worker count, the time from the first partition lock to
the last stored offset (no head start for the first worker to start), how long the partitions took to balance, and
the bound that their balance puts on the scaling efficiency (by routing the bench's workload as publishers do)."""
import csv
import re
import signal
import sys
import time

import psycopg

LOCKS = ("SELECT d.datname, a.application_name, l.objid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
         "JOIN pg_database d ON d.oid = l.database WHERE l.locktype = 'advisory' AND l.granted "
         "AND l.classid = 26448 AND l.objsubid = 2")  # gpuslo.engine.fleet.ownership.PARTITION_CLASS, two-int form


def sample(port: str, path: str) -> None:
    base = f"postgresql://postgres@127.0.0.1:{port}/"
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    admin = psycopg.connect(base + "postgres", autocommit=True, application_name="fleet-sampler")
    connections: dict = {}
    owned_before: dict = {}
    started = time.monotonic()
    with open(path, "w", newline="") as handle:
        out = csv.writer(handle)
        out.writerow(["seconds", "database", "what", "value"])
        while not stop:
            now = f"{time.monotonic() - started:.3f}"
            names = [row[0] for row in admin.execute(
                "SELECT datname FROM pg_database WHERE datname LIKE 'gpuslo%bench%'")]
            owned: dict = {}
            for database, worker, number in admin.execute(LOCKS):
                owned.setdefault((database, worker), []).append(int(number))
            for key in set(owned) | set(owned_before):
                numbers = " ".join(map(str, sorted(owned.get(key, []))))
                if numbers != owned_before.get(key):
                    out.writerow([now, key[0], f"owns {key[1]}", numbers])
            owned_before = {key: " ".join(map(str, sorted(value))) for key, value in owned.items()}
            for name in names:
                try:
                    if name not in connections:
                        connections[name] = psycopg.connect(base + name, autocommit=True,
                                                            application_name="fleet-sampler")
                    count, offsets = connections[name].execute(
                        "SELECT (SELECT count(*) FROM events), (SELECT coalesce(sum(seq), 0) FROM fleet_partitions)"
                    ).fetchone()
                except psycopg.Error:  # not migrated yet, or dropped: try again next time
                    connection = connections.pop(name, None)
                    if connection is not None:
                        connection.close()
                    continue
                out.writerow([now, name, "events", count])
                out.writerow([now, name, "offsets", offsets])
            for gone in set(connections) - set(names):
                connections.pop(gone).close()
            handle.flush()
            time.sleep(0.2)


def partition_loads(events: int, partitions: int) -> dict:
    """Messages per partition number for the bench's workload, routed as publishers do; {} when that fails."""
    try:
        sys.path[:0] = ["bench", "tests", "tests/fleet"]
        import engine_workload
        from fleet_support import RULES

        from gpuslo.engine.fleet.routing import RoutingTable
        from gpuslo.engine.rulebook import load_directory

        table = RoutingTable.of(load_directory(RULES)[0], partitions)
        loads: dict = {}
        for item in engine_workload.mixed(events):
            for partition in table.route(engine_workload.to_event(item)):
                loads[partition.number] = loads.get(partition.number, 0) + 1
        return loads
    except Exception as exc:  # the bench's internals moved: report without the balance column
        print(f"(no partition balance: {type(exc).__name__}: {exc})")
        return {}


def report(path: str, events: str, partitions: str) -> None:
    series: dict = {}
    owners: dict = {}
    with open(path, newline="") as handle:
        for row in csv.DictReader(handle):
            at, name, what = float(row["seconds"]), row["database"], row["what"]
            if what.startswith("owns "):
                owners.setdefault(name, []).append((at, what[5:], row["value"].split()))
            else:
                series.setdefault((name, what), []).append((at, int(row["value"])))
    loads = partition_loads(int(events), int(partitions))
    runs = []
    for (name, what), points in series.items():
        match = re.search(r"bench_fleet(\d+)", name)
        final = max(value for _, value in points)
        if what != "offsets" or not match or final == 0 or name not in owners:
            continue
        workers = int(match.group(1))
        done = next(at for at, value in points if value == final)  # every partition at its last offset
        held: dict = {}
        first_lock = all_hold = balanced = None
        for at, worker, numbers in owners[name]:
            if at > done:
                break
            held[worker] = numbers
            sizes = [len(value) for value in held.values() if value]
            first_lock = at if first_lock is None and sizes else first_lock
            all_hold = at if all_hold is None and len(sizes) >= workers else all_hold
        final = {worker: sorted(numbers) for worker, numbers in held.items() if numbers}
        progress: dict = {}  # balanced: from when every worker holds what it held at the end (its assignment)
        for at, worker, numbers in owners[name]:
            if at > done:
                break
            progress[worker] = numbers
            if {w: sorted(n) for w, n in progress.items() if n} == final:
                balanced = at
                break
        bound = ""
        if loads and held:
            per_worker = [sum(loads.get(int(n), 0) for n in numbers) for numbers in held.values() if numbers]
            bound = f"{sum(loads.values()) / workers / max(per_worker):.2f}" if per_worker else ""
        start = first_lock if first_lock is not None else done
        stored = series.get((name, "events"), [])
        after = ""  # the balanced fleet's rate: events stored after the partitions balanced, over the time left
        if balanced is not None and done > balanced and stored:
            before = max((value for at, value in stored if at <= balanced), default=0)
            last = max((value for at, value in stored if at <= done + 0.5), default=0)
            after = f"{(last - before) / (done - balanced):,.0f}"
        runs.append((workers, done - start, done - (all_hold if all_hold is not None else done),
                     f"{balanced - start:.1f}" if balanced is not None else "never", bound, after))
    runs.sort()
    print(f"Sampled beside the bench ({events} events, {partitions} partitions per key space): time from the first "
          "partition lock, and from every worker holding one, to the last stored offset (0.2 s resolution).\n")
    print("| workers | first lock → done (s) | events/s | per worker | efficiency | all hold → done (s) | "
          "efficiency | balanced after (s) | events/s once balanced | balance bound |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    base = {}
    for workers, span, span_all, balanced, bound, after in runs:
        rate, rate_all = (int(events) / span if span > 0 else 0.0), (int(events) / span_all if span_all > 0 else 0.0)
        base = base or {"first": rate, "all": rate_all}
        efficiency = rate / workers / base["first"] if base["first"] else 0.0
        efficiency_all = rate_all / workers / base["all"] if base["all"] else 0.0
        print(f"| {workers} | {span:.1f} | {rate:,.0f} | {rate / workers:,.0f} | {efficiency:.2f} | "
              f"{span_all:.1f} | {efficiency_all:.2f} | {balanced} | {after} | {bound} |")
    if runs:
        best = min((run for run in runs if run[1] > 0), key=lambda run: run[1], default=None)
        if best:
            print(f"\nAt one event per GPU per second: about {int(events) / best[1]:,.0f} GPUs with {best[0]} "
                  "workers (first lock → done).")
        print("Done: every partition's stored offset at its final value. Balanced after: until every worker holds "
              "the partitions it held at the end (its part of the load-aware assignment); events/s once balanced: the events stored after that, over the "
              "time left. Balance bound: the mean over the busiest worker's messages, with the partitions each "
              "worker held at the end (an efficiency near it: the workers scale, the partitions do not spread the "
              "load evenly).")


if __name__ == "__main__":
    sample(*sys.argv[2:4]) if sys.argv[1] == "sample" else report(*sys.argv[2:5])
EOF
}

trap collect EXIT

step "kit $kit, root $root, PostgreSQL port $pgport, $events events, workers ${workers[*]}, $partitions partitions"
[ -f "$kit/kit.env" ] || fail 20 "no $kit/kit.env: carry the kit made by scripts/fetch-fleet-kit.sh (carry=[\"$kit\"])"
kit=$(cd "$kit" && pwd)
# shellcheck disable=SC1091
source "$kit/kit.env"
pyver=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])') || fail 20 "no python3"
[ "$pyver" = "$KIT_PYVER" ] || fail 20 "python3 is $pyver, the kit's wheels are for $KIT_PYVER (PYVER=$pyver scripts/fetch-fleet-kit.sh)"
{
    machine "before"
    echo "kernel: $(uname -srm)"
    echo "os: $(grep -m1 '^PRETTY_NAME=' /etc/os-release 2>/dev/null | cut -d= -f2- | tr -d '"')"
    echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
    free -g | head -2
    df -h /tmp | tail -1
    echo "python3: $(command -v python3) $(python3 -V 2>&1)"
} > "$out/machine.txt" 2>&1
cat "$out/machine.txt"

step "unpack the Debian packages into $root/pg"
command -v dpkg >/dev/null || fail 21 "no dpkg on this machine"
rm -rf "$root" || fail 21 "cannot remove $root"
mkdir -p "$root/pg" "$pglibs" "$root/run" "$root/tmp" "$root/bin" || fail 21 "cannot make $root"
chmod 755 "$root" "$root/pg" "$pglibs"
for deb in "$kit"/debs/*.deb; do dpkg -x "$deb" "$root/pg" || fail 21 "dpkg -x $deb"; done
[ -x "$pgbin/postgres" ] || fail 21 "no $pgbin/postgres after unpacking"

step "libraries: the carried ones this machine lacks, for PostgreSQL only"
carried=("$root/pg/usr/lib/x86_64-linux-gnu" "$root/pg/lib/x86_64-linux-gnu")
needs=("$pgbin/postgres" "$pgbin/initdb" "$pgbin/pg_ctl" "$pgbin/../lib/plpgsql.so" "$pgbin/../lib/dict_snowball.so")
if command -v ldd >/dev/null; then
    for _round in 1 2 3 4 5 6; do  # a library taken from the kit may itself need one that is missing
        missing=$(for elf in "${needs[@]}"; do LD_LIBRARY_PATH="$pglibs" ldd "$elf"; done \
            | awk '$3 == "not" && $4 == "found" {print $1}' | sort -u)
        [ -z "$missing" ] && break
        for so in $missing; do
            found=$(find "${carried[@]}" -maxdepth 1 -name "$so" 2>/dev/null | head -1)
            [ -n "$found" ] || fail 22 "$so is needed by PostgreSQL and is neither on this machine nor in the kit"
            ln -sf "$found" "$pglibs/$so"
            echo "from the kit: $so"
        done
    done
    [ -z "$missing" ] || fail 22 "still missing after 6 rounds: $missing"
    for elf in "${needs[@]}"; do LD_LIBRARY_PATH="$pglibs" ldd "$elf"; done | awk '$2 == "=>" {print $3}' | sort -u \
        | grep -F "$root" | sed 's/^/  loads /'
    echo "taken from the kit: $(find "$pglibs" -name '*.so*' | wc -l) libraries (the others are this machine's)"
else
    pglibs=$(IFS=:; echo "${carried[*]}")
    echo "no ldd here: every carried library goes on PostgreSQL's LD_LIBRARY_PATH"
fi

step "PostgreSQL user $pguser (PostgreSQL refuses to run as root)"
if [ "$(id -u)" -eq 0 ]; then
    if ! id -u "$pguser" >/dev/null 2>&1; then
        useradd --system --no-create-home --home-dir "$root" --shell /usr/sbin/nologin "$pguser" \
            || fail 23 "useradd $pguser"
    fi
    chown "$pguser" "$root/run" || fail 23 "chown $root/run"
fi

step "initdb (trust on 127.0.0.1, superuser postgres) and the database test"
mkdir -p "$data" && chmod 700 "$data"
[ "$(id -u)" -ne 0 ] || chown "$pguser" "$data"
as_pg "$pgbin/initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 --no-locale --no-sync --no-instructions \
    > "$root/initdb.log" 2>&1 || { cat "$root/initdb.log"; fail 24 "initdb"; }
shm_kb=$(df -k --output=size /dev/shm 2>/dev/null | tail -1 | tr -d ' ')
dsm=posix; [ "${shm_kb:-0}" -ge 1048576 ] || dsm=mmap  # a container's small /dev/shm would fail parallel queries
cat >> "$data/postgresql.conf" <<EOF
# scripts/gpu-fleet-scaling.sh: 16 cores, 128 GiB; 8 workers hold 2 connections each, the bench a few more.
listen_addresses = '127.0.0.1'
port = $pgport
unix_socket_directories = '$root/run'
max_connections = 200
shared_buffers = $shared_buffers
effective_cache_size = 32GB
work_mem = 16MB
maintenance_work_mem = 512MB
wal_buffers = 64MB
max_wal_size = 16GB
min_wal_size = 2GB
checkpoint_timeout = 30min
checkpoint_completion_target = 0.9
# Durability as in production: every commit waits for its WAL flush (fsync), as on the CPU machine's PostgreSQL.
synchronous_commit = on
fsync = on
full_page_writes = on
jit = off
dynamic_shared_memory_type = $dsm
max_worker_processes = 16
max_parallel_workers = 8
log_checkpoints = on
log_lock_waits = on
deadlock_timeout = 200ms
EOF
echo "CREATE DATABASE test;" | as_pg "$pgbin/postgres" --single -D "$data" postgres > "$root/single.log" 2>&1 \
    || { cat "$root/single.log"; fail 24 "CREATE DATABASE test (single-user mode)"; }

step "start PostgreSQL on 127.0.0.1:$pgport"
touch "$root/postgresql.log" && { [ "$(id -u)" -ne 0 ] || chown "$pguser" "$root/postgresql.log"; }
as_pg "$pgbin/pg_ctl" -D "$data" -l "$root/postgresql.log" -w -t 60 start \
    || { tail -20 "$root/postgresql.log"; fail 25 "pg_ctl start (is port $pgport taken? set PGPORT)"; }
started_pg=1

step "nats-server from the kit on PATH"
ln -sf "$root/pg/usr/sbin/nats-server" "$root/bin/nats-server"
export PATH="$root/bin:$PATH"
[ "$(command -v nats-server)" = "$root/bin/nats-server" ] || fail 26 "nats-server on PATH is $(command -v nats-server)"
nats-server --version || fail 26 "nats-server does not run"

step "Python: a venv of the carried wheels (isolated from the image's packages), durable-rules built, gpuslo"
python3 -m venv --without-pip "$venv" 2>/dev/null || {
    # no venv module: the same layout by hand (a python3 link and pyvenv.cfg make sys.prefix the venv)
    interpreter=$(python3 -c 'import sys; print(getattr(sys, "_base_executable", sys.executable))')
    mkdir -p "$venv/bin" "$venv/lib/python$pyver/site-packages"
    ln -sf "$interpreter" "$venv/bin/python"
    printf 'home = %s\ninclude-system-site-packages = false\nversion = %s\n' "$(dirname "$interpreter")" \
        "$(python3 -c 'import platform; print(platform.python_version())')" > "$venv/pyvenv.cfg"
}
vpy=$venv/bin/python
pipwhl=$(find "$kit/wheels" -name 'pip-*.whl' | head -1)
[ -n "$pipwhl" ] || fail 27 "no pip wheel in the kit"
"$vpy" "$pipwhl/pip" install -q --no-index --no-deps --no-cache-dir --disable-pip-version-check \
    "$kit"/wheels/*.whl || fail 27 "installing the carried wheels"
# Newer gcc turns some of durable-rules' C99-era warnings into errors; keep them warnings (as scripts/gpu-setup.sh).
CC="gcc -Wno-error=implicit-function-declaration -Wno-error=incompatible-pointer-types -Wno-error=int-conversion" \
"$vpy" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --disable-pip-version-check \
    "$kit"/wheels/durable_rules-*.tar.gz || fail 27 "building durable-rules"
"$vpy" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --disable-pip-version-check \
    -e "$project" || fail 27 "installing gpuslo"
[ -x "$venv/bin/gpuslo" ] || fail 27 "no $venv/bin/gpuslo (bench/fleet.py starts workers with it)"
{ echo "--- Python packages in $venv"; "$vpy" -m pip list --disable-pip-version-check --format=freeze; } >> "$out/machine.txt" 2>&1
export GPUSLO_TEST_POSTGRES_URL="postgresql+psycopg://postgres@127.0.0.1:$pgport/test"
"$vpy" - <<'EOF' || fail 27 "imports or the database check"
import os
import durable.lang, flask, nats, psycopg, sqlalchemy  # noqa: F401
import gpuslo.engine.fleet.worker  # noqa: F401
url = os.environ["GPUSLO_TEST_POSTGRES_URL"].replace("postgresql+psycopg", "postgresql")
with psycopg.connect(url) as connection:
    version = connection.execute("SELECT version()").fetchone()[0]
    settings = connection.execute(
        "SELECT string_agg(name || '=' || setting || coalesce(unit, ''), ' ' ORDER BY name) FROM pg_settings "
        "WHERE name IN ('max_connections', 'shared_buffers', 'synchronous_commit', 'fsync', 'jit', "
        "'wal_buffers', 'max_wal_size', 'dynamic_shared_memory_type', 'TimeZone')").fetchone()[0]
print("imports ok; database test answers:", version.split(",")[0])
print("settings:", settings)
EOF

if [ "${FLEET_BENCH:-fleet}" = engine ]; then
    # Issue 17's bench on a quiet stand-in for the 2-core machine: bench/engine.py with itself, its load generator
    # and PostgreSQL (every process of the server, so the backends it forks too) pinned to ENGINE_CPUS, once per
    # tree of ENGINE_TREES (each installed editable in turn into the one venv), figures as JSON in OUT_DIR.
    cpus=${ENGINE_CPUS:-2,3}
    for pid in $(pgrep -f "$pgbin/postgres"); do taskset -a -cp "$cpus" "$pid" > /dev/null || fail 28 "taskset $pid"; done
    for tree in ${ENGINE_TREES:-.}; do
        name=$(basename "$(cd "$tree" && pwd)")
        "$vpy" -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir \
            --disable-pip-version-check -e "$tree" > /dev/null || fail 27 "installing $tree"
        remaining=$(( deadline - $(elapsed) - 15 ))
        step "bench/engine.py in $tree ($(cat "$tree/.commit" 2>/dev/null || git -C "$tree" log -1 --format=%h 2>/dev/null)) on CPUs $cpus, at most ${remaining}s; $(uptime)"
        [ "$remaining" -gt 30 ] || fail 28 "only ${remaining}s left for $tree"
        (cd "$tree" && PYTHONUNBUFFERED=1 timeout -s TERM -k 10 "$remaining" taskset -c "$cpus" "$vpy" bench/engine.py \
            --no-capacity --no-memory --no-write ${ENGINE_ARGS:-} --json "$out/engine-$name.json") || fail 28 "bench/engine.py in $tree"
    done
    step "done"
    exit 0
fi
remaining=$(( deadline - $(elapsed) - 25 ))
step "bench/fleet.py --events $events --workers ${workers[*]} --partitions $partitions (at most ${remaining}s)"
[ "$remaining" -gt 30 ] || fail 28 "only ${remaining}s left for the bench"
# Beside the bench, a sampler records every 0.2 s the stored events and the partition locks of its scratch databases:
# its clock starts at the first lock (the bench's when every worker holds one, after the first has begun), and it
# says how evenly the partitions each worker held spread the messages.
write_sampler "$root/sampler.py"
"$vpy" "$root/sampler.py" sample "$pgport" "$out/stored-events.csv" &
sampler=$!
TMPDIR=$root/tmp PYTHONUNBUFFERED=1 timeout -s TERM -k 15 "$remaining" \
    "$vpy" bench/fleet.py --events "$events" --workers "${workers[@]}" --partitions "$partitions"
rc=$?
kill -TERM "$sampler" 2>/dev/null; wait "$sampler" 2>/dev/null
"$vpy" "$root/sampler.py" report "$out/stored-events.csv" "$events" "$partitions" > "$out/sampled-scaling.md" \
    || echo "the sampler's report failed"
cat "$out/sampled-scaling.md"
# The section(s) the bench wrote (headings that name bench/fleet.py), when it wrote any.
if ! cmp -s bench/RESULTS.md "$root/RESULTS.before.md"; then
    awk '/^## / {keep = ($0 ~ /fleet\.py/)} keep' bench/RESULTS.md > "$out/fleet-results.md"
fi
[ "$rc" -eq 0 ] || fail 28 "bench/fleet.py exited $rc (124: stopped after ${remaining}s; the rows it printed are above)"
[ -s "$out/fleet-results.md" ] || fail 29 "the bench left no section naming fleet.py in bench/RESULTS.md"
step "summary"
grep -E 'worker\(s\)' "$out/fleet-scaling.log" | grep -v '^|' | sed 's/^/  /'
echo "  PostgreSQL 15 (Debian 12 build, synchronous_commit=on, fsync=on, jit=off) and nats-server $(nats-server --version 2>&1 | awk '{print $2}') on this machine"
