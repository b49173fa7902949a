# Sourced by the benchmarks that train on scikit-learn's handwritten digits:
# `fetch_digits DIR` writes DIR/digits.csv (1797 rows of 64 features and a label) and prints its
# path. The data comes from an installed scikit-learn, else from its wheel on PyPI (pip download).
fetch_digits() {
  local work=$1 digits
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
  echo "$work/digits.csv"
}

# `run_alone_and_under_mpirun BIN ARGS...`: BIN --digits FILE ARGS alone, then under mpirun -np 2,
# and prints the two JSON objects merged into one.
run_alone_and_under_mpirun() {
  local bin=$1 work
  shift
  work=$(mktemp -d)
  "$bin" --digits "$(fetch_digits "$work")" "$@" > "$work/alone.json"
  source tests/util/mpirun.sh
  run_mpi 2 default "$bin" "$@" > "$work/processes.json"
  python3 - "$work/alone.json" "$work/processes.json" <<'PY'
import json, sys
out = json.load(open(sys.argv[1]))
out.update(json.load(open(sys.argv[2])))
print(json.dumps(out))
PY
  rm -rf "$work"
}
