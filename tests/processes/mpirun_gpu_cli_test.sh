#!/usr/bin/env bash
# `mpirun -np 2 pipeforge train --devices cuda --stages 2`: one GPU per process (docs/CUDA.md, "GPU
# ranks in separate processes"). Without two GPUs (here) each process names the device its
# node-local rank asked for (the resolver's refusal; the capability table no longer refuses CUDA
# ranks in processes); with two or more (nvidia-smi) the run's losses and parameter checksum are
# those of the one-process run on cuda:0,cuda:1. Anywhere, one entry other than `cuda` is refused
# naming the rule. `mpirun -np 2 ... --tensor-parallel 2 --devices cuda`: with a GPU it trains the
# GPT to the CPU's losses; without one each member names its node-local rank's GPU.
set -uo pipefail
source "$(dirname "$0")/cli_checks.sh"

args=(train --model gpt --layers 2 --schedule 1f1b --stages 2 --microbatches 4 --steps 3 --json --quiet)
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if ((gpus >= 2)); then
  "$pipeforge" "${args[@]}" --devices cuda:0,cuda:1 >"$work/one.json" || fail "one process on cuda:0,cuda:1"
  run_mpi 2 default "$pipeforge" "${args[@]}" --devices cuda >"$work/two.json" 2>"$work/two.err" ||
    { cat "$work/two.err"; fail "mpirun -np 2 --devices cuda"; }
  for key in losses param_checksum; do
    [[ "$(field "$work/one.json" "$key")" == "$(field "$work/two.json" "$key")" ]] ||
      fail "$key: 2 processes $(field "$work/two.json" "$key"), one process $(field "$work/one.json" "$key")"
  done
else
  echo "$gpus GPU(s): checking the refusals only"
  run_mpi 2 default "$pipeforge" "${args[@]}" --devices cuda >"$work/cuda.out" 2>&1 &&
    fail "--devices cuda under mpirun succeeded without two GPUs"
  for r in 0 1; do
    grep -q -- "--devices (rank $r, MPI rank $r of 2 .*): cuda:$r is not available" "$work/cuda.out" ||
      { cat "$work/cuda.out"; fail "rank $r did not name cuda:$r"; }
  done
  ! grep -q "one process per rank yet" "$work/cuda.out" || fail "refused by the capability table"
fi
# Tensor parallelism on CUDA (docs/EXECUTION.md, "Tensor parallelism on CUDA devices"): with a GPU,
# T = 2 processes (sharing it when there is one) train the GPT to the CPU's losses within 1e-4.
if ((gpus >= 1)); then
  tp=(train --model gpt --layers 2 --microbatches 2 --steps 3 --json --quiet)
  "$pipeforge" "${tp[@]}" >"$work/tp_cpu.json" || fail "the GPT on the CPU"
  for extra in "" "--sequence-parallel"; do
    # shellcheck disable=SC2086
    run_mpi 2 default "$pipeforge" "${tp[@]}" --tensor-parallel 2 --devices cuda $extra >"$work/tp_gpu.json" \
      2>"$work/tp_gpu.err" || { cat "$work/tp_gpu.err"; fail "mpirun -np 2 --tensor-parallel 2 --devices cuda $extra"; }
    python3 - "$work/tp_cpu.json" "$work/tp_gpu.json" <<'PY' || fail "tensor parallel on CUDA $extra: losses"
import json, sys
cpu, gpu = (json.load(open(p)) for p in sys.argv[1:])
assert gpu["tensor_parallel"] == 2, gpu
for a, b in zip(cpu["losses"], gpu["losses"]):
    assert abs(a - b) <= 1e-4 * max(1.0, abs(a)), (cpu["losses"], gpu["losses"])
PY
  done
else  # each member names the GPU its node-local rank asked for, or the one named for it
  for devices in cuda cuda:0,cuda:1; do
    run_mpi 2 default "$pipeforge" train --model gpt --layers 2 --steps 1 --tensor-parallel 2 --devices "$devices" \
      >"$work/tp_cuda.out" 2>&1 && fail "--tensor-parallel 2 --devices $devices succeeded without a GPU"
    for r in 0 1; do
      grep -q -- "--devices (tensor-parallel member $r, MPI rank $r of 2 .*): cuda:$r is not available" \
        "$work/tp_cuda.out" || { cat "$work/tp_cuda.out"; fail "--devices $devices: member $r did not name cuda:$r"; }
    done
  done
fi
run_mpi 2 default "$pipeforge" "${args[@]}" --devices cuda:1 >"$work/entry.out" 2>&1 && fail "--devices cuda:1 succeeded"
grep -q -- "--devices names cuda:1: with one process per rank a single entry is \`cuda\`" "$work/entry.out" ||
  { cat "$work/entry.out"; fail "--devices cuda:1 was not refused by the single-entry rule"; }
finish "mpirun GPU CLI"
