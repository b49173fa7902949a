#!/usr/bin/env bash
# Runs the C sample for a few steps and checks that it prints a falling loss and exits 0.
set -euo pipefail
out="$(samples/train_char_gpt --steps 30 2>/dev/null)"
echo "$out"
grep -q "character GPT" <<<"$out"
first="$(grep -m1 '^step    1' <<<"$out" | awk '{print $4}')"
last="$(grep '^step   30' <<<"$out" | awk '{print $4}')"
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' || { echo "loss did not fall: $first -> $last"; exit 1; }
echo "loss fell: $first -> $last"
