#!/usr/bin/env bash
# Tensor parallelism's first benchmark (issue 37, item 9): a GPT of d_model 512 trained by
# `pipeforge train` (-c opt) in one process and as T = 2 processes (mpirun -np 2 --tensor-parallel
# 2, loopback TCP and shared memory), each process one BLAS thread; also one process with 2 BLAS
# threads, the same two cores used the other way. Prints one JSON object: tokens/s of each, the
# speed-ups, the losses' largest relative difference, the bytes each member all-reduced per step
# against the formula, and the planner's predicted step time over the measured one (its sequential
# candidates at T = 1 and 2). The formula: per block 2 forward and 2 backward all-reduces of
# [tokens, d_model] floats, and (T dividing the vocabulary) one each for the vocabulary-parallel
# embedding and head: (4 x layers + 2) x tokens x d_model x 4 bytes. Also T = 2 with
# --sequence-parallel (shared memory): its speed-up, its reduce-scattered bytes against the same
# formula, the activation bytes per process; the bytes of B's all-reduces that overlapped W; and
# the overlap's share: alternating A/B pairs with and without it (--tensor-parallel-overlap=false).
# Extra arguments go to every run (e.g. --steps 20). Run it on an idle machine: the figures are
# wall-clock.
set -euo pipefail
cd "$(dirname "$0")/../.."
bazel build -c opt //:pipeforge >&2
bin=$(pwd)/bazel-bin/pipeforge
source tests/util/mpirun.sh
work=$(mktemp -d)
trap 'rm -rf "$work"; pf_mpi_cleanup' EXIT
common=(train --model gpt --d-model 512 --heads 8 --layers 2 --seq-len 64 --batch-size 8 --microbatches 1
  --steps 12 --json --quiet "$@")
"$bin" "${common[@]}" --blas-threads 1 >"$work/one.json"
"$bin" "${common[@]}" --blas-threads 2 >"$work/one_2threads.json"
run_mpi 2 default "$bin" "${common[@]}" --tensor-parallel 2 >"$work/tp_shm.json"
run_mpi 2 tcp "$bin" "${common[@]}" --tensor-parallel 2 >"$work/tp_tcp.json"
run_mpi 2 default "$bin" "${common[@]}" --tensor-parallel 2 --sequence-parallel >"$work/tp_sp_shm.json"
# The overlap's share, A/B in alternating pairs (the machine drifts): T = 2 with B's collective
# under W (the default) and blocking (--tensor-parallel-overlap=false), with and without sequence
# parallelism.
for i in 1 2 3; do
  for sp in "" "--sequence-parallel"; do
    tag=${sp:+_sp}
    run_mpi 2 default "$bin" "${common[@]}" --tensor-parallel 2 $sp >"$work/ab${tag}_overlap_$i.json"
    run_mpi 2 default "$bin" "${common[@]}" --tensor-parallel 2 $sp --tensor-parallel-overlap=false \
      >"$work/ab${tag}_blocking_$i.json"
  done
done
# What the planner predicts for the same runs (this machine measured: a device per core).
"$bin" plan --model gpt --d-model 512 --heads 8 --layers 2 --seq-len 64 --batch-size 8 --measure --devices 2 \
  --tensor-parallel 1,2 --data-parallel 1 --schedules sequential --json --top 1000 >"$work/plan.json"
python3 - "$work" <<'PY'
import json, sys
work = sys.argv[1]
r = {name: json.load(open(f"{work}/{name}.json")) for name in ("one", "one_2threads", "tp_shm", "tp_tcp", "tp_sp_shm")}
plan = json.load(open(f"{work}/plan.json"))
def predicted(T):  # tokens/s of the sequential candidate at T with the runs' one micro-batch
    for c in plan["candidates"]:
        if c["tensor_parallel"] == T and c["data_parallel"] == 1 and c["micro_batches"] == 1:
            return c["tokens_per_second"]
    return None
# tokens_per_s: the report's, over the whole run (what a user sees).
c = r["one"]["config"]
tokens = r["one"]["batch_size"] * c["seq_len"]
vocabulary = 2 if c["vocab"] % 2 == 0 else 0  # the embedding's forward, the head's backward
formula = (4 * c["layers"] + vocabulary) * tokens * c["d_model"] * 4  # bytes per step per member
out = {
    "model": {"d_model": c["d_model"], "heads": c["heads"], "layers": c["layers"], "seq_len": c["seq_len"],
              "vocab": c["vocab"], "batch_size": r["one"]["batch_size"], "steps": r["one"]["steps_run"]},
    "tokens_per_s": {k: v["tokens_per_s"] for k, v in r.items()},
    "speedup_tp2_over_one_process": {k: r[k]["tokens_per_s"] / r["one"]["tokens_per_s"]
                                     for k in ("tp_shm", "tp_tcp", "tp_sp_shm")},
    "speedup_tp2_over_one_process_2_blas_threads":
        {k: r[k]["tokens_per_s"] / r["one_2threads"]["tokens_per_s"] for k in ("tp_shm", "tp_tcp")},
    "max_relative_loss_difference": max(abs(a - b) / abs(a) for k in ("tp_shm", "tp_tcp")
                                        for a, b in zip(r["one"]["losses"], r[k]["losses"])),
    "max_relative_loss_difference_sequence_parallel": max(abs(a - b) / abs(a) for a, b in
                                                          zip(r["one"]["losses"], r["tp_sp_shm"]["losses"])),
    "tensor_parallel_bytes_per_step": {"measured": r["tp_shm"]["tensor_parallel_bytes_per_step"], "formula": formula},
    # Of those, B's all-reduces that ran while W computed: (2 per block + the head) x tokens x d x 4.
    "overlapped_bytes_per_step": {"measured": r["tp_shm"]["tensor_parallel_overlapped_bytes_per_step"],
                                  "formula": (2 * c["layers"] + (1 if vocabulary else 0)) * tokens * c["d_model"] * 4},
    # Sequence parallelism reduce-scatters the same partials: the same formula.
    "sequence_parallel_reduce_scattered_bytes_per_step": {
        "measured": r["tp_sp_shm"]["tensor_parallel_reduce_scattered_bytes_per_step"], "formula": formula},
    "peak_activation_bytes_per_process": {k: max(r[k]["peak_activation_bytes"])
                                          for k in ("one", "tp_shm", "tp_sp_shm")},
    "parameter_bytes_per_process": {"one": r["one"]["process_memory"][0]["parameter_bytes"],
                                    "tp2": [m["parameter_bytes"] for m in r["tp_shm"]["process_memory"]]},
    # The planner's predicted step time over the measured one (= measured tokens/s over predicted).
    "predicted_over_measured_step_time": {
        "one": r["one"]["tokens_per_s"] / predicted(1) if predicted(1) else None,
        "tp_shm": r["tp_shm"]["tokens_per_s"] / predicted(2) if predicted(2) else None},
}
# The A/B pairs: tokens/s with the overlap over tokens/s blocking, per pair, and their median; the
# losses must be the same bits (the overlap changes no arithmetic).
def pairs(tag):
    runs = [(json.load(open(f"{work}/ab{tag}_overlap_{i}.json")), json.load(open(f"{work}/ab{tag}_blocking_{i}.json")))
            for i in (1, 2, 3)]
    ratios = sorted(o["tokens_per_s"] / b["tokens_per_s"] for o, b in runs)
    return {"overlapped_tokens_per_s": [o["tokens_per_s"] for o, _ in runs],
            "blocking_tokens_per_s": [b["tokens_per_s"] for _, b in runs],
            "overlapped_over_blocking": ratios, "median": ratios[1],
            "overlapped_bytes_per_step": [o["tensor_parallel_overlapped_bytes_per_step"] for o, _ in runs][0],
            "blocking_overlapped_bytes_per_step": [b["tensor_parallel_overlapped_bytes_per_step"] for _, b in runs][0],
            "same_losses": all(o["losses"] == b["losses"] for o, b in runs)}
out["overlap_ab"] = {"tp_shm": pairs(""), "tp_sp_shm": pairs("_sp")}
print(json.dumps(out))
PY
