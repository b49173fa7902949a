# Sourced by the mpirun CLI tests: the mpirun environment (tests/util/mpirun.sh), the pipeforge
# binary of the runfiles ($pipeforge), a work folder ($work, removed at exit), and the checks:
# `fail MESSAGE` counts a failure and goes on, `field FILE KEY` prints a field of a JSON file,
# `finish WHAT` ends the test (non-zero after any failure).
source "$(dirname "${BASH_SOURCE[0]}")/../util/mpirun.sh"
command -v mpirun >/dev/null || { echo "mpirun not found: run tools/setup.sh"; exit 1; }
pipeforge=$(pwd)/pipeforge
[[ -x $pipeforge ]] || pipeforge=$(find . -name pipeforge -type f -perm -u+x | head -n 1)
work=$(mktemp -d)
trap 'rm -rf "$work"; pf_mpi_cleanup' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }
field() { python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }
finish() {
  if ((failures > 0)); then
    echo "$failures failure(s)"
    exit 1
  fi
  echo "all $1 checks passed"
}
