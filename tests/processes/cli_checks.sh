# Sourced by the mpirun CLI tests: the mpirun environment (tests/util/mpirun.sh), the pipeforge
# binary of the runfiles ($pipeforge), a work folder ($work, removed at exit), and the checks:
# `fail MESSAGE` counts a failure and goes on, `field FILE KEY` prints a field of a JSON file,
# `finish WHAT` ends the test (non-zero after any failure), `kill_rank_and_check` kills one rank of
# a running mpirun and checks that every other process ends naming it.
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

# kill_rank_and_check LAUNCHER_PID PATTERN RANK OUT: waits for the process of mpirun rank RANK
# whose command line matches PATTERN (pgrep -f), lets it train 2 s, kills it (SIGKILL) and checks
# that mpirun (LAUNCHER_PID) exits non-zero within 60 s, that OUT names the rank and that no
# process matching PATTERN is left.
kill_rank_and_check() {
  local launcher=$1 pattern=$2 rank=$3 out=$4 victim="" pid start rc left
  for _ in $(seq 1 100); do
    for pid in $(pgrep -f "$pattern" || true); do
      if tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$rank"; then victim=$pid; fi
    done
    [[ -n $victim ]] && break
    sleep 0.1
  done
  sleep 2  # training is under way
  if [[ -z $victim ]]; then
    fail "rank $rank's process not found"
    kill -9 "$launcher"
    return
  fi
  kill -9 "$victim"
  start=$(date +%s)
  for _ in $(seq 1 600); do kill -0 "$launcher" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$launcher" 2>/dev/null; then
    fail "mpirun still running 60 s after rank $rank was killed"
    kill -9 "$launcher"
  fi
  wait "$launcher"
  rc=$?
  echo "rank $rank killed: mpirun exited $rc after $(($(date +%s) - start)) s"
  [[ $rc -ne 0 ]] || fail "mpirun exited 0 after rank $rank was killed"
  grep -Eq "rank $rank|process rank $rank" "$out" || { cat "$out"; fail "the output does not name rank $rank"; }
  sleep 1
  left=$(pgrep -f "$pattern" || true)
  [[ -z $left ]] || { fail "processes left behind: $left"; kill -9 $left; }
}
