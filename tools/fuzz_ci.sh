#!/usr/bin/env bash
# CI's short fuzz pass: every target for PF_FUZZ_SECONDS (default 60) each, after replaying the
# regression inputs (tools/fuzz.sh all; docs/FUZZING.md), from a fresh work folder so every run starts
# from the committed seed corpus. Exits non-zero on any finding; the inputs stay in the printed paths.
set -euo pipefail
cd "$(dirname "$0")/.."
export PF_FUZZ_WORK=${PF_FUZZ_WORK:-$(mktemp -d /tmp/pf_fuzz_ci.XXXXXX)}
exec tools/fuzz.sh all "${PF_FUZZ_SECONDS:-60}"
