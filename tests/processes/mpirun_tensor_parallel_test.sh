#!/usr/bin/env bash
# `mpirun -np T pipeforge train --tensor-parallel T ...` as a user runs it: the losses of the whole
# model's sequential run within float rounding, each process holding 1/T of the split layers, the
# deterministic reduction reproducible bit for bit, clear errors for a wrong process count or a
# combination not supported yet, and a killed member ending every process.
# (Bitwise equality to a reference that adds the members' partial products in rank order:
# tests/tensor_parallel/tensor_parallel_test.cc.)
set -uo pipefail
source "$(dirname "$0")/cli_checks.sh"

# An MLP 16 -> 32 -> 32 -> 10: fc0 column-parallel, fc1 row-parallel, the head whole.
mlp=(--model mlp --features 16 --hidden 32 --classes 10 --batch-size 16 --microbatches 2 --clip-norm 0.5
  --json --quiet)

# 1. T = 2 and 4 (allreduce), T = 2 twice (deterministic), against the sequential run; AdamW and SGD.
for optimizer in adamw sgd; do
  "$pipeforge" train "${mlp[@]}" --steps 4 --optimizer "$optimizer" >"$work/seq_$optimizer.json" || fail "sequential mlp ($optimizer)"
  for run in "2 allreduce" "4 allreduce" "2 deterministic" "2 deterministic again" "2 deterministic blocking"; do
    read -r t reduction again <<<"$run"
    out="$work/tp${t}_${reduction}${again:+_$again}_$optimizer.json"
    overlap=true
    [[ $again != blocking ]] || overlap=false
    run_mpi "$t" tcp "$pipeforge" train "${mlp[@]}" --steps 4 --optimizer "$optimizer" --tensor-parallel "$t" \
      --tensor-reduction "$reduction" --tensor-parallel-overlap="$overlap" >"$out" 2>"$out.err" ||
      { cat "$out.err"; fail "mpirun -np $t --tensor-parallel $t"; }
  done
  python3 - "$work" "$optimizer" <<'PY' || fail "tensor parallel ($optimizer): losses or memory"
import json, sys
work, optimizer = sys.argv[1], sys.argv[2]
load = lambda name: json.load(open(f"{work}/{name}_{optimizer}.json"))
seq = load("seq")
split = 16 * 32 + 32 + 32 * 32   # fc0's weight and bias, fc1's weight
whole = 32 + 32 * 10 + 10         # fc1's bias, the head
for name, t in [("tp2_allreduce", 2), ("tp4_allreduce", 4), ("tp2_deterministic", 2)]:
    out = load(name)
    assert out["tensor_parallel"] == t and out["processes"] == t, out
    assert out["num_parameters"] == seq["num_parameters"] == split + whole, (out["num_parameters"], seq["num_parameters"])
    for a, b in zip(seq["losses"], out["losses"]):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (name, seq["losses"], out["losses"])
    mem = out["process_memory"]
    assert len(mem) == t, mem
    for m in mem:
        assert m["parameter_bytes"] == 4 * (split // t + whole), (name, m)
        assert m["gradient_bytes"] == m["parameter_bytes"], m
    print(f"{optimizer}, T {t} ({name}): losses {out['losses']} (sequential {seq['losses']}), "
          f"{mem[0]['parameter_bytes']} parameter bytes per process of {4 * (split + whole)}")
a, b = load("tp2_deterministic"), load("tp2_deterministic_again")
assert a["losses"] == b["losses"] and a["param_checksum"] == b["param_checksum"], (a["losses"], b["losses"])
# --tensor-parallel-overlap=false: fc0's input-gradient all-reduce blocks instead of running under W;
# the same bits.
blocking = load("tp2_deterministic_blocking")
assert a["tensor_parallel_overlap"] and not blocking["tensor_parallel_overlap"], (a["tensor_parallel_overlap"], blocking["tensor_parallel_overlap"])
assert a["tensor_parallel_overlapped_bytes_per_step"] > 0 == blocking["tensor_parallel_overlapped_bytes_per_step"], (
    a["tensor_parallel_overlapped_bytes_per_step"], blocking["tensor_parallel_overlapped_bytes_per_step"])
assert a["losses"] == blocking["losses"] and a["param_checksum"] == blocking["param_checksum"], (a["losses"], blocking["losses"])
PY
done

# 1b. The GPT preset at T = 2 (the issue's command): every block's attention split by heads and its
#     MLP as a column / row pair; the token embedding and the head split by the vocabulary (the loss
#     takes the logits split); the positions and the final norm whole.
"$pipeforge" train --model gpt --steps 3 --json --quiet >"$work/seq_gpt.json" || fail "sequential gpt"
run_mpi 2 tcp "$pipeforge" train --model gpt --tensor-parallel 2 --steps 3 --json --quiet >"$work/tp_gpt.json" \
  2>"$work/tp_gpt.err" || { cat "$work/tp_gpt.err"; fail "mpirun -np 2 --model gpt --tensor-parallel 2"; }
python3 - "$work" <<'PY' || fail "tensor parallel gpt: losses or memory"
import json, sys
seq, out = (json.load(open(f"{sys.argv[1]}/{name}.json")) for name in ("seq_gpt", "tp_gpt"))
for a, b in zip(seq["losses"], out["losses"]):
    assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (seq["losses"], out["losses"])
c = out["config"]
V, S, d, L, t = c["vocab"], c["seq_len"], c["d_model"], c["layers"], 2
split = 3 * d * d + 3 * d + d * d + 4 * d * d + 4 * d + 4 * d * d  # qkv, attn.proj's weight, fc, mlp.proj's weight
block_whole = 2 * d + 2 * d + d + d                               # ln1, ln2, the two projections' biases
vocabulary = V * d + d * V + V                                    # token embedding, head (weight, bias)
outside = S * d + 2 * d                                           # positions, ln_f
assert V % t == 0, V
assert out["num_parameters"] == seq["num_parameters"] == L * (split + block_whole) + vocabulary + outside, out["num_parameters"]
for m in out["process_memory"]:
    assert m["parameter_bytes"] == 4 * (L * (split // t + block_whole) + vocabulary // t + outside), m
print(f"gpt, T 2: losses {out['losses']} (sequential {seq['losses']}), "
      f"{out['process_memory'][0]['parameter_bytes']} parameter bytes per process of {4 * seq['num_parameters']}")
PY

# 1c. A checkpoint saved at T = 2 is the whole model's file: it resumes in one process (the model
#     and its options from the checkpoint) where the uninterrupted run goes on, and at T = 2.
"$pipeforge" train "${mlp[@]}" --steps 4 >"$work/seq4.json" || fail "sequential mlp, 4 steps"
run_mpi 2 default "$pipeforge" train "${mlp[@]}" --steps 2 --tensor-parallel 2 --checkpoint "$work/tp.pfck" \
  >"$work/tp_ck.json" 2>"$work/tp_ck.err" || { cat "$work/tp_ck.err"; fail "mpirun -np 2 --tensor-parallel 2 --checkpoint"; }
"$pipeforge" train --resume "$work/tp.pfck" --steps 2 --json --quiet >"$work/resumed1.json" 2>"$work/resumed1.err" ||
  { cat "$work/resumed1.err"; fail "--resume of a T = 2 checkpoint in one process"; }
run_mpi 2 default "$pipeforge" train --resume "$work/tp.pfck" --steps 2 --tensor-parallel 2 --json --quiet \
  >"$work/resumed2.json" 2>"$work/resumed2.err" || { cat "$work/resumed2.err"; fail "--resume of a T = 2 checkpoint at T = 2"; }
python3 - "$work" <<'PY' || fail "a T = 2 checkpoint did not resume where the run goes on"
import json, sys
load = lambda name: json.load(open(f"{sys.argv[1]}/{name}.json"))
seq, one, two = load("seq4"), load("resumed1"), load("resumed2")
print("steps 3-4: uninterrupted", seq["losses"][2:], "resumed in one process", one["losses"],
      "resumed at T = 2", two["losses"])
for resumed in (one, two):
    assert len(resumed["losses"]) == 2, resumed["losses"]
    for a, b in zip(seq["losses"][2:], resumed["losses"]):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (seq["losses"], resumed["losses"])
assert one["num_parameters"] == seq["num_parameters"]
PY

# 2. A process count that is not T, and replicas without a schedule: clear errors, no hang.
run_mpi 3 default "$pipeforge" train "${mlp[@]}" --steps 1 --tensor-parallel 2 >"$work/three.out" 2>&1 &&
  fail "3 processes for --tensor-parallel 2 succeeded"
grep -q "tensor-parallel 2 needs 2 processes under mpirun (3 processes)" "$work/three.out" ||
  { cat "$work/three.out"; fail "no message for 3 processes / --tensor-parallel 2"; }
run_mpi 4 default "$pipeforge" train "${mlp[@]}" --steps 1 --tensor-parallel 2 --data-parallel 2 >"$work/dp.out" 2>&1 &&
  fail "--tensor-parallel 2 --data-parallel 2 without a schedule succeeded"
grep -q -- "--tensor-parallel 2 with --data-parallel 2 runs under a pipeline schedule (--schedule)" "$work/dp.out" ||
  { cat "$work/dp.out"; fail "no message for --tensor-parallel 2 --data-parallel 2 without a schedule"; }

# 3. Kill member 1 mid-run: every process ends, mpirun exits non-zero naming the rank.
run_mpi 2 tcp "$pipeforge" train --model mlp --tensor-parallel 2 --steps 1000000 --quiet >"$work/kill.out" 2>&1 &
kill_rank_and_check $! "pipeforge train --model mlp --tensor-parallel 2 --steps 1000000" 1 "$work/kill.out"

finish "tensor-parallel mpirun"
