#!/usr/bin/env bash
# Shared setup of the GPU-machine runs (scripts/gpu-e2e.sh, scripts/gpu-tokens.sh): source it from the project
# root, then call gpu_python_setup. It installs the wheels carried in .gpu/wheels into $GPUSLO_SITE (the image's
# own torch, pynvml, httpx and PyYAML stay visible), builds durable-rules from its source distribution there,
# and installs gpuslo itself editable. Returns 10-13 on the step that failed.
# How .gpu/wheels is prepared on the CPU machine: see the header of scripts/gpu-e2e.sh.
GPUSLO_SITE=${GPUSLO_SITE:-/tmp/gpuslo-site}

gpu_python_setup() {
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$GPUSLO_SITE" \
        .gpu/wheels/*.whl || return 10
    export PYTHONPATH="$GPUSLO_SITE${PYTHONPATH:+:$PYTHONPATH}"
    # Newer gcc turns some of durable-rules' C99-era warnings into errors; keep them warnings.
    CC="gcc -Wno-error=implicit-function-declaration -Wno-error=incompatible-pointer-types -Wno-error=int-conversion" \
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target "$GPUSLO_SITE" \
        .gpu/wheels/durable_rules-*.tar.gz || return 11
    python3 -m pip install -q --no-deps --no-build-isolation -e . || return 12
    python3 -c "import durable.lang, flask, sqlalchemy, torch, pynvml, gpuslo.engine.runtime; \
print('imports ok: torch', torch.__version__, 'cuda', torch.version.cuda)" || return 13
}
