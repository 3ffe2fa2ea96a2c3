#!/usr/bin/env bash
# Build, on the CPU machine (Debian 12, with apt and PyPI), the kit that lets bench/fleet.py run on the GPU machine
# (Ubuntu 24.04, Python 3.12, no registry): scripts/gpu-fleet-scaling.sh uses it there.
#
#   scripts/fetch-fleet-kit.sh DEST            # from the project root; e.g. DEST=.fleet in /work/main, then carry it
#
# DEST/debs    PostgreSQL 15 (the server package less its LLVM JIT, translations and manuals), libpq5, nats-server and every shared library they load besides
#              glibc's own, as Debian 12 .deb files (unpacked there with dpkg -x; the run script takes from them only
#              the libraries that machine lacks: libicu72 and libldap-2.5 at least, Ubuntu 24.04 has ICU 74 and
#              OpenLDAP 2.6). No LLVM: the server is run with jit=off, so llvmjit.so is never loaded.
# DEST/wheels  the Python wheels of the fleet worker and the bench (pinned to the project venv's `pip freeze`), pip,
#              setuptools and wheel (the run makes its own venv, isolated from the image's packages), and the
#              durable-rules source distribution (built there with gcc).
# DEST/kit.env what the kit was made for (Python version), read by the run script.
#
# Environment: PYVER (default 3.12: the GPU machine's; 3.11 builds a kit this machine can test),
# FREEZE_VENV (default /work/main/.venv, else .venv: where the pins come from).
set -euo pipefail
dest=${1:?usage: scripts/fetch-fleet-kit.sh DEST}
pyver=${PYVER:-3.12}
venv=${FREEZE_VENV:-/work/main/.venv}
[ -x "$venv/bin/pip" ] || venv=.venv
mkdir -p "$dest/debs" "$dest/wheels"
dest=$(cd "$dest" && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT

# --- Debian packages: the server, libpq, nats-server, then the closure of libraries they link (by ldd) ---
download() {  # apt-get download into DEST/debs; its output only when it fails
    (cd "$dest/debs" && apt-get download "$@" > "$scratch/apt.log" 2>&1) \
        || { cat "$scratch/apt.log" >&2; echo "fetch-fleet-kit: apt-get download $* failed" >&2; exit 4; }
}
download postgresql-15 libpq5 nats-server
# The server package without what the run never loads and that makes most of its size: the LLVM JIT and its bitcode
# (jit=off), the message translations and the manuals. Repacked as a Debian package, its version marked +nojit.
server=$(find "$dest/debs" -name 'postgresql-15_*_amd64.deb' ! -name '*+nojit*')
if [ -n "$server" ]; then
    dpkg-deb -R "$server" "$scratch/server"
    rm -rf "$scratch/server/usr/lib/postgresql/15/lib/bitcode" "$scratch/server/usr/lib/postgresql/15/lib/llvmjit"* \
        "$scratch/server/usr/share/locale" "$scratch/server/usr/share/doc" "$scratch/server/usr/share/man" \
        "$scratch/server/usr/share/postgresql/15/man" "$scratch/server/DEBIAN/md5sums"
    sed -i 's/^Version: \(.*\)$/Version: \1+nojit/' "$scratch/server/DEBIAN/control"
    rm -f "$dest"/debs/postgresql-15_*+nojit_amd64.deb
    dpkg-deb --root-owner-group -Zxz -b "$scratch/server" \
        "$dest/debs/$(basename "$server" _amd64.deb)+nojit_amd64.deb" >/dev/null
    rm -f "$server"
fi
for deb in "$dest"/debs/postgresql-15_*.deb "$dest"/debs/libpq5_*.deb; do dpkg -x "$deb" "$scratch/root"; done
pg="$scratch/root/usr/lib/postgresql/15"
# What the run starts and loads: the server, initdb, pg_ctl, and the modules initdb and the server load
# (plpgsql, the snowball dictionaries); the other tools and contrib modules are never run.
elfs=("$pg/bin/postgres" "$pg/bin/initdb" "$pg/bin/pg_ctl" "$pg/lib/plpgsql.so" "$pg/lib/dict_snowball.so")
sonames=$(for elf in "${elfs[@]}"; do
    LD_LIBRARY_PATH="$scratch/root/usr/lib/x86_64-linux-gnu" ldd "$elf"; done | awk '$2 == "=>" {print $1}' | sort -u)
packages=()
for so in $sonames; do
    case "$so" in libc.so.*|libm.so.*|libresolv.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) continue ;; esac
    [ "$so" = libpq.so.5 ] && continue  # carried above
    owner=$(dpkg -S "*/$so" 2>/dev/null | awk -F': ' -v so="/$so" 'substr($2, length($2) - length(so) + 1) == so {print $1}' \
        | head -1)
    [ -n "$owner" ] || { echo "fetch-fleet-kit: no installed package owns $so (needed by PostgreSQL)" >&2; exit 2; }
    packages+=("${owner%%:*}")
done
mapfile -t packages < <(printf '%s\n' "${packages[@]}" | sort -u)
echo "libraries PostgreSQL links, by package: ${packages[*]}"
download "${packages[@]}"

# --- Python: wheels for the fleet worker (gpuslo worker) and bench/fleet.py with its test helpers ---
# Runtime imports of `gpuslo worker` and bench/fleet.py (+ tests/postgres_support.py, which imports pytest), and
# their dependencies; checked by the local end-to-end run in an isolated venv (docs/notes/h19d.md).
names=(SQLAlchemy greenlet typing_extensions alembic Mako MarkupSafe Flask Werkzeug itsdangerous blinker click Jinja2
       APScheduler tzlocal jsonschema jsonschema-specifications referencing rpds-py attrs orjson ahocorasick-rs
       prometheus_client waitress psycopg psycopg-binary nats-py google-re2 PyYAML httpx httpcore h11 anyio idna
       certifi nvidia-ml-py pytest iniconfig pluggy packaging Pygments)
freeze=$("$venv/bin/pip" freeze --all 2>/dev/null)
pins=()
for name in "${names[@]}"; do
    pin=$(printf '%s\n' "$freeze" | grep -i -E "^${name//[-_]/[-_]}==" | head -1)
    [ -n "$pin" ] || { echo "fetch-fleet-kit: $name is not installed in $venv (no version to pin)" >&2; exit 3; }
    pins+=("$pin")
done
# The venv's own tooling: build gpuslo (setuptools>=68, pyproject.toml) and durable-rules there.
pins+=(pip==24.3.1 setuptools==75.8.0 wheel==0.45.1)
"$venv/bin/pip" download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    -d "$dest/wheels" "${pins[@]}"
durable=$(printf '%s\n' "$freeze" | grep -i -E '^durable[-_]rules==' | head -1)
"$venv/bin/pip" download -q --no-deps --no-binary=:all: -d "$dest/wheels" "${durable:-durable-rules==2.0.28}"

printf 'KIT_PYVER=%s\nKIT_MADE=%s\n' "$pyver" "$(date -u +%FT%TZ)" > "$dest/kit.env"
echo "kit in $dest: $(find "$dest/debs" -name '*.deb' | wc -l) packages," \
    "$(find "$dest/wheels" -type f | wc -l) wheels and sdists, for Python $pyver"
du -sh "$dest" "$dest/debs" "$dest/wheels"
