#!/usr/bin/env bash
# mypy --strict over gpuslo.engine (the settings are pyproject.toml's [tool.mypy]). The source folders are
# mapped onto the package by pyproject's package-dir, which mypy cannot read: a tree of links under
# var/typecheck gives it the installed layout.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
tree=var/typecheck
rm -rf "$tree" && mkdir -p "$tree/gpuslo"
ln -s "$root/gpuslo_pkg/__init__.py" "$tree/gpuslo/__init__.py"
for folder in engine probes cli web migrations; do ln -s "$root/$folder" "$tree/gpuslo/$folder"; done
# The cache lives beside the tree (which is rebuilt each run), so a second run only rechecks what changed.
export MYPY_CACHE_DIR="$root/var/mypy-cache"
cd "$tree" && exec "$root/.venv/bin/mypy" --config-file "$root/pyproject.toml" -p gpuslo.engine "$@"
