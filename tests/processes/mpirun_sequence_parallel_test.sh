#!/usr/bin/env bash
# Sequence parallelism as a user launches it: `mpirun -np T*P pipeforge train --model gpt
# --tensor-parallel T --sequence-parallel [--schedule S --stages P]`. Within float rounding of the
# one-process run; in the deterministic reduction every synchronous schedule trains bit for bit like
# the sequence-parallel split model in the sequential trainer; each pipeline message is the
# member's own steps (1/T of the unsplit message, no header); the activations each process keeps
# fall; what cannot split by steps is refused naming the option.
set -uo pipefail
source "$(dirname "$0")/cli_checks.sh"

# Under a sanitizer (PF_SANITIZER_PRELOAD, tools/sanitize.sh; each launch is slow there) the
# launches marked so are left out: the others run the same code paths.
sanitized() { [[ -n ${PF_SANITIZER_PRELOAD:-} ]]; }
gpt=(--model gpt --steps 2 --microbatches 4 --json --quiet)
det=(--tensor-reduction deterministic)

# 1. The issue's command: T = 2 with sequence parallelism, within 1e-5 of one process; the
#    activations each member keeps below those of T = 2 without it.
#    Under a sanitizer the sequence-parallel run alone, its bytes against the formula (the run
#    without it and the one-process run are other tests' there).
if ! sanitized; then
  "$pipeforge" train "${gpt[@]}" >"$work/one.json" 2>"$work/err" || { cat "$work/err"; fail "gpt, one process"; }
  run_mpi 2 default "$pipeforge" train "${gpt[@]}" --tensor-parallel 2 >"$work/t2.json" 2>"$work/err" ||
    { cat "$work/err"; fail "gpt, T 2"; }
fi
run_mpi 2 default "$pipeforge" train "${gpt[@]}" --tensor-parallel 2 --sequence-parallel >"$work/sp.json" 2>"$work/err" ||
  { cat "$work/err"; fail "gpt, T 2, sequence-parallel"; }
python3 - "$work" <<'PY' || fail "gpt, T 2, sequence-parallel: losses, activation memory or bytes"
import json, os, sys
load = lambda name: json.load(open(f"{sys.argv[1]}/{name}.json"))
sp = load("sp")
assert sp["sequence_parallel"] is True, sp["sequence_parallel"]
alone = not os.path.exists(f"{sys.argv[1]}/t2.json")  # under a sanitizer
one, t2 = (sp, sp) if alone else (load("one"), load("t2"))
assert t2 is sp or t2["sequence_parallel"] is False, t2["sequence_parallel"]
for a, b in zip(one["losses"], sp["losses"]):
    assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (one["losses"], sp["losses"])
assert alone or max(sp["peak_activation_bytes"]) < max(t2["peak_activation_bytes"]), (sp["peak_activation_bytes"], t2["peak_activation_bytes"])
# Bytes per step per member. Megatron's exchange: where T = 2 all-reduces [tokens, d] (per block two
# in forward and two in backward, one each for the embedding and the head), sequence parallelism
# reduce-scatters the same [tokens, d] partials and all-gathers [tokens / 2, d] steps; what it
# still all-reduces is the norms' weight gradients, (2 per block + the final one) x 2 x d floats
# per micro-batch.
c, m, T = sp["config"], sp["micro_batches"], 2
tokens, d, L = sp["batch_size"] * c["seq_len"], c["d_model"], c["layers"]
exchanged = (4 * L + 2) * tokens * d * 4
assert alone or t2["tensor_parallel_bytes_per_step"] == exchanged, (t2["tensor_parallel_bytes_per_step"], exchanged)
assert sp["tensor_parallel_reduce_scattered_bytes_per_step"] == exchanged, sp["tensor_parallel_reduce_scattered_bytes_per_step"]
assert sp["tensor_parallel_gathered_bytes_per_step"] >= exchanged // T, sp["tensor_parallel_gathered_bytes_per_step"]
assert sp["tensor_parallel_bytes_per_step"] == m * (2 * L + 1) * 2 * d * 4, sp["tensor_parallel_bytes_per_step"]
# B's reduce-scatters of the input gradients (per block fc's and qkv's, and the head's) overlap W.
assert sp["tensor_parallel_overlapped_bytes_per_step"] == exchanged // 2, sp["tensor_parallel_overlapped_bytes_per_step"]
print(f"gpt T 2 sequence-parallel: losses {sp['losses']} (one process {one['losses']}); activation bytes per "
      f"process {sp['peak_activation_bytes']} (T 2 without: {t2['peak_activation_bytes']}); reduce-scattered "
      f"{exchanged} bytes per step (= the all-reduced bytes without it)")
PY

# 2. T = 2, P = 2, deterministic, against the sequence-parallel T = 2 sequential run: bit for bit
#    under each schedule family here (under a sanitizer: 1f1b); each rank sends its own steps, half
#    of what an unsplit P = 2 rank sends (not compared under a sanitizer).
schedules=(1f1b zb-h1 interleaved-1f1b zb-v gpipe)
! sanitized || schedules=(1f1b)
run_mpi 2 default "$pipeforge" train "${gpt[@]}" "${det[@]}" --tensor-parallel 2 --sequence-parallel \
  >"$work/sp_det.json" 2>"$work/err" || { cat "$work/err"; fail "gpt, T 2, sequence-parallel, deterministic"; }
if ! sanitized; then
  run_mpi 2 default "$pipeforge" train "${gpt[@]}" --schedule 1f1b --stages 2 >"$work/p2.json" 2>"$work/err" ||
    { cat "$work/err"; fail "gpt, P 2"; }
fi
for schedule in "${schedules[@]}"; do
  run_mpi 4 default "$pipeforge" train "${gpt[@]}" "${det[@]}" --tensor-parallel 2 --sequence-parallel \
    --schedule "$schedule" --stages 2 >"$work/sp_$schedule.json" 2>"$work/err" ||
    { cat "$work/err"; fail "gpt, T 2 x P 2, sequence-parallel, $schedule"; continue; }
  python3 - "$work" "$schedule" <<'PY' || fail "gpt, T 2 x P 2, sequence-parallel, $2: not the sequential run, or bytes"
import json, os, sys
work, schedule = sys.argv[1], sys.argv[2]
load = lambda name: json.load(open(f"{work}/{name}.json"))
seq, pipe = load("sp_det"), load(f"sp_{schedule}")
assert pipe["losses"] == seq["losses"], (schedule, pipe["losses"], seq["losses"])
assert pipe["param_checksum"] == seq["param_checksum"], schedule
sent = [r["sent_bytes_per_step"] for r in pipe["ranks"]]
unsplit = [r["sent_bytes_per_step"] for r in load("p2")["ranks"]] if os.path.exists(f"{work}/p2.json") else None
if schedule == "1f1b" and unsplit:
    assert sent == [b // 2 for b in unsplit], (sent, unsplit)
print(f"gpt T 2 x P 2 {schedule}, sequence-parallel: losses {pipe['losses']} = sequential; bytes per rank {sent} "
      f"(unsplit P 2: {unsplit})")
PY
done

# 3. Refused, naming the option: without tensor parallelism, a model that does not start from
#    tokens (sequence slices need ranks as threads, which tensor parallelism with a schedule
#    refuses already).
"$pipeforge" train "${gpt[@]}" --sequence-parallel >"$work/t1.out" 2>&1 && fail "--sequence-parallel at T 1 succeeded"
grep -q -- "--sequence-parallel splits the activations across the tensor-parallel group; it needs --tensor-parallel > 1" \
  "$work/t1.out" || { cat "$work/t1.out"; fail "no message for --sequence-parallel at T 1"; }
run_mpi 2 default "$pipeforge" train --model mlp --steps 1 --tensor-parallel 2 --sequence-parallel >"$work/mlp.out" 2>&1 &&
  fail "--sequence-parallel with the mlp succeeded"
grep -q "sequence parallelism: the first layer must be a vocabulary-parallel token embedding" "$work/mlp.out" ||
  { cat "$work/mlp.out"; fail "no message for --sequence-parallel with the mlp"; }

finish "sequence-parallel mpirun"
