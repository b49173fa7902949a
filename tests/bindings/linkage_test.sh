#!/bin/bash
# Every binding links the one libpipeforge.so dynamically and embeds no copy of the runtime:
# each wrapper needs libpipeforge.so.<abi> (ELF NEEDED), takes pf_* from it (undefined there), and
# contains no runtime code (no symbol of C++ namespace pf::, which is libpipeforge.so's alone).
# Usage: linkage_test.sh BINARY...
set -euo pipefail
fail=0
for binary in "$@"; do
  name=$(basename "$binary")
  needed=$(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p')
  if ! grep -qxE 'libpipeforge\.so\.[0-9]+' <<<"$needed"; then
    echo "FAIL: $name does not need libpipeforge.so.<abi> (NEEDED: $(tr '\n' ' ' <<<"$needed"))"
    fail=1
  fi
  imported=$(nm -D --undefined-only "$binary" | awk '{print $2}' | sed 's/@.*//')
  if ! grep -qx 'pf_trainer_step' <<<"$imported"; then
    echo "FAIL: $name does not import pf_trainer_step from libpipeforge.so"
    fail=1
  fi
  defined_pf=$(nm -D --defined-only "$binary" | awk '{print $3}' | grep '^pf_' || true)
  runtime_code=$( (nm "$binary" 2>/dev/null || true) | awk '{print $NF}' | grep -E '^_ZN(K)?2pf' | head -5 || true)
  if [[ -n $defined_pf || -n $runtime_code ]]; then
    echo "FAIL: $name contains runtime code: $defined_pf $runtime_code"
    fail=1
  fi
  [[ $fail == 0 ]] && echo "ok: $name links libpipeforge.so and embeds no runtime"
done
exit $fail
