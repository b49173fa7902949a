#!/usr/bin/env bash
# All three dimensions as a user launches them: `mpirun -np T*P*D pipeforge train --tensor-parallel T
# --schedule S --stages P --data-parallel D`. In the deterministic reduction a pipeline of split
# stages trains bit for bit like the split model in the sequential trainer, for every synchronous
# schedule family; with replicas, within float rounding of the unsplit data-parallel pipeline; each
# process holds its stage's slices; a checkpoint saved at T = 2, P = 2 resumes in one process;
# unsupported combinations are refused naming the option; a killed member ends every process.
set -uo pipefail
source "$(dirname "$0")/cli_checks.sh"

# The MLP 16 -> 32 -> 32 -> 32 -> 10: stages of 3 and 4 top-level layers, each stage's linears as a
# column / row pair (fc0 / fc1, fc2 / head).
mlp=(--model mlp --features 16 --hidden 32 --layers 3 --classes 10 --batch-size 16 --microbatches 2 --clip-norm 0.5
  --json --quiet)
det=(--tensor-reduction deterministic)
# Under a sanitizer (PF_SANITIZER_PRELOAD, tools/sanitize.sh; each launch is slow there) the
# launches marked so are left out: the others run the same code paths.
sanitized() { [[ -n ${PF_SANITIZER_PRELOAD:-} ]]; }

# 1. T = 2, P = 2 against T = 2 in the sequential trainer, deterministic: equal bit for bit.
run_mpi 2 tcp "$pipeforge" train "${mlp[@]}" "${det[@]}" --steps 3 --tensor-parallel 2 >"$work/mlp_t2.json" 2>"$work/err" ||
  { cat "$work/err"; fail "mlp, T 2"; }
run_mpi 4 tcp "$pipeforge" train "${mlp[@]}" "${det[@]}" --steps 3 --tensor-parallel 2 --schedule 1f1b --stages 2 \
  >"$work/mlp_t2p2.json" 2>"$work/err" || { cat "$work/err"; fail "mlp, T 2 x P 2"; }
python3 - "$work" <<'PY' || fail "mlp, T 2 x P 2: not the sequential T 2 run, or memory"
import json, sys
load = lambda name: json.load(open(f"{sys.argv[1]}/{name}.json"))
seq, pipe = load("mlp_t2"), load("mlp_t2p2")
assert pipe["losses"] == seq["losses"], (pipe["losses"], seq["losses"])
assert pipe["param_checksum"] == seq["param_checksum"]
assert pipe["partition"]["layers_per_stage"] == [3, 4], pipe["partition"]
# rank = tp + T * (dp + D * pp): processes 0, 1 hold stage 0's slices, 2, 3 stage 1's.
stage0 = (16 * 32 + 32) // 2 + 32 * 32 // 2 + 32   # fc0 column, fc1 row (its bias whole)
stage1 = (32 * 32 + 32) // 2 + 32 * 10 // 2 + 10   # fc2 column, the head row
got = [m["parameter_bytes"] for m in pipe["process_memory"]]
assert got == [4 * stage0] * 2 + [4 * stage1] * 2, got
print(f"mlp T 2 x P 2: losses {pipe['losses']} = sequential T 2; parameter bytes per process {got}")
PY

# 1b. Pipeline messages at T = 2 (Megatron's scatter/gather): each member sends its half of the
#     stage's [8, 32] output (forward) or input gradient (backward) with a header of (rank, dims) as
#     int64s, and its group gathers the halves; unsplit, the whole [8, 32] goes. Two micro-batches.
run_mpi 2 tcp "$pipeforge" train "${mlp[@]}" "${det[@]}" --steps 3 --schedule 1f1b --stages 2 >"$work/mlp_p2.json" \
  2>"$work/err" || { cat "$work/err"; fail "mlp, P 2"; }
python3 - "$work" <<'PY' || fail "mlp, T 2 x P 2: pipeline bytes per step are not the formula's"
import json, sys
load = lambda name: json.load(open(f"{sys.argv[1]}/{name}.json"))
whole, split = load("mlp_p2"), load("mlp_t2p2")
m, rows, width, T = 2, 8, 32, 2
whole_bytes = m * 4 * rows * width
slice_bytes = m * 4 * (2 * (1 + 2) + rows * width // T)
got_whole = [r["sent_bytes_per_step"] for r in whole["ranks"]]
got_split = [r["sent_bytes_per_step"] for r in split["ranks"]]
assert got_whole == [whole_bytes] * 2, (got_whole, whole_bytes)
assert got_split == [slice_bytes] * 2, (got_split, slice_bytes)
assert split["tensor_parallel_gathered_bytes_per_step"] >= m * 4 * rows * width // T, split
print(f"pipeline bytes per rank per step: {got_split} at T 2 (formula {slice_bytes}), {got_whole} unsplit")
PY

# 2. T x P x D = 2 x 2 x 2 (8 processes, the default reduction) against P x D = 2 x 2 unsplit (under
#    a sanitizer: 4 covers it with the GPT).
if ! sanitized; then
run_mpi 4 tcp "$pipeforge" train "${mlp[@]}" --steps 3 --schedule 1f1b --stages 2 --data-parallel 2 >"$work/mlp_p2d2.json" \
  2>"$work/err" || { cat "$work/err"; fail "mlp, P 2 x D 2"; }
run_mpi 8 tcp "$pipeforge" train "${mlp[@]}" --steps 3 --tensor-parallel 2 --schedule 1f1b --stages 2 --data-parallel 2 \
  >"$work/mlp_t2p2d2.json" 2>"$work/err" || { cat "$work/err"; fail "mlp, T 2 x P 2 x D 2"; }
python3 - "$work" <<'PY' || fail "mlp, T 2 x P 2 x D 2: losses"
import json, sys
load = lambda name: json.load(open(f"{sys.argv[1]}/{name}.json"))
ref, out = load("mlp_p2d2"), load("mlp_t2p2d2")
assert out["processes"] == 8 and out["tensor_parallel"] == 2 and out["data_parallel"] == 2, out
for a, b in zip(ref["losses"], out["losses"]):
    assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (ref["losses"], out["losses"])
print(f"mlp T 2 x P 2 x D 2: losses {out['losses']} (P 2 x D 2 unsplit: {ref['losses']})")
PY
fi

# 3. The GPT preset: T = 2, P = 2 under every synchronous schedule family against T = 2 sequential,
#    deterministic, bit for bit. Under a sanitizer (slow) the shapes 1f1b and 3b do not cover: two
#    stages per rank in a V, two pipelines.
gpt=(--model gpt --steps 2 --microbatches 4 --json --quiet "${det[@]}")
schedules=(gpipe 1f1b zb-h1 zb-h2 zb-auto zb-v interleaved-1f1b interleaved-zb bfs v-half v-min dualpipe-v bitpipe seq1f1b)
! sanitized || schedules=(zb-v bitpipe)
run_mpi 2 default "$pipeforge" train "${gpt[@]}" --tensor-parallel 2 >"$work/gpt_t2.json" 2>"$work/err" ||
  { cat "$work/err"; fail "gpt, T 2"; }
for schedule in "${schedules[@]}"; do
  run_mpi 4 default "$pipeforge" train "${gpt[@]}" --tensor-parallel 2 --schedule "$schedule" --stages 2 \
    >"$work/gpt_$schedule.json" 2>"$work/err" || { cat "$work/err"; fail "gpt, T 2 x P 2, $schedule"; continue; }
  python3 - "$work" "$schedule" <<'PY' || fail "gpt, T 2 x P 2, $2: not the sequential T 2 run"
import json, sys
work, schedule = sys.argv[1], sys.argv[2]
seq, pipe = (json.load(open(f"{work}/{name}.json")) for name in ("gpt_t2", f"gpt_{schedule}"))
assert pipe["losses"] == seq["losses"], (schedule, pipe["losses"], seq["losses"])
# bitpipe trains as the sequential trainer of two replicas of m/2 micro-batches (docs/SCHEDULES.md:
# the two copies' gradient sums are added), so its parameters are that reference's, not this one's
# (which tensor parallelism without a schedule cannot take): the losses only.
if schedule != "bitpipe":
    assert pipe["param_checksum"] == seq["param_checksum"], schedule
print(f"gpt T 2 x P 2 {schedule}: losses {pipe['losses']} = sequential T 2")
PY
done

# 3b. Activation policies on split stages (1f1b): recomputed or offloaded activations, the same bits
#     (under a sanitizer recompute, which replays the forward's all-reduces).
policies=(recompute offload-host)
! sanitized || policies=(recompute)
for policy in "${policies[@]}"; do
  run_mpi 4 default "$pipeforge" train "${gpt[@]}" --tensor-parallel 2 --schedule 1f1b --stages 2 \
    --activation-policy "$policy" >"$work/gpt_$policy.json" 2>"$work/err" || { cat "$work/err"; fail "gpt, $policy"; continue; }
  python3 - "$work" "$policy" <<'PY' || fail "gpt, T 2 x P 2, $2: not the sequential T 2 run"
import json, sys
work, policy = sys.argv[1], sys.argv[2]
seq, pipe = (json.load(open(f"{work}/{name}.json")) for name in ("gpt_t2", f"gpt_{policy}"))
assert pipe["activation_policy"] == policy, pipe["activation_policy"]
assert pipe["losses"] == seq["losses"] and pipe["param_checksum"] == seq["param_checksum"], (policy, pipe["losses"])
print(f"gpt T 2 x P 2 1f1b, {policy}: losses {pipe['losses']} = sequential T 2")
PY
done

# 4. The issue's command: the GPT at T x P x D = 2 x 2 x 2, within rounding of the unsplit P x D run.
run_mpi 4 default "$pipeforge" train --model gpt --steps 2 --json --quiet --schedule 1f1b --stages 2 --data-parallel 2 \
  >"$work/gpt_p2d2.json" 2>"$work/err" || { cat "$work/err"; fail "gpt, P 2 x D 2"; }
run_mpi 8 default "$pipeforge" train --model gpt --steps 2 --json --quiet --tensor-parallel 2 --schedule 1f1b --stages 2 \
  --data-parallel 2 >"$work/gpt_t2p2d2.json" 2>"$work/err" || { cat "$work/err"; fail "gpt, T 2 x P 2 x D 2"; }
python3 - "$work" <<'PY' || fail "gpt, T 2 x P 2 x D 2: losses"
import json, sys
load = lambda name: json.load(open(f"{sys.argv[1]}/{name}.json"))
ref, out = load("gpt_p2d2"), load("gpt_t2p2d2")
for a, b in zip(ref["losses"], out["losses"]):
    assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (ref["losses"], out["losses"])
print(f"gpt T 2 x P 2 x D 2: losses {out['losses']} (P 2 x D 2 unsplit: {ref['losses']})")
PY

# 4b. A checkpoint saved at T = 2, P = 2 (a folder: each stage's shard holds its whole tensors,
#     gathered from the two members) resumes in one process, at T = 2 alone and at T = 2, P = 2,
#     where the uninterrupted run goes on; a one-process file resumes at T = 2, P = 2.
"$pipeforge" train "${mlp[@]}" "${det[@]}" --steps 4 >"$work/seq4.json" || fail "sequential mlp, 4 steps"
tp_pp=(--tensor-parallel 2 --schedule 1f1b --stages 2)
run_mpi 4 default "$pipeforge" train "${mlp[@]}" "${det[@]}" --steps 2 "${tp_pp[@]}" --checkpoint "$work/ck" \
  >/dev/null 2>"$work/err" || { cat "$work/err"; fail "T 2 x P 2 --checkpoint"; }
"$pipeforge" train --resume "$work/ck" --steps 2 --json --quiet >"$work/resumed_one.json" 2>"$work/err" ||
  { cat "$work/err"; fail "--resume of a T 2 x P 2 checkpoint in one process"; }
run_mpi 4 default "$pipeforge" train --resume "$work/ck" --steps 2 "${tp_pp[@]}" --json --quiet \
  >"$work/resumed_t2p2.json" 2>"$work/err" || { cat "$work/err"; fail "--resume of a T 2 x P 2 checkpoint at T 2 x P 2"; }
resumed=(resumed_one resumed_t2p2)
if ! sanitized; then
  run_mpi 2 default "$pipeforge" train --resume "$work/ck" --steps 2 --tensor-parallel 2 --json --quiet \
    >"$work/resumed_t2.json" 2>"$work/err" || { cat "$work/err"; fail "--resume of a T 2 x P 2 checkpoint at T 2"; }
  "$pipeforge" train "${mlp[@]}" --steps 2 --checkpoint "$work/one.pfck" >/dev/null || fail "sequential --checkpoint"
  run_mpi 4 default "$pipeforge" train --resume "$work/one.pfck" --steps 2 "${tp_pp[@]}" --json --quiet \
    >"$work/resumed_file.json" 2>"$work/err" || { cat "$work/err"; fail "--resume of a one-process file at T 2 x P 2"; }
  resumed+=(resumed_t2 resumed_file)
fi
python3 - "$work" "${resumed[@]}" <<'PY' || fail "a T 2 x P 2 checkpoint did not resume where the run goes on"
import json, sys
load = lambda name: json.load(open(f"{sys.argv[1]}/{name}.json"))
seq = load("seq4")
for name in sys.argv[2:]:
    out = load(name)
    assert len(out["losses"]) == 2, (name, out["losses"])
    for a, b in zip(seq["losses"][2:], out["losses"]):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (name, seq["losses"], out["losses"])
    print(f"steps 3-4 {name}: {out['losses']} (uninterrupted {seq['losses'][2:]})")
PY

# 5. Refused, naming the option: an asynchronous schedule, a process count that is not T x P x D.
run_mpi 4 default "$pipeforge" train "${mlp[@]}" --steps 1 --tensor-parallel 2 --schedule pipedream --stages 2 >"$work/async.out" 2>&1 &&
  fail "--tensor-parallel 2 with pipedream succeeded"
grep -q -- "--tensor-parallel 2 with .* is not supported yet (synchronous schedules only)" "$work/async.out" ||
  { cat "$work/async.out"; fail "no message for --tensor-parallel with an asynchronous schedule"; }
run_mpi 6 default "$pipeforge" train "${mlp[@]}" --steps 1 --tensor-parallel 2 --schedule 1f1b --stages 2 --data-parallel 2 \
  >"$work/six.out" 2>&1 && fail "6 processes for T 2 x P 2 x D 2 succeeded"
grep -q -- "--tensor-parallel 2 needs 8 processes under mpirun (6 processes)" "$work/six.out" ||
  { cat "$work/six.out"; fail "no message for 6 processes / T 2 x P 2 x D 2"; }

# 6. Kill a member of the last stage mid-run: every process ends, mpirun names the rank.
run_mpi 4 tcp "$pipeforge" train --model mlp --layers 3 --tensor-parallel 2 --schedule 1f1b --stages 2 --steps 1000000 \
  --quiet >"$work/kill.out" 2>&1 &
kill_rank_and_check $! "pipeforge train --model mlp --layers 3 --tensor-parallel 2 --schedule 1f1b" 3 "$work/kill.out"

# 7. The planner offers T: restricted to T = 2 on one stage, its plan prints the mpirun line that
#    trains it, and `train --plan` under that line runs split (not under a sanitizer: the planner's
#    own tests run there).
if ! sanitized; then
  "$pipeforge" plan --model gpt --d-model 32 --heads 2 --seq-len 16 --layers 2 --batch-size 8 --quiet --measure \
    --devices 2 --tensor-parallel 2 --ranks 1 --data-parallel 1 --out "$work/plan.json" --svg '' >"$work/plan.out" \
    2>&1 || { cat "$work/plan.out"; fail "plan --tensor-parallel 2"; }
  grep -q "mpirun -np 2 .*pipeforge train --plan $work/plan.json" "$work/plan.out" ||
    { cat "$work/plan.out"; fail "plan --tensor-parallel 2 does not print an mpirun -np 2 line"; }
  run_mpi 2 default "$pipeforge" train --plan "$work/plan.json" --steps 2 --json --quiet >"$work/planned.json" \
    2>"$work/err" || { cat "$work/err"; fail "train --plan of a T = 2 choice"; }
  python3 - "$work" <<'PY' || fail "the planned T = 2 run"
import json, sys
plan, run = (json.load(open(f"{sys.argv[1]}/{name}.json")) for name in ("plan", "planned"))
assert plan["choice"]["tensor_parallel"] == 2, plan["choice"]
assert run["tensor_parallel"] == 2 and run["processes"] == 2, (run["tensor_parallel"], run["processes"])
print(f"plan: {plan['choice']['schedule']} T {plan['choice']['tensor_parallel']} m {plan['choice']['micro_batches']}, "
      f"predicted {plan['choice']['step_seconds'] * 1e3:.2f} ms per step; trained: losses {run['losses']}")
PY
  # 8. A choice of more processes than this machine has cores (T = 2 x P = 2 = 4; Open MPI gives a
  #    node a slot per core): the printed line (--oversubscribe where it is needed) starts and
  #    trains as printed.
  "$pipeforge" plan --model gpt --d-model 32 --heads 2 --seq-len 16 --layers 2 --batch-size 8 --quiet --measure \
    --devices 4 --tensor-parallel 2 --ranks 2 --data-parallel 1 --calibration-steps 0 --out "$work/plan4.json" \
    --svg '' --json >"$work/plan4.out" 2>"$work/plan4.err" || { cat "$work/plan4.err"; fail "plan of T = 2 x P = 2"; }
  line=$(field "$work/plan4.out" run_with)
  [[ $line == *"mpirun -np 4 "* ]] || fail "the T = 2 x P = 2 plan prints '$line'"
  bash -c "$line --steps 2 --quiet" >"$work/plan4_run.out" 2>&1 ||
    { cat "$work/plan4_run.out"; fail "the printed line did not run: $line"; }
fi

finish "tensor x pipeline x data mpirun"
