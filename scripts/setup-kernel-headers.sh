#!/usr/bin/env bash
# Make BCC compile on kernels without a matching header package (DESIGN.md, "eBPF on these machines"):
# link /lib/modules/$(uname -r)/{build,source} to the generic Debian cloud-amd64 headers and mount tracefs.
# Idempotent. Needs root; without it, says what it skipped and exits 0 so installs go on without the probe.
set -u
src=${GPUSLO_HEADERS_ROOT:-/usr/src}
k=$(uname -r)
mods="/lib/modules/$k"

if [ "$(id -u)" -ne 0 ]; then
    echo "setup-kernel-headers: not root; skipped linking $mods/build and $mods/source to the" \
         "linux-headers-*-cloud-amd64 headers and mounting tracefs at /sys/kernel/tracing." \
         "The eBPF probe stays unavailable until root runs: sudo $0" >&2
    exit 0
fi

build=$(ls -d "$src"/linux-headers-*-cloud-amd64 2>/dev/null | sort -V | tail -1)
if [ -z "$build" ]; then
    echo "setup-kernel-headers: no $src/linux-headers-*-cloud-amd64; skipped the header links." \
         "Install them: apt-get install linux-headers-cloud-amd64" >&2
else
    # The -common folder shares the version part: linux-headers-6.1.0-57-cloud-amd64 -> linux-headers-6.1.0-57-common
    common="${build%-cloud-amd64}-common"
    mkdir -p "$mods"
    if [ -e "$mods/build" ] && [ ! -L "$mods/build" ]; then
        echo "setup-kernel-headers: $mods/build is a real folder (matching headers?); left it alone."
    else
        ln -sfn "$build" "$mods/build" && echo "setup-kernel-headers: $mods/build -> $build"
    fi
    if [ ! -d "$common" ]; then
        echo "setup-kernel-headers: $common is missing; skipped $mods/source" >&2
    elif [ -e "$mods/source" ] && [ ! -L "$mods/source" ]; then
        echo "setup-kernel-headers: $mods/source is a real folder; left it alone."
    else
        ln -sfn "$common" "$mods/source" && echo "setup-kernel-headers: $mods/source -> $common"
    fi
fi

if mountpoint -q /sys/kernel/tracing; then
    echo "setup-kernel-headers: tracefs already mounted at /sys/kernel/tracing"
elif mount -t tracefs nodev /sys/kernel/tracing; then
    echo "setup-kernel-headers: mounted tracefs at /sys/kernel/tracing"
else
    echo "setup-kernel-headers: could not mount tracefs at /sys/kernel/tracing" >&2
fi
