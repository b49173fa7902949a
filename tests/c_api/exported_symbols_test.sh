#!/bin/bash
# libpipeforge.so must export exactly the pf_* functions that pipeforge.h declares: nothing more
# (no libstdc++ or runtime symbols), nothing less (every declared function is linkable).
# Usage: exported_symbols_test.sh path/to/libpipeforge.so path/to/pipeforge.h
set -euo pipefail
so=$1
header=$2
tmp=${TEST_TMPDIR:-$(mktemp -d)}

nm -D --defined-only "$so" | awk 'NF >= 3 { print $3 }' | sed 's/@.*//' | sort -u >"$tmp/exported"
# Declarations start with PF_API; drop preprocessor lines (the PF_API definition), then join lines,
# since a declaration may span several.
grep -v '^[[:space:]]*#' "$header" | tr '\n' ' ' | grep -oE 'PF_API [^;{}]*\(' | grep -oE '[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\($' |
  tr -d ' (' | sort -u >"$tmp/declared"

if [[ $(wc -l <"$tmp/declared") -lt 30 ]]; then
  echo "FAIL: found only $(wc -l <"$tmp/declared") declarations in $header; is the parser broken?"
  exit 1
fi
if ! diff -u "$tmp/declared" "$tmp/exported" >"$tmp/diff"; then
  echo "FAIL: exported symbols of $so differ from the functions declared in $header"
  echo "('-' declared but not exported, '+' exported but not declared)"
  cat "$tmp/diff"
  exit 1
fi
echo "PASS: $(wc -l <"$tmp/exported") symbols, all pf_*, exactly those declared"
