#!/usr/bin/env bash
# Checkpoints across processes with `pipeforge train` under mpirun: each process writes its shard,
# the manifest comes last; a run resumed under another pipeline degree, schedule, data-parallel
# degree or in one process is bitwise equal to one that never stopped; a missing or damaged shard
# is refused naming it, and so is a shard through a symbolic link or a parameter the model lacks.
# Ctrl-C on mpirun stops every process at the same step with the checkpoint written.
set -uo pipefail
source "$(dirname "$0")/cli_checks.sh"
# The micro-batches are given: the default depends on the pipeline ranks, which these runs change.
gpt=(--model gpt --layers 4 --microbatches 4 --json --quiet)

# 1. 4 steps in one go, sequentially: the reference.
"$pipeforge" train "${gpt[@]}" --steps 4 >"$work/straight.json" || fail "sequential 4 steps"
want=$(field "$work/straight.json" param_checksum)

# 2. 2 steps on 4 processes (1F1B), checkpointed: 4 shards and a manifest.
run_mpi 4 default "$pipeforge" train "${gpt[@]}" --schedule 1f1b --stages 4 --steps 2 --checkpoint "$work/ck" \
  >"$work/first.json" 2>"$work/first.err" || { cat "$work/first.err"; fail "save on 4 processes"; }
shards=$(ls "$work/ck" | grep -c '\.pfck$')
[[ -f $work/ck/manifest.json && $shards == 4 ]] || { ls -l "$work/ck"; fail "expected a manifest and 4 shards"; }

# 3. Resumed on 2 processes with another schedule (ZB-H1), over TCP, and in one process.
run_mpi 2 tcp "$pipeforge" train "${gpt[@]}" --schedule zb-h1 --stages 2 --steps 2 --resume "$work/ck" \
  >"$work/resumed2.json" 2>"$work/resumed2.err" || { cat "$work/resumed2.err"; fail "resume on 2 processes"; }
"$pipeforge" train "${gpt[@]}" --steps 2 --resume "$work/ck" >"$work/resumed1.json" || fail "resume in one process"
# Without the model options: the model the shards were saved with (it was a shape error naming no flag).
"$pipeforge" train --microbatches 4 --json --quiet --steps 2 --resume "$work/ck" >"$work/resumed_bare.json" ||
  fail "resume with --resume alone"
for f in resumed2 resumed1 resumed_bare; do
  got=$(field "$work/$f.json" param_checksum)
  echo "$f: $got (straight: $want)"
  [[ -n $want && $got == "$want" ]] || fail "$f: checksum $got, the run that never stopped $want"
  [[ $(field "$work/$f.json" steps) == 4 ]] || fail "$f: not at step 4"
done

# 4. A single-file checkpoint resumed on 4 processes.
"$pipeforge" train "${gpt[@]}" --steps 2 --checkpoint "$work/one.pfck" >/dev/null || fail "single-file save"
run_mpi 4 default "$pipeforge" train "${gpt[@]}" --schedule gpipe --stages 4 --steps 2 --resume "$work/one.pfck" \
  >"$work/from_file.json" 2>"$work/from_file.err" || { cat "$work/from_file.err"; fail "file -> 4 processes"; }
[[ $(field "$work/from_file.json" param_checksum) == "$want" ]] || fail "single file resumed on 4 processes"

# 5. Data parallel: replica 0 writes the shards; resumed in one process as 2 replicas.
"$pipeforge" train "${gpt[@]}" --data-parallel 2 --steps 4 >"$work/dp_straight.json" || fail "sequential dp"
run_mpi 4 default "$pipeforge" train "${gpt[@]}" --schedule 1f1b --stages 2 --data-parallel 2 \
  --gradient-reduction deterministic --steps 2 --checkpoint "$work/dp" >/dev/null 2>"$work/dp.err" ||
  { cat "$work/dp.err"; fail "dp save"; }
[[ $(ls "$work/dp" | grep -c '\.pfck$') == 2 ]] || fail "data parallel: expected 2 shards"
"$pipeforge" train "${gpt[@]}" --data-parallel 2 --steps 2 --resume "$work/dp" >"$work/dp_resumed.json" ||
  fail "dp resume"
[[ $(field "$work/dp_resumed.json" param_checksum) == $(field "$work/dp_straight.json" param_checksum) ]] ||
  fail "data parallel resumed differs from the run that never stopped"

# 6. The training loop on 2 processes: evaluation, a cosine rate, periodic sharded checkpoints
#    (step-N/ folders, the newest 2 kept) and the metrics log; a run killed after its step-4
#    checkpoint and resumed from the folder ends with the threaded run's checksum and evaluations.
loop=(--model mlp --schedule 1f1b --stages 2 --microbatches 2 --batch-size 8 --lr-schedule cosine --decay-steps 6
  --eval-every 2 --eval-batches 4 --checkpoint-every 2 --keep-checkpoints 2 --json --quiet)
"$pipeforge" train "${loop[@]}" --steps 6 --checkpoint-dir "$work/loop_threads" >"$work/loop_threads.json" ||
  fail "training loop, threads"
run_mpi 2 default "$pipeforge" train "${loop[@]}" --steps 4 --checkpoint-dir "$work/loop" \
  --metrics-log "$work/loop.jsonl" >"$work/loop_first.json" 2>"$work/loop.err" || { cat "$work/loop.err"; fail "loop, first half"; }
[[ -f $work/loop/step-00000004/manifest.json && -d $work/loop/step-00000002 ]] || fail "loop: no sharded step folders"
run_mpi 2 default "$pipeforge" train "${loop[@]}" --steps 2 --checkpoint-dir "$work/loop" --resume "$work/loop" \
  --metrics-log "$work/loop.jsonl" >"$work/loop_rest.json" 2>"$work/loop.err" || { cat "$work/loop.err"; fail "loop, resumed"; }
[[ ! -d $work/loop/step-00000002 && -d $work/loop/step-00000006 ]] || fail "loop: the newest 2 checkpoints are not what is kept"
[[ $(field "$work/loop_rest.json" param_checksum) == $(field "$work/loop_threads.json" param_checksum) ]] ||
  fail "training loop resumed on 2 processes differs from the threaded run"
python3 - "$work/loop_threads.json" "$work/loop_first.json" "$work/loop_rest.json" "$work/loop.jsonl" <<'PY' || fail "loop evaluations"
import json, sys
threads, first, rest = (json.load(open(f)) for f in sys.argv[1:4])
assert threads["evaluations"] == first["evaluations"] + rest["evaluations"], (threads["evaluations"], first, rest)
steps = [json.loads(line)["step"] for line in open(sys.argv[4])]
assert steps == [1, 2, 3, 4, 5, 6], steps
print("evaluations (threads = 2 processes, resumed):", threads["evaluations"])
PY

# 8. --adapt with --checkpoint on 2 processes: the adaptive trainer (rank 1 slowed 4x, so the
#    layers move at step 3; patience 2) saves a sharded folder like the fixed pipeline does, and a run resumed
#    from it, on 2 processes with --adapt and in one process, ends with the checksum of the
#    sequential run that never stopped.
adapt=(--model gpt --layers 4 --batch-size 8 --microbatches 4 --json --quiet)
"$pipeforge" train "${adapt[@]}" --steps 8 >"$work/adapt_straight.json" || fail "sequential gpt, 8 steps"
run_mpi 2 default "$pipeforge" train "${adapt[@]}" --steps 4 --schedule 1f1b --stages 2 --adapt --adapt-patience 2 --slow-rank 1 \
  --slow-factor 4 --checkpoint "$work/adapt_ck" >"$work/adapt_first.json" 2>"$work/adapt_first.err" ||
  { cat "$work/adapt_first.err"; fail "--adapt --checkpoint on 2 processes"; }
[[ -f $work/adapt_ck/manifest.json && $(ls "$work/adapt_ck" | grep -c '\.pfck$') == 2 ]] ||
  { ls -l "$work/adapt_ck"; fail "--adapt --checkpoint: expected a manifest and 2 shards"; }
python3 -c "import json,sys; assert json.load(open(sys.argv[1]))['adaptations'], 'no move'" "$work/adapt_first.json" ||
  fail "--adapt --checkpoint: the partition did not move before the save"
run_mpi 2 default "$pipeforge" train "${adapt[@]}" --steps 4 --schedule 1f1b --stages 2 --adapt --adapt-patience 2 --slow-rank 1 \
  --slow-factor 4 --resume "$work/adapt_ck" >"$work/adapt_resumed2.json" 2>"$work/adapt_resumed2.err" ||
  { cat "$work/adapt_resumed2.err"; fail "--adapt resumed on 2 processes"; }
"$pipeforge" train "${adapt[@]}" --steps 4 --resume "$work/adapt_ck" >"$work/adapt_resumed1.json" ||
  fail "--adapt checkpoint resumed in one process"
want=$(field "$work/adapt_straight.json" param_checksum)
for f in adapt_resumed2 adapt_resumed1; do
  got=$(field "$work/$f.json" param_checksum)
  echo "$f: $got (straight: $want)"
  [[ -n $want && $got == "$want" ]] || fail "$f: checksum $got, the run that never stopped $want"
  [[ $(field "$work/$f.json" steps) == 8 ]] || fail "$f: not at step 8"
done

# 9. A save that fails on one rank (its file size limited to 64 KiB, so its shard cannot be
#    written) over a checkpoint of the same step leaves that checkpoint whole: it resumes like an
#    untouched copy, and the failed save's shards are gone.
keep=(--model gpt --layers 4 --schedule 1f1b --stages 2 --steps 2 --json --quiet)
run_mpi 2 default "$pipeforge" train "${keep[@]}" --checkpoint "$work/keep" >/dev/null 2>"$work/keep.err" ||
  { cat "$work/keep.err"; fail "the checkpoint to keep"; }
cp -r "$work/keep" "$work/keep_copy"
limited() {  # rank 1 of the launch cannot write files over 64 KiB (SIGXFSZ ignored: writes fail with EFBIG)
  bash -c 'trap "" XFSZ; if [[ ${OMPI_COMM_WORLD_RANK:-0} == 1 ]]; then ulimit -f 64; fi; exec "$0" "$@"' "$@"
}
if run_mpi 2 default bash -c "$(declare -f limited); limited \"\$@\"" _ "$pipeforge" train "${keep[@]}" --lr 0.01 \
  --checkpoint "$work/keep" >/dev/null 2>"$work/failed_save.err"; then
  fail "a save with a rank that cannot write its shard succeeded"
fi
grep -q "writing the shards" "$work/failed_save.err" || { cat "$work/failed_save.err"; fail "the failed save does not say what failed"; }
[[ $(ls "$work/keep" | grep -c '\.pfck$') == 2 ]] || { ls -l "$work/keep"; fail "the failed save left shards behind"; }
cmp -s "$work/keep/manifest.json" "$work/keep_copy/manifest.json" || fail "the failed save changed the manifest"
run_mpi 2 default "$pipeforge" train "${keep[@]}" --resume "$work/keep" >"$work/kept.json" 2>"$work/kept.err" ||
  { cat "$work/kept.err"; fail "resuming the checkpoint a failed save left"; }
run_mpi 2 default "$pipeforge" train "${keep[@]}" --resume "$work/keep_copy" >"$work/copy.json" 2>/dev/null ||
  fail "resuming the copy"
[[ -n $(field "$work/kept.json" param_checksum) &&
   $(field "$work/kept.json" param_checksum) == $(field "$work/copy.json" param_checksum) ]] ||
  fail "the checkpoint a failed save left resumes differently from its untouched copy"

# 7. Damage: a missing shard, a corrupted shard, a broken manifest: refused naming them, no hang.
expect_refusal() {  # name, pattern, folder
  local out=$work/refusal.out
  if timeout 120 bash -c "source '$(dirname "$0")/../util/mpirun.sh'; run_mpi 2 default '$pipeforge' train --model gpt --layers 4 --quiet --schedule 1f1b --stages 2 --steps 1 --resume '$3'" >"$out" 2>&1; then
    fail "$1: resumed from a damaged checkpoint"
  elif ! grep -q -- "$2" "$out"; then
    cat "$out"
    fail "$1: the error does not name $2"
  fi
}
cp -r "$work/ck" "$work/missing" && rm "$work/missing"/step-2.rank-1.*.pfck
expect_refusal "missing shard" "step-2.rank-1\.[0-9a-f]*\.pfck" "$work/missing"
cp -r "$work/ck" "$work/corrupt" && corrupt=$(ls "$work/corrupt"/step-2.rank-3.*.pfck) &&
  printf 'X' | dd of="$corrupt" bs=1 seek=5000 conv=notrunc 2>/dev/null
expect_refusal "corrupt shard" "step-2.rank-3\.[0-9a-f]*\.pfck" "$work/corrupt"
cp -r "$work/ck" "$work/manifest" && printf '{"format": 1' >"$work/manifest/manifest.json"
expect_refusal "broken manifest" "manifest.json" "$work/manifest"
# A shard that is a symbolic link (here to its own bytes moved out of the folder) is not followed,
# and a manifest listing a parameter the model lacks (in a shard no process needs) is refused, as
# the single-file loader refuses one; both resumed before.
cp -r "$work/ck" "$work/linked" && shard=$(ls "$work/linked"/step-2.rank-0.*.pfck) &&
  mv "$shard" "$work/outside.pfck" && ln -s "$work/outside.pfck" "$shard"
expect_refusal "shard through a symbolic link" "step-2.rank-0\.[0-9a-f]*\.pfck' is a symbolic link" "$work/linked"
cp -r "$work/ck" "$work/extra" && python3 - "$work/extra/manifest.json" <<'PY'
import json, sys
m = json.load(open(sys.argv[1]))
m["shards"].append({"file": "step-2.rank-9.0123456789abcdef.pfck", "sha256": "0" * 64, "parameters": ["evil.weight"]})
json.dump(m, open(sys.argv[1], "w"))
PY
expect_refusal "extra parameter" "holds parameter 'evil.weight', which does not exist in this model" "$work/extra"

# 8. Ctrl-C on mpirun (Open MPI passes it on to the processes as SIGTERM): every process stops
#    after the same step and the sharded checkpoint of that step is written; it resumes in one
#    process bitwise as the run that never stopped (it saved nothing before: exit 130, steps lost).
long=(--model mlp --batch-size 8 --microbatches 2 --seed 4 --lr 0.01 --quiet)
# env --default-signal: mpirun gets SIGINT as from a terminal (a background command of a script
# starts with it ignored, which mpirun respects); run_mpi's options, spelled out.
env --default-signal=INT,TERM mpirun -np 2 --oversubscribe --bind-to none "$pipeforge" train "${long[@]}" --schedule 1f1b --stages 2 --steps 100000000 \
  --checkpoint "$work/int" --metrics-log "$work/int.log" >"$work/int.out" 2>"$work/int.err" &
mpirun_pid=$!
for _ in $(seq 1200); do [[ -s $work/int.log ]] && break; sleep 0.05; done
kill -INT $mpirun_pid
# Bounded: a run that ignored the signal is ended after 120 s, and that is a failure.
for _ in $(seq 1200); do kill -0 $mpirun_pid 2>/dev/null || break; sleep 0.1; done
kill -0 $mpirun_pid 2>/dev/null && { fail "mpirun still runs 120 s after Ctrl-C"; kill -KILL $mpirun_pid; }
wait $mpirun_pid && fail "mpirun exited 0 after Ctrl-C"
cat "$work/int.err"
stopped=$(sed -n 's/.*interrupted by SIG[A-Z]* after step \([0-9]*\);.*/\1/p' "$work/int.err")
grep -q "checkpoint saved to $work/int" "$work/int.err" || fail "Ctrl-C under mpirun: no checkpoint saved"
if [[ -n $stopped && -f $work/int/manifest.json ]]; then
  "$pipeforge" train "${long[@]}" --json --steps 2 --resume "$work/int" >"$work/int_resumed.json" || fail "resume after Ctrl-C"
  "$pipeforge" train "${long[@]}" --json --steps $((stopped + 2)) >"$work/int_straight.json" || fail "straight run"
  [[ $(field "$work/int_resumed.json" param_checksum) == $(field "$work/int_straight.json" param_checksum) ]] ||
    fail "resumed after Ctrl-C under mpirun differs from the run that never stopped"
else
  fail "Ctrl-C under mpirun: no step reported or no manifest"
fi

finish "checkpoint"
