#!/usr/bin/env bash
# Creates the benchmark's own Python environment with PyTorch and numpy from PyPI (not run by CI;
# nothing in the build or the tests needs it). Idempotent: an existing venv with torch is kept.
# The venv: $PIPEFORGE_PEER_VENV, default ${XDG_CACHE_HOME:-~/.cache}/pipeforge/peer-venv.
# Prints the venv's python (what bench/peer/run.py --python takes; that is its default).
set -euo pipefail
venv=${PIPEFORGE_PEER_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/pipeforge/peer-venv}
python=${PYTHON:-python3}
if [[ ! -x $venv/bin/python ]]; then
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv" >&2
fi
if ! "$venv/bin/python" -c 'import torch, numpy' 2>/dev/null; then
  "$venv/bin/python" -m pip install --upgrade pip >&2
  "$venv/bin/python" -m pip install torch numpy >&2
fi
"$venv/bin/python" -c 'import torch; print("torch", torch.__version__, file=__import__("sys").stderr)'
echo "$venv/bin/python"
