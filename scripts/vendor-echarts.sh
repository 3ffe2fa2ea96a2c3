#!/usr/bin/env bash
# Update the vendored Apache ECharts in web/static/vendor/echarts/ from the npm registry.
# Usage: scripts/vendor-echarts.sh [VERSION]   (default: the pinned version below; change it here to upgrade)
# Checks the tarball against the registry's integrity hash, keeps LICENSE and NOTICE beside the script and
# records the version and hash in VERSION. Run it, look at the diff, run tests/browser, commit.
set -euo pipefail

version=${1:-6.1.0}
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/web/static/vendor/echarts
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

integrity=$(npm view "echarts@$version" dist.integrity)
(cd "$work" && npm pack --silent "echarts@$version" >/dev/null)
tarball=$work/echarts-$version.tgz
actual="sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)"
if [ "$actual" != "$integrity" ]; then
    echo "vendor-echarts: integrity mismatch for echarts@$version: registry $integrity, got $actual" >&2
    exit 1
fi
tar -xzf "$tarball" -C "$work" package/dist/echarts.min.js package/LICENSE package/NOTICE
mkdir -p "$dest"
cp "$work/package/dist/echarts.min.js" "$work/package/LICENSE" "$work/package/NOTICE" "$dest/"
printf 'echarts %s\nintegrity %s\nsource https://registry.npmjs.org/echarts/-/echarts-%s.tgz\n' \
    "$version" "$integrity" "$version" > "$dest/VERSION"
echo "vendor-echarts: echarts@$version -> $dest ($(wc -c < "$dest/echarts.min.js") bytes)"
