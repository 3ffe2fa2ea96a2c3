#!/usr/bin/env bash
# Let the project venv import BCC (Debian's python3-bpfcc) and nothing else from Debian's dist-packages:
# a folder holding only a symlink to the bcc package, named by a .pth file. Idempotent.
# Usage: scripts/setup-bcc-venv.sh [VENV]   (default: .venv beside this script's parent)
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
venv=${1:-$root/.venv}
bcc_src=${GPUSLO_BCC_DIR:-/usr/lib/python3/dist-packages/bcc}
if [ ! -d "$bcc_src" ]; then
    echo "setup-bcc-venv: $bcc_src is missing; skipped. Install BCC: apt-get install python3-bpfcc" >&2
    exit 0
fi
site=$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
shim="$venv/bcc-only"
mkdir -p "$shim"
ln -sfn "$bcc_src" "$shim/bcc"
echo "$shim" > "$site/gpuslo-bcc.pth"
"$venv/bin/python" -c 'import bcc; print("setup-bcc-venv: bcc", getattr(bcc, "__version__", "?"), "from", bcc.__file__)'
