#!/usr/bin/env bash
# The elastic net (docs/GLM.md, "L1"): `pipeforge glm --l1` (SySCD on 2 threads) against
# scikit-learn's elastic-net solvers (ElasticNet's coordinate descent for the squared loss, saga for
# the logistic loss; Snap ML has L1 or L2, not their sum) on bench/glm/run.sh's dense sets, and
# one JSON object on stdout in run.sh's form (bench/glm/summarize.py): every run's objective (with
# the L1 term, recomputed in float64 from the weights), its distance to the best, its time, and
# the ratios of the fastest run of each library within 1e-4 of the best.
#
#   bench/glm/elastic_net.sh            # two 200,000 x 100 sets (about 5 minutes on 2 cores)
#   bench/glm/elastic_net.sh --quick    # a 20,000 x 50 set
set -euo pipefail
cd "$(dirname "$0")/../.."
source bench/glm/common.sh

# name rows cols density task loss lambda mu
if ((quick)); then
  sets=("dense 20000 50 1 classification logistic 1e-4 1e-3")
else
  sets=("dense 200000 100 1 classification logistic 1e-4 1e-3"
        "regression 200000 100 1 regression squared 1e-4 1e-2")
fi

for set in "${sets[@]}"; do
  read -r kind rows cols density task loss lambda mu <<<"$set"
  file=$(data_set "$kind" "$rows" "$cols" "$density" "$task")
  tag="$kind-$loss-l1"
  for tol in 1e-4 1e-6; do
    echo "pipeforge glm $tag: syscd on $threads threads, --l1 $mu, --tol $tol" >&2
    "$pipeforge" glm --loss "$loss" --lambda "$lambda" --l1 "$mu" --data "$file" --solver syscd --threads "$threads" \
      --tol "$tol" --json --quiet >"$work/$tag.pf.syscd-tol$tol.json"
  done
  echo "peers $tag (each at its tight tolerance and every looser one)" >&2
  "$python" bench/glm/peers.py --data "$file" --loss "$loss" --lambda "$lambda" --l1 "$mu" --threads "$threads" \
    --sweep >"$work/$tag.peers.json"
done

"$python" bench/glm/summarize.py "$work" "$(nproc)" "$(lscpu | sed -n 's/^Model name: *//p')"
