#!/usr/bin/env bash
# The test-only Python environment of tests/interop:transformers_test: PyTorch, Hugging Face
# Transformers, safetensors and numpy from PyPI, in a virtual environment of their own (nothing
# else uses it; the library never imports Python). Idempotent: a venv that imports them is kept.
# Prints the venv's python on stdout; exits 1, saying why on stderr, when it cannot be made
# (PyPI unreachable): the test then skips itself. tools/test.sh runs it before `bazel test`.
#   venv: $PIPEFORGE_HF_VENV, default ${XDG_CACHE_HOME:-~/.cache}/pipeforge/hf-venv (about 6 GB:
#   PyPI's torch brings the CUDA libraries)
set -euo pipefail
venv=${PIPEFORGE_HF_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/pipeforge/hf-venv}
python=${PYTHON:-python3}
check='import torch, transformers, safetensors, numpy'
if ! "$venv/bin/python" -c "$check" 2>/dev/null; then
  rm -rf "$venv"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv" >&2
  if ! "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --timeout 30 --retries 2 \
      torch transformers safetensors numpy >&2; then
    echo "tools/hf_venv.sh: could not install torch and transformers from PyPI into $venv" >&2
    rm -rf "$venv"
    exit 1
  fi
fi
"$venv/bin/python" -c "$check"
echo "$venv/bin/python"
