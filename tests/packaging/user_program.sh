# Sourced by the packaging tests: as_user_program CMD... runs a program the way a user's machine runs
# it. Under tools/sanitize.sh asan, libpipeforge.so.<abi> is instrumented and the user's program is
# not, so the sanitizer runtime is preloaded for it (PF_SANITIZER_PRELOAD, docs/SANITIZERS.md), with
# LeakSanitizer off: it cannot see the pointers held by a JVM's, Go's or Python's heap.
as_user_program() {
  if [[ -n ${PF_SANITIZER_PRELOAD:-} ]]; then
    LD_PRELOAD=$PF_SANITIZER_PRELOAD ASAN_OPTIONS=${ASAN_OPTIONS:-}:detect_leaks=0 "$@"
  else
    "$@"
  fi
}
