#!/usr/bin/env bash
# Builds (-c opt) and runs the asynchronous-schedule benchmark: alone (convergence on the character
# GPT and on scikit-learn's handwritten digits, throughput with threads) and under mpirun -np 2
# (throughput with one process per rank). Prints one JSON object.
# The digits come from an installed scikit-learn, else from its wheel on PyPI (pip download).
# Extra arguments go to the benchmark (e.g. --steps 100).
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build -c opt //bench/async:async_bench >&2
bin="$(bazel info -c opt bazel-bin 2>/dev/null)/bench/async/async_bench"  # not the bazel-bin link: another build may move it
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
digits=$(python3 -c 'import os, sklearn.datasets as d; print(os.path.join(os.path.dirname(d.__file__), "data", "digits.csv.gz"))' 2>/dev/null || true)
if [ -z "$digits" ] || [ ! -f "$digits" ]; then
  python3 -m pip download --quiet --no-deps --only-binary=:all: scikit-learn -d "$work" >&2
  python3 - "$work" <<'PY'
import glob, sys, zipfile
wheel = glob.glob(sys.argv[1] + "/scikit_learn-*.whl")[0]
with zipfile.ZipFile(wheel) as z:
    open(sys.argv[1] + "/digits.csv.gz", "wb").write(z.read("sklearn/datasets/data/digits.csv.gz"))
PY
  digits="$work/digits.csv.gz"
fi
gunzip -c "$digits" > "$work/digits.csv"
"$bin" --digits "$work/digits.csv" "$@" > "$work/alone.json"
source tests/util/mpirun.sh
run_mpi 2 default "$bin" "$@" > "$work/processes.json"
python3 - "$work/alone.json" "$work/processes.json" <<'PY'
import json, sys
out = json.load(open(sys.argv[1]))
out.update(json.load(open(sys.argv[2])))
print(json.dumps(out))
PY
