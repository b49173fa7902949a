#!/usr/bin/env bash
# `mpirun -np N pipeforge train ...` as a user runs it: the same param_checksum as the sequential
# run, each process holding its share of the parameters, and a killed rank ending every other
# process with mpirun exiting non-zero.
set -uo pipefail
source "$(dirname "$0")/cli_checks.sh"

# 1. zb-v on 4 processes (the issue's command; --layers defaults to enough for its 8 stages: 5
#    blocks) over loopback TCP, against the sequential trainer on the same model. The pipelined run
#    takes the default micro-batches (2 x 4 ranks = 8 of --batch-size 8), the sequential run is given them.
"$pipeforge" train --model gpt --layers 5 --microbatches 8 --steps 3 --json --quiet >"$work/seq_gpt.json" || fail "sequential gpt"
run_mpi 4 tcp "$pipeforge" train --model gpt --schedule zb-v --stages 4 --steps 3 --json --quiet \
  >"$work/zbv.json" 2>"$work/zbv.err" || { cat "$work/zbv.err"; fail "mpirun -np 4 zb-v"; }
a=$(field "$work/seq_gpt.json" param_checksum)
b=$(field "$work/zbv.json" param_checksum)
echo "sequential gpt: $a"
echo "zb-v, 4 processes: $b"
[[ -n $a && $a == "$b" ]] || fail "zb-v on 4 processes: checksum $b, sequential $a"
[[ "$(field "$work/seq_gpt.json" losses)" == "$(field "$work/zbv.json" losses)" ]] || fail "zb-v losses differ"
[[ $(grep -c . "$work/zbv.json") == 1 ]] || fail "more than one process printed results"
python3 - "$work/zbv.json" <<'PY' || fail "process memory"
import json, sys
out = json.load(open(sys.argv[1]))
mem = out["process_memory"]
assert out["processes"] == 4 and len(mem) == 4, mem
total = out["num_parameters"] * 4
for m in mem:
    print(f"rank {m['rank']}: {m['parameter_bytes']} parameter + {m['gradient_bytes']} gradient + "
          f"{m['optimizer_bytes']} optimizer bytes (whole model: {total} parameter bytes)")
    assert 0 < m["parameter_bytes"] < total, m
    assert m["gradient_bytes"] == m["parameter_bytes"], m
assert sum(m["parameter_bytes"] for m in mem) == total, mem
PY

# 2. 1F1B MLP on 2 processes over shared memory, SGD with clipping.
"$pipeforge" train --model mlp --microbatches 4 --steps 4 --optimizer sgd --clip-norm 0.1 --json --quiet >"$work/seq_mlp.json" ||
  fail "sequential mlp"
run_mpi 2 default "$pipeforge" train --model mlp --schedule 1f1b --stages 2 --steps 4 --optimizer sgd \
  --clip-norm 0.1 --json --quiet >"$work/mlp.json" 2>"$work/mlp.err" || { cat "$work/mlp.err"; fail "mpirun -np 2 1f1b"; }
a=$(field "$work/seq_mlp.json" param_checksum)
b=$(field "$work/mlp.json" param_checksum)
[[ -n $a && $a == "$b" ]] || fail "1f1b mlp on 2 processes: checksum $b, sequential $a"

# 2b. --adapt on 2 processes: rank 1 slowed 4x, the partition moves off it on every process at the
#     same step, the losses and the checksum stay the sequential run's.
"$pipeforge" train --model gpt --layers 4 --batch-size 8 --microbatches 4 --steps 8 --json --quiet \
  >"$work/seq_adapt.json" || fail "sequential gpt for --adapt"
run_mpi 2 default "$pipeforge" train --model gpt --layers 4 --batch-size 8 --microbatches 4 --steps 8 \
  --schedule 1f1b --stages 2 --adapt --slow-rank 1 --slow-factor 4 --json --quiet \
  >"$work/adapt.json" 2>"$work/adapt.err" || { cat "$work/adapt.err"; fail "mpirun -np 2 --adapt"; }
a=$(field "$work/seq_adapt.json" param_checksum)
b=$(field "$work/adapt.json" param_checksum)
[[ -n $a && $a == "$b" ]] || fail "--adapt on 2 processes: checksum $b, sequential $a"
[[ "$(field "$work/seq_adapt.json" losses)" == "$(field "$work/adapt.json" losses)" ]] || fail "--adapt losses differ"
python3 - "$work/adapt.json" <<'PY' || fail "--adapt on 2 processes did not move layers off rank 1"
import json, sys
out = json.load(open(sys.argv[1]))
moves = out["adaptations"]
print("adaptations on 2 processes:", moves, "final partition:", out["partition"]["layers_per_stage"])
assert moves and moves[0]["to"][1] < moves[0]["from"][1], moves
# A move decided at the last step (8) has not been applied when the run ends.
last = moves[-1]
assert out["partition"]["layers_per_stage"] == (last["to"] if last["step"] < 8 else last["from"]), out["partition"]
PY

# 2c. --partition balanced on 2 processes: rank 0 times the layers on a whole model of its own and
#     every process runs the counts it sends: the sequential run's losses and checksum, and the
#     split that is best for the times the run reports (recomputed here: the cut with the smallest
#     slower stage; on an uninstrumented build that gives each rank 2 of the 4 blocks, embed + 2 |
#     2 + ln_f + head, where the even split gives 4 + 3; under ASan the head weighs more).
a=$(field "$work/seq_adapt.json" param_checksum)
run_mpi 2 default "$pipeforge" train --model gpt --layers 4 --batch-size 8 --microbatches 4 --steps 8 \
  --schedule 1f1b --stages 2 --partition balanced --json --quiet \
  >"$work/balanced.json" 2>"$work/balanced.err" || { cat "$work/balanced.err"; fail "mpirun -np 2 --partition balanced"; }
b=$(field "$work/balanced.json" param_checksum)
[[ -n $a && $a == "$b" ]] || fail "--partition balanced on 2 processes: checksum $b, sequential $a"
[[ "$(field "$work/seq_adapt.json" losses)" == "$(field "$work/balanced.json" losses)" ]] ||
  fail "--partition balanced losses differ"
python3 - "$work/balanced.json" <<'PY' || fail "--partition balanced on 2 processes: not the best split of its measured times"
import json, sys
partition = json.load(open(sys.argv[1]))["partition"]
counts, seconds = partition["layers_per_stage"], partition["layer_seconds"]
print("--partition balanced on 2 processes:", counts, "for layer seconds", ["%.2e" % t for t in seconds])
assert len(seconds) == 7 and all(t > 0 for t in seconds), seconds
prefix = [0.0]
for t in seconds: prefix.append(prefix[-1] + t)  # as the partitioner adds them, so ties break alike
slower = [max(prefix[k], prefix[-1] - prefix[k]) for k in range(1, len(seconds))]
best = 1 + slower.index(min(slower))  # the first cut of the smallest slower stage
assert counts == [best, len(seconds) - best], (counts, best)
PY

# 3. Data parallel x pipeline, the issue's second command: 2 replicas of a 2-rank 1F1B on 4
#    processes with the deterministic reduction print the checksum of the sequential trainer run
#    as 2 replicas (each replica's micro-batches accumulated from zero, the replicas added in order).
"$pipeforge" train --model gpt --data-parallel 2 --microbatches 4 --steps 3 --json --quiet >"$work/seq_dp.json" || fail "sequential dp"
run_mpi 4 default "$pipeforge" train --model gpt --schedule zb-h1 --stages 2 --data-parallel 2 \
  --gradient-reduction deterministic --steps 3 --json --quiet >"$work/dp.json" 2>"$work/dp.err" ||
  { cat "$work/dp.err"; fail "mpirun -np 4 --data-parallel 2"; }
a=$(field "$work/seq_dp.json" param_checksum)
b=$(field "$work/dp.json" param_checksum)
echo "sequential as 2 replicas: $a"
echo "2 replicas x zb-h1 on 2 ranks, 4 processes: $b"
[[ -n $a && $a == "$b" ]] || fail "data parallel: checksum $b, sequential $a"
# The same model trained as one replica on the same 2x micro-batches: the same losses (to
# rounding), another sum order.
"$pipeforge" train --model gpt --microbatches 8 --batch-size 16 --steps 3 --json --quiet >"$work/seq_one.json" ||
  fail "sequential one replica"
python3 - "$work/seq_one.json" "$work/dp.json" <<'PY' || fail "data-parallel losses"
import json, sys
one, dp = (json.load(open(f)) for f in sys.argv[1:3])
assert one["tokens"] == dp["tokens"], (one["tokens"], dp["tokens"])
for a, b in zip(one["losses"], dp["losses"]):
    assert abs(a - b) <= 1e-5 * abs(a), (one["losses"], dp["losses"])
print("one replica vs 2 replicas, losses:", one["losses"], dp["losses"])
PY

# 4. Too few processes for the schedule: a clear error, non-zero exit, no hang.
run_mpi 2 default "$pipeforge" train --model gpt --schedule 1f1b --stages 4 --steps 1 --quiet \
  >"$work/few.out" 2>&1 && fail "2 processes for 4 ranks succeeded"
grep -q "mpirun -np 4" "$work/few.out" || { cat "$work/few.out"; fail "no message for 2 processes / 4 ranks"; }

# 5. Kill rank 1 mid-run: every process ends, mpirun exits non-zero naming the rank.
run_mpi 2 tcp "$pipeforge" train --model gpt --schedule 1f1b --stages 2 --steps 1000000 --quiet \
  >"$work/kill.out" 2>&1 &
kill_rank_and_check $! "pipeforge train --model gpt --schedule 1f1b --stages 2 --steps 1000000" 1 "$work/kill.out"

# 6. `plan --measure` with mpirun on the PATH times the processes' links (a mpirun -np 2 probe of
#    pipeforge itself) and says so, also as root without Open MPI's allow-run-as-root variables
#    (the probe sets them for itself; it failed as root); without mpirun it says why and keeps the
#    thread figures.
env -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM \
  "$pipeforge" plan --model gpt --layers 2 --batch-size 8 --measure --calibration-steps 1 --max-microbatches 2 \
  --json --quiet >"$work/plan.json" 2>"$work/plan.err" || { cat "$work/plan.err"; fail "plan --measure"; }
python3 - "$work/plan.json" <<'PY' || fail "plan --measure did not measure the processes' links"
import json, sys
out = json.load(open(sys.argv[1]))
print("plan --measure:", out["process_links"], out["cluster"].get("processes"))
assert out["process_links"].startswith("measured by mpirun -np 2"), out["process_links"]
links = out["cluster"]["processes"]
assert links["p2p"]["bandwidth_gb_per_s"] > 0 and links["allreduce"]["bandwidth_gb_per_s"] > 0, links
PY
mkdir -p "$work/empty"
PATH="$work/empty" "$pipeforge" plan --model gpt --layers 2 --batch-size 8 --measure \
  --calibration-steps 1 --max-microbatches 2 --json --quiet >"$work/plan_nompi.json" 2>"$work/plan_nompi.err" ||
  { cat "$work/plan_nompi.err"; fail "plan --measure without mpirun"; }
grep -q "not measured (mpirun is not on the PATH)" "$work/plan_nompi.json" ||
  fail "plan --measure without mpirun: $(field "$work/plan_nompi.json" process_links)"

# 7. A plan that chooses data parallelism prints the line that launches it (mpirun -np D x P; it
#    printed `pipeforge train --plan`, which refuses to run), and that line runs as printed, from a
#    user's shell without Open MPI's root variables; the run reports the predicted step time.
(cd "$work" && env -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM "$pipeforge" plan --model gpt \
  --layers 2 --batch-size 8 --measure --calibration-steps 1 --max-microbatches 2 --data-parallel 2 --ranks 1 \
  --out plan_dp.json --svg '' --quiet >plan_dp.txt 2>plan_dp.err) || { cat "$work/plan_dp.err"; fail "plan --data-parallel 2"; }
line=$(sed -n 's/^  \(.*train --plan plan_dp.json\)$/\1/p' "$work/plan_dp.txt")
echo "plan printed: $line"
[[ $line == *"mpirun -np 2 "*"train --plan plan_dp.json" ]] || fail "plan did not print an mpirun -np 2 line: $(cat "$work/plan_dp.txt")"
[[ $line == "$(field "$work/plan_dp.json" run_with)" ]] || fail "the printed line is not plan_dp.json's run_with"
(cd "$work" && env -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM bash -c "$line" >dp_run.txt 2>dp_run.err) ||
  { cat "$work/dp_run.err"; fail "the printed line failed: $line"; }
grep -q "^step time: measured .*, the plan predicted " "$work/dp_run.txt" ||
  fail "train --plan did not show predicted vs measured: $(cat "$work/dp_run.txt")"

# 8. A step whose loss is finite but whose update leaves a parameter infinite (AdamW's decoupled
#    weight decay 1e38 at lr 100, resumed after 2 good steps) stops both processes at that step:
#    the leader names the parameter, exit 1, and the checkpoint folder's newest stays step 2's.
run_mpi 2 default "$pipeforge" train --model mlp --schedule 1f1b --stages 2 --steps 2 --checkpoint-dir "$work/series" \
  --checkpoint-every 1 --quiet >"$work/good.txt" 2>"$work/good.err" || { cat "$work/good.err"; fail "2 good steps"; }
run_mpi 2 default "$pipeforge" train --resume "$work/series" --schedule 1f1b --stages 2 --checkpoint-dir "$work/series" \
  --checkpoint-every 1 --steps 3 --lr 100 --weight-decay 1e38 --json --quiet >"$work/diverged.json" 2>"$work/diverged.err"
code=$?
cat "$work/diverged.err"
[[ $code == 1 ]] || fail "a diverged run on 2 processes exited $code"
grep -q "training diverged at step 3: parameter 'fc0.weight' has an infinity at element 0 after the update" \
  "$work/diverged.err" || fail "the divergence was not named at step 3"
[[ "$(field "$work/diverged.json" steps_run)" == 1 ]] || fail "the run went on after the divergence"
[[ "$(ls "$work/series")" == "$(printf 'step-00000001\nstep-00000002')" ]] ||
  fail "the checkpoint folder holds $(ls "$work/series")"

# 9. Neuron groups, one process per rank: ppll's first stage split into 2 width groups with the
#    diversity term (3 processes over loopback TCP) ends with the threads' checksum, losses,
#    evaluations and bytes crossing ranks.
groups=(train --model mlp --layers 4 --hidden 16 --features 12 --classes 5 --steps 8 --batch-size 16 --microbatches 4
        --schedule ppll --stages 2 --neuron-groups 2 --group-diversity 0.5 --eval-every 4 --json --quiet)
"$pipeforge" "${groups[@]}" >"$work/groups_threads.json" || fail "neuron groups on threads"
run_mpi 3 tcp "$pipeforge" "${groups[@]}" >"$work/groups_processes.json" 2>"$work/groups.err" ||
  { cat "$work/groups.err"; fail "mpirun -np 3 neuron groups"; }
python3 - "$work/groups_threads.json" "$work/groups_processes.json" <<'PY' || fail "neuron groups: processes differ from threads"
import json, sys
threads, processes = (json.load(open(p)) for p in sys.argv[1:])
print("neuron groups, threads:", threads["param_checksum"], "3 processes:", processes["param_checksum"])
assert processes["processes"] == 3 and processes["neuron_groups"]["ranks"] == 3, processes["neuron_groups"]
for key in ("param_checksum", "losses", "evaluations"):
    assert threads[key] == processes[key], (key, threads[key], processes[key])
assert threads["neuron_groups"]["last_step_bytes"] == processes["neuron_groups"]["last_step_bytes"]
PY

# 10. Overlapping steps, one process per rank: ZB-V with clipping (post-validation: the ranks
#     update before the gathered norm validates it) and evaluations between runs of steps, in 2
#     processes over loopback TCP and in threads, ends with the barrier's checksum, losses and
#     evaluations (how often a rank began a step early is timing, printed, not asserted).
overlap=(train --model gpt --layers 4 --batch-size 8 --microbatches 4 --steps 6 --schedule zb-v --stages 2
         --clip-norm 0.3 --eval-every 3 --json --quiet)
"$pipeforge" "${overlap[@]}" >"$work/overlap_barrier.json" || fail "zb-v with a barrier"
"$pipeforge" "${overlap[@]}" --overlap-steps >"$work/overlap_threads.json" || fail "zb-v overlapped in threads"
run_mpi 2 tcp "$pipeforge" "${overlap[@]}" --overlap-steps >"$work/overlap_processes.json" 2>"$work/overlap.err" ||
  { cat "$work/overlap.err"; fail "mpirun -np 2 zb-v overlapped"; }
python3 - "$work/overlap_barrier.json" "$work/overlap_threads.json" "$work/overlap_processes.json" <<'PY' ||
import json, sys
barrier, threads, processes = (json.load(open(p)) for p in sys.argv[1:])
print("overlapping steps, barrier:", barrier["param_checksum"], "threads:", threads["param_checksum"],
      "2 processes:", processes["param_checksum"], "begun early:", processes["overlap_steps"])
assert processes["processes"] == 2
for run in (threads, processes):
    for key in ("param_checksum", "losses", "evaluations"):
        assert run[key] == barrier[key], (key, run[key], barrier[key])
    assert "steps_begun_early" in run["overlap_steps"], run
PY
  fail "overlapping steps: differ from the barrier"

finish "mpirun CLI"
