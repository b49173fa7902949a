#!/bin/bash
# What libpipeforge.so.<abi> exports (c_api/exports.lds):
# - version node PIPEFORGE_1: exactly the pf_* functions pipeforge.h declares (nothing more, nothing
#   less: every declared function is linkable);
# - version node PIPEFORGE_PRIVATE: C++ symbols of namespace pf only (for the backends of the same
#   build), and among them every symbol each backend library needs from the runtime;
# - nothing else: no libstdc++ template instances, no other library's symbols.
# Usage: exported_symbols_test.sh LIBPIPEFORGE HEADER BACKEND...
set -euo pipefail
so=$1 header=$2
shift 2
tmp=${TEST_TMPDIR:-$(mktemp -d)}
fail=0

nm -D --defined-only "$so" | awk 'NF >= 3 && $2 != "A" { print $3 }' >"$tmp/all"
grep '@@PIPEFORGE_1$' "$tmp/all" | sed 's/@.*//' | sort -u >"$tmp/exported"
grep '@@PIPEFORGE_PRIVATE$' "$tmp/all" | sed 's/@.*//' | sort -u >"$tmp/private"
grep -v '@@PIPEFORGE_1$\|@@PIPEFORGE_PRIVATE$' "$tmp/all" >"$tmp/other" || true
# Declarations start with PF_API; drop preprocessor lines (the PF_API definition), then join lines,
# since a declaration may span several.
grep -v '^[[:space:]]*#' "$header" | tr '\n' ' ' | grep -oE 'PF_API [^;{}]*\(' | grep -oE '[A-Za-z_][A-Za-z0-9_]*[[:space:]]*\($' |
  tr -d ' (' | sort -u >"$tmp/declared"

if [[ $(wc -l <"$tmp/declared") -lt 30 ]]; then
  echo "FAIL: found only $(wc -l <"$tmp/declared") declarations in $header; is the parser broken?"
  exit 1
fi
if ! diff -u "$tmp/declared" "$tmp/exported" >"$tmp/diff"; then
  echo "FAIL: the PIPEFORGE_1 symbols of $so differ from the functions declared in $header"
  echo "('-' declared but not exported, '+' exported but not declared)"
  cat "$tmp/diff"
  fail=1
fi
if [[ -s $tmp/other ]]; then
  echo "FAIL: $so exports symbols outside its two version nodes:"
  head -20 "$tmp/other"
  fail=1
fi
not_pf=$(c++filt <"$tmp/private" | grep -vE '^(typeinfo for |typeinfo name for |vtable for |VTT for |guard variable for )?pf::' || true)
if [[ -n $not_pf ]]; then
  echo "FAIL: PIPEFORGE_PRIVATE holds symbols outside namespace pf:"
  head -20 <<<"$not_pf"
  fail=1
fi
# Each backend's references into the runtime: its undefined symbols that are pf:: symbols.
covered=
for backend in "$@"; do
  nm -D --undefined-only "$backend" | awk '{ print $2 }' | sed 's/@.*//' | sort -u >"$tmp/undefined"
  paste "$tmp/undefined" <(c++filt <"$tmp/undefined") | awk -F'\t' '$2 ~ /^(typeinfo for |vtable for )?pf::/ { print $1 }' >"$tmp/needed"
  if [[ $(wc -l <"$tmp/needed") -lt 5 ]]; then
    echo "FAIL: found only $(wc -l <"$tmp/needed") runtime references in $backend; is the check broken?"
    fail=1
  fi
  missing=$(comm -23 "$tmp/needed" "$tmp/private")
  if [[ -n $missing ]]; then
    echo "FAIL: $(basename "$backend") needs runtime symbols that $so does not export:"
    c++filt <<<"$missing" | head -20
    fail=1
  fi
  covered+=" $(basename "$backend"): $(wc -l <"$tmp/needed");"
done
[[ $fail == 0 ]] && echo "PASS: $(wc -l <"$tmp/exported") pf_* symbols in PIPEFORGE_1, exactly those declared;" \
  "$(wc -l <"$tmp/private") pf:: symbols in PIPEFORGE_PRIVATE, covering the backends' references ($covered )"
exit $fail
