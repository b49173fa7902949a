#!/usr/bin/env bash
# Builds and runs the in-tree libFuzzer targets (tests/fuzz/, docs/FUZZING.md) with clang, ASan and
# UBSan, in their own Bazel output base so the main (gcc) build cache is left alone.
#
#   tools/fuzz.sh [--keep-going] NAME|all SECONDS   fuzz each target for SECONDS
#   tools/fuzz.sh --replay NAME|all                 run the seed corpus and regressions once
#   tools/fuzz.sh --merge NAME|all                  add the work corpus's inputs that bring new
#                                                   coverage to tests/fuzz/corpus/NAME (then commit them)
# NAME: schedule_text, model_json, checkpoint, train_config. --keep-going: libFuzzer's fork mode, which goes on
# after a finding (several bugs in one run); by default the first finding stops the target.
#
# Fuzzing copies the seed corpus into a work folder (PF_FUZZ_WORK, default /tmp/pf_fuzz_work) and
# grows it there; each run's log and findings go to PF_FUZZ_WORK/NAME/run-<time>/. Every file in
# tests/fuzz/regressions/NAME/ is replayed first and counts as a finding while it still fails.
# Targets are fuzzed one per core at a time (PF_FUZZ_JOBS overrides), each still for SECONDS.
# Ends with one line per target (executions, libFuzzer's cov and ft, findings) and exits 1 on any
# finding, printing where the inputs are.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGETS=(schedule_text model_json checkpoint train_config libsvm safetensors)
# One output base per checkout (its runfiles trees link into the checkout that built them).
OUTPUT_BASE=${PF_FUZZ_OUTPUT_BASE:-/tmp/pf_fuzz_base.$(pwd -P | md5sum | cut -c1-12)}
WORK=${PF_FUZZ_WORK:-/tmp/pf_fuzz_work}
RSS_LIMIT_MB=2048

log() { printf 'fuzz: %s\n' "$*" >&2; }
usage() { sed -n '5,10p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

mode=fuzz
keep_going=0
case ${1:-} in
  --replay) mode=replay; shift ;;
  --merge) mode=merge; shift ;;
  --keep-going) keep_going=1; shift ;;
esac
[[ $# -ge 1 ]] || usage
name=$1
seconds=${2:-}
if [[ $mode == fuzz ]]; then
  [[ $seconds =~ ^[0-9]+$ && $seconds -gt 0 ]] || usage
fi
if [[ $name == all ]]; then
  selected=("${TARGETS[@]}")
elif [[ " ${TARGETS[*]} " == *" $name "* ]]; then
  selected=("$name")
else
  log "unknown target '$name' (known: ${TARGETS[*]}, all)"
  exit 2
fi

# Per target: longest input and per-input time limit (seconds).
max_len() { case $1 in schedule_text) echo 8192 ;; model_json) echo 16384 ;; checkpoint) echo 8192 ;; train_config) echo 16384 ;; libsvm) echo 8192 ;; safetensors) echo 8192 ;; esac; }
timeout_of() { case $1 in checkpoint) echo 20 ;; *) echo 10 ;; esac; }

tools/setup.sh --fuzz

mkdir -p "$WORK"
build_log=$WORK/build.log
labels=()
for t in "${selected[@]}"; do labels+=("//tests/fuzz:${t}_fuzzer"); done
log "building ${labels[*]} (clang, ASan + UBSan; log: $build_log)"
start=$SECONDS
if ! bazel --output_base="$OUTPUT_BASE" build --config=fuzz "${labels[@]}" >"$build_log" 2>&1; then
  grep -v 'Cannot export local symbol' "$build_log" | tail -n 40 >&2
  log "build failed (full log: $build_log)"
  exit 1
fi
log "built in $((SECONDS - start)) s"
bin_dir=$(bazel --output_base="$OUTPUT_BASE" info --config=fuzz bazel-bin 2>/dev/null)/tests/fuzz

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-/usr/lib/llvm-14/bin/llvm-symbolizer}
export OMP_NUM_THREADS=1
# The checkpoint target writes a file per input: on tmpfs it runs about 10x faster. A private folder,
# removed at the end, also takes what crashed runs leave behind.
if [[ -z ${TMPDIR:-} && -d /dev/shm && -w /dev/shm ]]; then
  TMPDIR=$(mktemp -d /dev/shm/pf_fuzz.XXXXXX)
  export TMPDIR
  trap 'rm -rf "$TMPDIR"' EXIT
fi

# libFuzzer options every run of target $1 gets.
common_flags() {
  printf '%s\n' -rss_limit_mb=$RSS_LIMIT_MB -malloc_limit_mb=$RSS_LIMIT_MB -timeout="$(timeout_of "$1")" \
    -max_len="$(max_len "$1")" -dict=tests/fuzz/$1.dict
}

# Fuzzes target $1 for $seconds (mode fuzz): its summary lines into $WORK/$1.summary (the first
# ends with its number of findings), the first finding's report on stderr.
fuzz_target() {
  local t=$1 bin=$bin_dir/${1}_fuzzer run f execs cov
  local -a flags findings=() extra=() lines=()
  mapfile -t flags < <(common_flags "$t")
  run=$WORK/$t/run-$(date +%Y%m%d-%H%M%S)
  mkdir -p "$WORK/$t/corpus" "$run"
  cp -n "tests/fuzz/corpus/$t"/* "$WORK/$t/corpus/"
  for f in "tests/fuzz/regressions/$t"/*; do
    [[ -f $f ]] || continue
    if ! "$bin" "${flags[@]}" "$f" >>"$run/regressions.log" 2>&1; then findings+=("$f (regression, log: $run/regressions.log)"); fi
  done
  ((keep_going)) && extra=(-fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1)
  log "$t: fuzzing for $seconds s (log: $run/fuzz.log)"
  "$bin" "${flags[@]}" "${extra[@]}" -max_total_time="$seconds" -print_final_stats=1 \
    -artifact_prefix="$run/" "$WORK/$t/corpus" >"$run/fuzz.log" 2>&1 || true
  for f in "$run"/crash-* "$run"/leak-* "$run"/oom-* "$run"/timeout-*; do
    [[ -f $f ]] && findings+=("$f")
  done
  execs=$(grep -o 'stat::number_of_executed_units: [0-9]*' "$run/fuzz.log" | tail -n 1 | grep -o '[0-9]*$' || true)
  [[ -n $execs ]] || execs=$(grep -o '^#[0-9]*' "$run/fuzz.log" | tail -n 1 | tr -d '#' || true)
  cov=$(grep -o 'cov: [0-9]* ft: [0-9]*' "$run/fuzz.log" | tail -n 1 || true)
  lines+=("fuzz $t: ${execs:-0} execs in $seconds s, ${cov:-cov: ? ft: ?}, corpus $(ls "$WORK/$t/corpus" | wc -l) inputs, ${#findings[@]} findings")
  if ((${#findings[@]} > 0)); then
    grep -m 1 -A 30 -E 'FUZZ FINDING|ERROR: (AddressSanitizer|libFuzzer|LeakSanitizer)|runtime error:' "$run/fuzz.log" >&2 || true
    for f in "${findings[@]}"; do lines+=("  finding: $f"); done
  fi
  printf '%s\n' "${lines[@]}" >"$WORK/$t.summary"
}

# Targets fuzzed at once: one per core (PF_FUZZ_JOBS overrides).
JOBS=${PF_FUZZ_JOBS:-$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc)}  # nproc obeys OMP_NUM_THREADS, set above
((JOBS >= 1)) || JOBS=1

status=0
summary=()
for t in "${selected[@]}"; do
  bin=$bin_dir/${t}_fuzzer
  mapfile -t flags < <(common_flags "$t")
  case $mode in
    replay)
      log "$t: replaying tests/fuzz/corpus/$t and tests/fuzz/regressions/$t"
      if "$bin" "${flags[@]}" -runs=0 "tests/fuzz/corpus/$t" "tests/fuzz/regressions/$t" >"$WORK/$t.replay.log" 2>&1; then
        summary+=("replay $t: ok, $(grep -o 'INITED.*' "$WORK/$t.replay.log" | head -n 1)")
      else
        tail -n 60 "$WORK/$t.replay.log" >&2
        summary+=("replay $t: FAILED (log: $WORK/$t.replay.log)")
        status=1
      fi
      ;;
    merge)
      [[ -d $WORK/$t/corpus ]] || { log "$t: no work corpus in $WORK/$t/corpus (fuzz first)"; continue; }
      before=$(ls "tests/fuzz/corpus/$t" | wc -l)
      "$bin" "${flags[@]}" -merge=1 "tests/fuzz/corpus/$t" "$WORK/$t/corpus" >"$WORK/$t.merge.log" 2>&1 || {
        tail -n 30 "$WORK/$t.merge.log" >&2; status=1; }
      summary+=("merge $t: $(( $(ls "tests/fuzz/corpus/$t" | wc -l) - before )) new inputs in tests/fuzz/corpus/$t")
      ;;
    fuzz)
      # In the background, JOBS targets at a time (one core each): each writes its summary lines
      # to $WORK/$t.summary, collected below in order.
      while (($(jobs -rp | wc -l) >= JOBS)); do wait -n || true; done
      fuzz_target "$t" &
      ;;
  esac
done
if [[ $mode == fuzz ]]; then
  wait
  for t in "${selected[@]}"; do
    if [[ -f $WORK/$t.summary ]]; then
      mapfile -t lines <"$WORK/$t.summary"
      summary+=("${lines[@]}")
      [[ ${lines[0]} =~ ,\ 0\ findings$ ]] || status=1
    else
      summary+=("fuzz $t: the run was cut short (no summary), 1 findings")
      status=1
    fi
    rm -f "$WORK/$t.summary"
  done
fi
printf '%s\n' "${summary[@]}"
exit $status
