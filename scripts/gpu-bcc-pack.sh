#!/usr/bin/env bash
# The BCC debs in one tar.xz, for a carry under the device's 64 MB limit (.gpu's debs are 51 MB, and with the
# wheels and the tree they exceed it). Here:  bash scripts/gpu-bcc-pack.sh pack .gpu DIR
#   -> DIR/bccroot.tar.xz (the same packages unpacked; other architectures' kernel headers and docs left out; 48 MB)
# On the device, from the project root (instead of .gpu/setup-bcc.sh):  source scripts/gpu-bcc-pack.sh unpack DIR
set -u
mode=${1:-}; src=${2:-.gpu}
if [ "$mode" = pack ]; then
    dst=${3:?pack .gpu DIR}; tmp=$(mktemp -d)
    for f in "$src"/*.deb; do dpkg -x "$f" "$tmp"; done
    for a in "$tmp"/usr/src/linux-headers-*-common/arch/*; do [ "$(basename "$a")" = x86 ] || rm -rf "$a"; done
    rm -rf "$tmp"/usr/share/doc "$tmp"/usr/share/lintian
    mkdir -p "$dst" && tar cJf "$dst/bccroot.tar.xz" -C "$tmp" . && rm -rf "$tmp"
elif [ "$mode" = unpack ]; then
    mkdir -p /opt/bccroot && tar xJf "$src/bccroot.tar.xz" -C /opt/bccroot
    k=$(uname -r)
    mkdir -p "/lib/modules/$k"
    ln -sfn "$(ls -d /opt/bccroot/usr/src/linux-headers-*-cloud-amd64 | head -1)" "/lib/modules/$k/build"
    ln -sfn "$(ls -d /opt/bccroot/usr/src/linux-headers-*-common | head -1)" "/lib/modules/$k/source"
    mountpoint -q /sys/kernel/tracing || mount -t tracefs nodev /sys/kernel/tracing
    export LD_LIBRARY_PATH=/opt/bccroot/usr/lib/x86_64-linux-gnu:/opt/bccroot/usr/lib/llvm-14/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export PYTHONPATH=/opt/bccroot/usr/lib/python3/dist-packages${PYTHONPATH:+:$PYTHONPATH}
else
    echo "usage: gpu-bcc-pack.sh pack .gpu DIR | source gpu-bcc-pack.sh unpack DIR" >&2
fi
