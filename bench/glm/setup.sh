#!/usr/bin/env bash
# Creates the GLM benchmark's own Python environment with numpy, scipy, scikit-learn and Snap ML
# from PyPI (not run by CI; nothing in the build or the tests needs it). Idempotent: an existing
# venv that already imports all four is kept.
# The venv: $PIPEFORGE_GLM_VENV, default ${XDG_CACHE_HOME:-~/.cache}/pipeforge/glm-venv.
# Prints the venv's python on stdout (what bench/glm/peers.py runs under); all else goes to stderr.
set -euo pipefail
venv=${PIPEFORGE_GLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/pipeforge/glm-venv}
python=${PYTHON:-python3}
# Snap ML is pinned to the release whose regularisation parameter README.md's mapping was checked
# against (a cp311 manylinux_2_28 x86_64 wheel on PyPI); $PIPEFORGE_GLM_SNAPML overrides it
# (e.g. "snapml" for the newest). The others follow the newest that pip resolves with it.
packages=(numpy scipy scikit-learn "${PIPEFORGE_GLM_SNAPML:-snapml==1.17.2}")
if [[ ! -x $venv/bin/python ]]; then
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv" >&2
fi
if ! "$venv/bin/python" -c 'import numpy, scipy, sklearn, snapml' 2>/dev/null; then
  "$venv/bin/python" -m pip install --upgrade pip >&2
  "$venv/bin/python" -m pip install "${packages[@]}" >&2
fi
"$venv/bin/python" - >&2 <<'PY'
from importlib.metadata import version
print(", ".join(f"{p} {version(p)}" for p in ("numpy", "scipy", "scikit-learn", "snapml")))
PY
echo "$venv/bin/python"
