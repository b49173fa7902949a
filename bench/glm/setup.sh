#!/usr/bin/env bash
# Creates the GLM benchmark's own Python environment with numpy, scipy, scikit-learn and Snap ML
# from PyPI (not run by CI; nothing in the build or the tests needs it). Idempotent: an existing
# venv that already imports all four is kept.
# The venv: $PIPEFORGE_GLM_VENV, default ${XDG_CACHE_HOME:-~/.cache}/pipeforge/glm-venv.
# Prints the venv's python on stdout (what bench/glm/peers.py runs under); all else goes to stderr.
set -euo pipefail
venv=${PIPEFORGE_GLM_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/pipeforge/glm-venv}
python=${PYTHON:-python3}
# SNAPML_PIN: see the README ("Snap ML version").
packages=(numpy scipy scikit-learn "snapml==SNAPML_PIN")
if [[ ! -x $venv/bin/python ]]; then
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv" >&2
fi
if ! "$venv/bin/python" -c 'import numpy, scipy, sklearn, snapml' 2>/dev/null; then
  "$venv/bin/python" -m pip install --upgrade pip >&2
  "$venv/bin/python" -m pip install "${packages[@]}" >&2
fi
"$venv/bin/python" - >&2 <<'PY'
import numpy, scipy, sklearn, snapml
print("numpy", numpy.__version__, "scipy", scipy.__version__, "scikit-learn", sklearn.__version__,
      "snapml", snapml.__version__ if hasattr(snapml, "__version__") else "?")
PY
echo "$venv/bin/python"
