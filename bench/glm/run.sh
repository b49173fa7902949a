#!/usr/bin/env bash
# The linear-model benchmark (docs/GLM.md, "Benchmark"): `pipeforge glm` with its three solvers
# against scikit-learn and Snap ML on the same libsvm files, and one JSON object on stdout with
# every run's objective, its distance to the best objective any run found, its time, and the time
# ratios of the fastest run of each library that came within 1e-4 of that best.
#
#   bench/glm/run.sh            # the full grid (about 10 minutes on 2 cores)
#   bench/glm/run.sh --quick    # small sets, to try the script
#
# Needs PyPI once (bench/glm/setup.sh makes the venv); the data sets are cached in
# $PIPEFORGE_GLM_DATA (default ${XDG_CACHE_HOME:-~/.cache}/pipeforge/glm-data).
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/glm/common.sh

# name rows cols density task loss lambda: rows scaled to unit norm, as LIBSVM's own data sets are.
if ((quick)); then
  sets=("dense 20000 50 1 classification logistic 1e-4"
        "sparse 50000 500 0.02 classification logistic 1e-4")
else
  sets=("dense 200000 100 1 classification logistic 1e-4"
        "sparse 200000 1000 0.01 classification logistic 1e-5"
        "regression 200000 100 1 regression squared 1e-4")
fi

for set in "${sets[@]}"; do
  read -r kind rows cols density task loss lambda <<<"$set"
  file=$(data_set "$kind" "$rows" "$cols" "$density" "$task")
  tag="$kind-$loss"
  for solver in sequential async syscd; do
    t=$threads
    [[ $solver == sequential ]] && t=1
    echo "pipeforge glm $tag: $solver on $t thread(s)" >&2
    "$pipeforge" glm --loss "$loss" --lambda "$lambda" --data "$file" --solver "$solver" --threads "$t" \
      --tol 1e-6 --json --quiet >"$work/$tag.pf.$solver.json"
  done
  for tol in 1e-4; do
    echo "pipeforge glm $tag: syscd on $threads threads, --tol $tol" >&2
    "$pipeforge" glm --loss "$loss" --lambda "$lambda" --data "$file" --solver syscd --threads "$threads" \
      --tol "$tol" --json --quiet >"$work/$tag.pf.syscd-tol$tol.json"
  done
  echo "peers $tag (each at its tight tolerance and, --sweep, at every looser one)" >&2
  "$python" bench/glm/peers.py --data "$file" --loss "$loss" --lambda "$lambda" --threads "$threads" \
    --sweep >"$work/$tag.peers.json"
done

"$python" bench/glm/summarize.py "$work" "$(nproc)" "$(lscpu | sed -n 's/^Model name: *//p')"
