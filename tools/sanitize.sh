#!/usr/bin/env bash
# Runs tests under a sanitizer (docs/SANITIZERS.md) and ends, like tools/test.sh, with a line
# "N passed, N failed[, N skipped]". Exits non-zero on any failing test and on any sanitizer report,
# including one in a test that passed anyway (e.g. from a child process whose failure it expected).
#
#   tools/sanitize.sh asan            # the whole CPU suite (bazel test //...) under ASan + UBSan
#   tools/sanitize.sh tsan            # the threaded tests under TSan
#   tools/sanitize.sh asan --test_filter='Pipeline*'   # extra arguments go to `bazel test`
#   tools/sanitize.sh tsan //tests/comm:transport_test   # targets replace the default set
#
# Each sanitizer builds in its own output base, /tmp/pf_asan_base.<checkout> or
# /tmp/pf_tsan_base.<checkout> (<checkout>: a hash of this checkout's path, as Bazel names its own
# output bases: the runfiles trees it keeps link into the checkout that built them), so that it does
# not evict the normal build's cache; SANITIZE_OUTPUT_BASE overrides it. BAZEL (default
# `bazel`) may add startup options. The bazel-bin/... links of the checkout are left alone.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
repo=$PWD

mode=${1:-}
case $mode in
  asan | tsan) shift ;;
  *)
    echo "usage: tools/sanitize.sh asan|tsan [bazel test arguments] [targets]" >&2
    exit 2
    ;;
esac

tools/setup.sh || { echo "tools/setup.sh failed" >&2; echo "0 passed, 0 failed"; exit 1; }
source tools/test_summary.sh

# The threaded code: transport, executor (pipeline and equivalence tests, GPU option checks),
# activation store and its copy worker (offload tests), the CLI, which trains pipelined, the
# bindings' C++ layer, and per-thread BLAS thread counts (an OpenMP team). The C API's tests are
# built with ASan by their BUILD file and so cannot take TSan; the executor tests cover that code.
TSAN_TARGETS=(
  //tests/comm:transport_test
  //tests/comm:thread_world_test
  //tests/execution/...
  //tests/memory/...
  //tests/cli/...
  //tests/bindings:core_test
  //tests/runtime:blas_test
  //tests/runtime:cpu_allocator_test
)

targets=() options=()
for arg in "$@"; do
  if [[ $arg == //* || $arg == -//* ]]; then targets+=("$arg"); else options+=("$arg"); fi
done

flags=(--config="$mode" --symlink_prefix=/ --keep_going --color=no --curses=no --build_tests_only)
case $mode in
  asan)
    # Not //...: that would also walk the checkout's bazel-<folder> link into the normal build's
    # output base (Bazel skips only its own output base's link, and .bazelignore cannot name a
    # link that depends on the checkout's folder name). Every real top-level package tree instead.
    if ((${#targets[@]} == 0)); then
      targets=(//:all)
      for dir in */; do
        dir=${dir%/}
        [[ -L $dir || -z $(find "$dir" -name BUILD -print -quit) ]] || targets+=("//$dir/...")
      done
    fi
    # The bindings' tests load the instrumented libpipeforge.so into python, java and Go programs,
    # which are not instrumented: their scripts preload this runtime (ASan's first, then UBSan's).
    cc=${CC:-gcc}
    preload=
    for runtime in libasan.so libubsan.so; do
      path=$("$cc" -print-file-name="$runtime")
      if [[ $path != /* || ! -e $path ]]; then
        echo "sanitize.sh: $cc has no $runtime (install gcc's sanitizer runtimes)" >&2
        echo "0 passed, 0 failed"
        exit 1
      fi
      preload+=${preload:+:}$path
    done
    flags+=(--test_env=PF_SANITIZER_PRELOAD="$preload")
    # A test tagged tcp_variant reruns another test's binary over loopback TCP instead of shared
    # memory: the same PipeForge code, so its sanitizer run would find nothing the other's does not.
    flags+=(--test_tag_filters=-tcp_variant)
    # Instrumented code runs about twice as slow (tests at -O0 more): twice Bazel's timeouts per size.
    flags+=(--test_timeout=120,600,1800,7200)
    ;;
  tsan)
    ((${#targets[@]})) || targets=("${TSAN_TARGETS[@]}")
    # Suppressions for third-party libraries only (see the file). Tests are not rerun from the cache
    # when the file changes unless their environment changes: hence its hash in the environment.
    supp=$repo/tools/sanitizers/tsan.supp
    flags+=(
      --test_env=TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1:history_size=4:suppressions=$supp"
      --test_env=PF_TSAN_SUPPRESSIONS_SHA256="$(sha256sum "$supp" | cut -c1-64)"
    )
    ;;
esac

read -r -a bazel <<<"${BAZEL:-bazel}"
checkout=$(pwd -P | md5sum | cut -c1-12)
bazel+=(--output_base="${SANITIZE_OUTPUT_BASE:-/tmp/pf_${mode}_base.$checkout}")
log=$(mktemp "${TMPDIR:-/tmp}/pipeforge-$mode.XXXXXX")
trap 'rm -f "$log"' EXIT

echo "sanitize.sh: ${bazel[*]} test ${flags[*]} ${options[*]} ${targets[*]}"
pf_run_logged "$log" "${bazel[@]}" test "${flags[@]}" "${options[@]}" -- "${targets[@]}"
rc=$?
testlogs=$("${bazel[@]}" info --config="$mode" bazel-testlogs 2>/dev/null)
pf_count_tests "$log" "$testlogs"

# A report in a test that passed (e.g. from a child process whose exit code it did not look at, or
# whose failure it expected) still fails the run.
reports='^==[0-9]+==ERROR: (AddressSanitizer|LeakSanitizer)|^WARNING: ThreadSanitizer|: runtime error: '
if [[ -n $testlogs ]]; then
  while read -r label; do
    dir=$testlogs/${label#//}
    dir=${dir/://}
    [[ -d $dir ]] || continue
    while IFS= read -r file; do
      echo "sanitize.sh: sanitizer report in $label, which passed: $file"
      grep -m3 -E "$reports" "$file" | sed 's/^/    /'
      passed=$((passed - 1)) failed=$((failed + 1))
      [[ $rc -ne 0 ]] || rc=1
      break
    done < <(find "$dir" -name test.log -exec grep -lE "$reports" {} + 2>/dev/null)
  done < <(grep -oE '^//[^ ]+[[:space:]]+(\(cached\) )?(PASSED|FLAKY)' "$log" | awk '{print $1}')
  [[ $failed -eq 0 ]] || echo "sanitize.sh: test logs are under $testlogs"
fi

pf_print_summary "$rc"
exit "$rc"
