#!/usr/bin/env bash
# Install gpuslo on Debian 12: system packages (as root), then .venv with `pip install -e '.[dev]'`.
# Idempotent: installs only what is missing and reuses a working .venv. Prints what it did and skipped.
# Environment: GPUSLO_PYTHON (interpreter for the venv), GPUSLO_VENV (default .venv).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
venv=${GPUSLO_VENV:-$root/.venv}
# Needed to build and test: a venv, a compiler for durable-rules, Chromium for the browser test.
required_pkgs=(python3-venv python3-dev build-essential make git chromium chromium-driver
    prometheus-alertmanager)  # Alertmanager: the interop tests run against the real one
# Needed only by the eBPF probe; a machine without them still runs everything else.
ebpf_pkgs=(python3-bpfcc bpfcc-tools linux-headers-cloud-amd64)

say() { echo "install: $*"; }

missing_of() {
    local pkg
    for pkg in "$@"; do
        dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || echo "$pkg"
    done
}

install_system_packages() {
    if ! command -v apt-get >/dev/null 2>&1; then
        say "no apt-get here (not Debian?); skipped system packages: ${required_pkgs[*]} ${ebpf_pkgs[*]}"
        return
    fi
    local missing_required missing_ebpf
    missing_required=$(missing_of "${required_pkgs[@]}" | xargs)
    missing_ebpf=$(missing_of "${ebpf_pkgs[@]}" | xargs)
    if [ -z "$missing_required$missing_ebpf" ]; then
        say "system packages already installed: ${required_pkgs[*]} ${ebpf_pkgs[*]}"
        return
    fi
    if [ "$(id -u)" -ne 0 ]; then
        say "not root: SKIPPED installing system packages: $missing_required $missing_ebpf"
        say "  run as root: apt-get install -y $missing_required $missing_ebpf"
        say "  without chromium the browser test fails; without the eBPF packages the eBPF probe is unavailable"
        return
    fi
    export DEBIAN_FRONTEND=noninteractive
    say "apt-get update"
    apt-get update -qq
    if [ -n "$missing_required" ]; then
        say "apt-get install $missing_required"
        # shellcheck disable=SC2086  # word splitting of the package list is intended
        apt-get install -y -qq $missing_required >/dev/null
    fi
    if [ -n "$missing_ebpf" ]; then
        say "apt-get install $missing_ebpf (eBPF probe)"
        # shellcheck disable=SC2086
        apt-get install -y -qq --no-install-recommends $missing_ebpf >/dev/null \
            || say "WARNING: could not install $missing_ebpf; the eBPF probe will be unavailable"
    fi
}

setup_ebpf() {
    if [ -x "$root/scripts/setup-kernel-headers.sh" ]; then
        "$root/scripts/setup-kernel-headers.sh" || say "WARNING: setup-kernel-headers.sh failed; eBPF probe unavailable"
    fi
    if [ -x "$root/scripts/setup-bcc-venv.sh" ]; then
        "$root/scripts/setup-bcc-venv.sh" "$venv" || say "WARNING: setup-bcc-venv.sh failed; eBPF probe unavailable"
    fi
}

pick_python() {
    local candidate version
    for candidate in ${GPUSLO_PYTHON:-} python3.11 python3.12 python3; do
        command -v "$candidate" >/dev/null 2>&1 || continue
        version=$("$candidate" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null) || continue
        case "$version" in
            3.11|3.12) echo "$candidate"; return ;;
        esac
    done
    echo "install: no Python 3.11 or 3.12 found (durable-rules 2.0.28 does not import on 3.13)" >&2
    exit 1
}

create_venv() {
    if [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import sys; assert sys.version_info[:2] in ((3, 11), (3, 12))' 2>/dev/null; then
        say "reusing $venv ($("$venv/bin/python" --version))"
    else
        local python
        python=$(pick_python)
        say "creating $venv with $python ($("$python" --version))"
        rm -rf "$venv"
        "$python" -m venv "$venv"
    fi
    say "pip install -e '.[dev]'"
    "$venv/bin/python" -m pip install -q --disable-pip-version-check -e "$root[dev]"
}

install_system_packages
create_venv
setup_ebpf
mkdir -p "$root/var"
say "done. Start the service: $venv/bin/gpuslo serve   (http://127.0.0.1:8080, SQLite at var/gpuslo.db)"
