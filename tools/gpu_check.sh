#!/usr/bin/env bash
# Runs the GPU checks ON THE GPU MACHINE (CUDA, Python/PyTorch; no Bazel), from the repository
# root, with the binaries that tools/gpu_bundle.sh built on the Bazel machine (gpu_bundle/, carried
# over beside this script). See docs/CUDA_KERNELS.md, "GPU checks".
#
#   tools/gpu_check.sh                      # tests, then our benchmark, then the PyTorch script
#   tools/gpu_check.sh --only tests         # or bench, torch, or a comma list (to split long runs)
#   tools/gpu_check.sh --quick              # fewer benchmark repetitions
#   tools/gpu_check.sh --bench-args "--dims 4096 --no-offload" --torch-args "--dims 4096"
#   OUT=/some/dir tools/gpu_check.sh        # also writes every JSON piece and log under $OUT
#
# Every test binary runs once (in parallel, GPU_CHECK_JOBS at a time, default 4; each under
# GPU_CHECK_TEST_TIMEOUT seconds, default 300) with --gtest_output=json; passed / failed / skipped
# are counted per binary from that JSON (a crash or timeout counts as a failure). A tests.txt entry
# "... mpirun N" runs as N ranks of `mpirun --oversubscribe` (as root too), each rank writing its own
# JSON (PF_GTEST_RANK_OUTPUT, tests/util/mpi_gtest_main.cc), rank 0's counted; without mpirun on the
# PATH it runs alone, where it skips itself (its log says mpirun was not found). OMP_NUM_THREADS
# defaults to 1, as under `bazel test` (.bazelrc). Then bench/gpu's gpt_block_gpu_bench and
# bench/gpu/torch_gpt_block.py (GPU_CHECK_BENCH_TIMEOUT, default 420 s each) print one JSON object
# each; the report shows the TFLOP/s table, ours ÷ torch per pass (throughput ratio = torch ms /
# our ms; > 1 means ours is faster) and the activation-offload ratio.
#
# Exit status: 0 all tests passed or skipped on a machine with a CUDA device; 1 a test failed,
# crashed or timed out (or a binary's libraries did not resolve); 2 no usable bundle; 3 tests fine
# but our benchmark reported an error; 4 no CUDA device, so every GPU test skipped itself and
# nothing was verified (RESULT: NOTHING VERIFIED).
# A missing / failing PyTorch is reported, not fatal.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
root=$(pwd)

bundle="$root/gpu_bundle"
only="tests,bench,torch"
bench_args=()
torch_args=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --only) only=$2; shift 2 ;;
    --bundle) bundle=$(cd "$2" && pwd); shift 2 ;;
    --bench-args) read -r -a extra <<<"$2"; bench_args+=("${extra[@]}"); shift 2 ;;
    --torch-args) read -r -a extra <<<"$2"; torch_args+=("${extra[@]}"); shift 2 ;;
    --quick) bench_args=(--warmup 2 --reps 5 "${bench_args[@]}"); torch_args=(--warmup 2 --reps 5 "${torch_args[@]}"); shift ;;
    -h | --help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "gpu_check: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
want() { [[ ",$only," == *",$1,"* ]]; }

if [[ ! -f "$bundle/env.sh" || ! -f "$bundle/tests.txt" ]]; then
  echo "gpu_check: no bundle at $bundle: run tools/gpu_bundle.sh on the Bazel machine and carry gpu_bundle/ over" >&2
  exit 2
fi
orig_ld_library_path=${LD_LIBRARY_PATH-}
# shellcheck source=/dev/null
. "$bundle/env.sh"
# (A copy that lost the executable bits still runs.)
for f in "$bundle"/bin/*; do [[ -x $f ]] || chmod +x "$f" 2>/dev/null || true; done
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
python=${PYTHON:-python3}
jobs=${GPU_CHECK_JOBS:-4}
test_timeout=${GPU_CHECK_TEST_TIMEOUT:-300}
bench_timeout=${GPU_CHECK_BENCH_TIMEOUT:-420}

work=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
trap 'rm -rf "$work"' EXIT
res=${OUT:-$work}
mkdir -p "$res/tests"

# Built from the sources in this tree? (Same hash as gpu_bundle.sh computes.)
source_hash() {
  (cd "$root" && find runtime tests/kernels tests/devices tests/comm tests/gpu tests/execution tests/memory tests/util bench/gpu third_party tools/build_defs \
    -type f \( -name '*.cc' -o -name '*.cu' -o -name '*.h' -o -name '*.cuh' -o -name BUILD \
    -o -name '*.bzl' -o -name '*.BUILD' \) -print0 2>/dev/null | sort -z | xargs -0 sha256sum | sha256sum | cut -c1-16)
}
bundle_hash=$(sed -n 's/^source hash: *//p' "$bundle/MANIFEST")
tree_hash=$(source_hash)
if [[ $bundle_hash == "$tree_hash" ]]; then
  echo "sources match the bundle's build (hash $tree_hash)" >"$res/bundle_status.txt"
else
  echo "WARNING: the bundle was built from other sources (bundle $bundle_hash, tree $tree_hash): rerun tools/gpu_bundle.sh" >"$res/bundle_status.txt"
fi
cp "$bundle/MANIFEST" "$res/bundle_manifest.txt"
printf '%s\n' "$PF_BUNDLE_PROBLEMS" >"$res/bundle_problems.txt"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader >"$res/nvidia_smi.txt" 2>/dev/null || true

if want tests; then
  echo "== running $(wc -l <"$bundle/tests.txt") test binaries ($jobs at a time, ${test_timeout}s each)" >&2
  run_test() {  # label binary [mpirun N]
    local name start rc ranks
    name=$(basename "$2")
    start=$(date +%s.%N)
    if [[ ${3:-} == mpirun ]] && command -v mpirun >/dev/null; then
      ranks="$res/tests/$name.ranks"
      mkdir -p "$ranks"
      OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PF_GTEST_RANK_OUTPUT="json:$ranks" \
        timeout -k 10 "$test_timeout" mpirun -np "$4" --oversubscribe --bind-to none "$bundle/$2" \
        >"$res/tests/$name.log" 2>&1
      rc=$?
      cp "$ranks/rank0.json" "$res/tests/$name.json" 2>/dev/null
    else
      [[ ${3:-} == mpirun ]] && echo "gpu_check: mpirun not found: $name runs alone (it needs $4 mpirun ranks)" >"$res/tests/$name.log"
      timeout -k 10 "$test_timeout" "$bundle/$2" --gtest_output="json:$res/tests/$name.json" \
        >>"$res/tests/$name.log" 2>&1
      rc=$?
    fi
    echo "$rc $(awk -v s="$start" -v e="$(date +%s.%N)" 'BEGIN { printf "%.1f", e - s }')" >"$res/tests/$name.rc"
    echo "   done: $name (exit $rc)" >&2
  }
  while read -r label bin launcher processes; do
    [[ -n $label ]] || continue
    while [[ $(jobs -rp | wc -l) -ge $jobs ]]; do wait -n; done
    run_test "$label" "$bin" "${launcher:-}" "${processes:-}" &
  done <"$bundle/tests.txt"
  wait
fi

if want bench; then
  echo "== gpt_block_gpu_bench ${bench_args[*]}" >&2
  timeout -k 10 "$bench_timeout" "$bundle/bin/gpt_block_gpu_bench" "${bench_args[@]}" \
    >"$res/gpt_block_gpu_bench.json" 2>"$res/gpt_block_gpu_bench.log"
  echo $? >"$res/gpt_block_gpu_bench.rc"
fi

if want torch; then
  script="$root/bench/gpu/torch_gpt_block.py"
  [[ -f $script ]] || script="$bundle/torch_gpt_block.py"
  echo "== $(basename "$script") ${torch_args[*]}" >&2
  if command -v "$python" >/dev/null; then
    # The bundle's LD_LIBRARY_PATH is for our binaries, not for PyTorch's own CUDA libraries.
    LD_LIBRARY_PATH=$orig_ld_library_path timeout -k 10 "$bench_timeout" "$python" "$script" "${torch_args[@]}" \
      >"$res/torch_gpt_block.json" 2>"$res/torch_gpt_block.log"
    echo $? >"$res/torch_gpt_block.rc"
  else
    echo "{\"benchmark\": \"torch_gpt_block\", \"skipped\": \"no $python\"}" >"$res/torch_gpt_block.json"
    echo 0 >"$res/torch_gpt_block.rc"
  fi
fi

if ! command -v "$python" >/dev/null; then
  # No Python: counts from gtest's own summary lines.
  failed=0
  for rc in "$res"/tests/*.rc; do
    [[ -f $rc ]] || continue
    n=$(basename "$rc" .rc)
    p=$(grep -oP '^\[  PASSED  \] \K[0-9]+' "$res/tests/$n.log" | tail -1)
    f=$(grep -oP '^\[  FAILED  \] \K[0-9]+(?= tests?, listed)' "$res/tests/$n.log" | tail -1)
    s=$(grep -oP '^\[  SKIPPED \] \K[0-9]+(?= tests?, listed)' "$res/tests/$n.log" | tail -1)
    [[ $(cut -d' ' -f1 "$rc") == 0 ]] || failed=1
    echo "$n: ${p:-0} passed, ${f:-0} failed, ${s:-0} skipped (exit $(cut -d' ' -f1 "$rc"))"
  done
  cat "$res/gpt_block_gpu_bench.json" 2>/dev/null
  exit "$failed"
fi

"$python" - "$res" "$bundle" <<'PYEOF'
import glob, json, os, sys

res, bundle = sys.argv[1], sys.argv[2]

def read(path, default=""):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return default

def load_json(path):
    text = read(path)
    if not text.strip():
        return None
    try:
        return json.loads(text)
    except ValueError as e:
        return {"error": "unparsable JSON (%s): %s" % (e, text[-300:])}

summary = {"bundle_status": read(os.path.join(res, "bundle_status.txt")).strip(),
           "bundle_manifest": read(os.path.join(res, "bundle_manifest.txt")).strip(),
           "bundle_problems": [l for l in read(os.path.join(res, "bundle_problems.txt")).splitlines() if l.strip()]}
bench = load_json(os.path.join(res, "gpt_block_gpu_bench.json"))
torch = load_json(os.path.join(res, "torch_gpt_block.json"))

device = read(os.path.join(res, "nvidia_smi.txt")).strip().splitlines()
device = device[0] if device else None
if not device and bench and "device" in bench:
    d = bench["device"]
    device = "%s (sm %s, %.1f GiB)" % (d["name"], d["compute_capability"], d["memory_gib"])
if not device and bench and "skipped" in bench:
    device = "none (%s)" % bench["skipped"]
summary["device"] = device

# ---- tests ----
tests, tot = {}, {"passed": 0, "failed": 0, "skipped": 0}
any_failed = bool(summary["bundle_problems"])
for rcfile in sorted(glob.glob(os.path.join(res, "tests", "*.rc"))):
    name = os.path.basename(rcfile)[:-3]
    rc, secs = (read(rcfile).split() + ["?", "?"])[:2]
    rc = int(rc) if rc.lstrip("-").isdigit() else -1
    row = {"passed": 0, "failed": 0, "skipped": 0, "exit": rc, "seconds": secs, "failed_tests": []}
    j = load_json(os.path.join(res, "tests", name + ".json"))
    if j and "testsuites" in j:
        for suite in j["testsuites"]:
            for t in suite.get("testsuite", []):
                full = "%s.%s" % (suite.get("name"), t.get("name"))
                if t.get("status") == "NOTRUN":
                    continue
                if t.get("failures"):
                    row["failed"] += 1
                    row["failed_tests"].append(full)
                elif t.get("result") == "SKIPPED":
                    row["skipped"] += 1
                else:
                    row["passed"] += 1
    if rc != 0 and row["failed"] == 0:
        # Crashed, timed out (124/137) or failed outside a test (e.g. a library did not load).
        row["failed"] += 1
        tail = read(os.path.join(res, "tests", name + ".log"))[-400:].strip().replace("\n", " | ")
        row["failed_tests"].append("<binary exit %d%s: %s>" % (rc, ", timeout" if rc in (124, 137) else "", tail))
    for k in tot:
        tot[k] += row[k]
    any_failed |= row["failed"] > 0
    tests[name] = row
summary["tests"] = tests
summary["test_totals"] = tot

# ---- benchmark tables ----
def key(r):
    return (r["dtype"], r["dim"])

ours = {key(r): r for r in (bench or {}).get("results", []) if "passes" in r}
theirs = {}
for r in (torch or {}).get("results", []):
    theirs[(r["dtype"], r["dim"], r["variant"])] = r
comparison = []
for (dtype, dim), r in ours.items():
    for p in ("F", "B", "W", "FBW"):
        o = r["passes"][p]
        row = {"dtype": dtype, "dim": dim, "pass": p, "ms": o["ms"], "tflops": o["tflops"],
               "peak_fraction": o["peak_fraction"]}
        for v in ("sdpa", "naive"):
            t = theirs.get((dtype, dim, v))
            if t and p in t["passes"]:
                row["torch_%s_ms" % v] = t["passes"][p]["ms"]
                row["torch_%s_tflops" % v] = t["passes"][p]["tflops"]
                row["ours_over_torch_%s" % v] = t["passes"][p]["ms"] / o["ms"]
        comparison.append(row)
summary["comparison"] = comparison
summary["offload"] = (bench or {}).get("offload")
if summary["offload"] and "single_block" not in summary["offload"]:
    summary["offload"] = None  # failed: its error is in the benchmark's JSON

bench_rc = read(os.path.join(res, "gpt_block_gpu_bench.rc")).strip()
bench_error = None
if bench is None and bench_rc:
    bench_error = "no output (exit %s): %s" % (bench_rc, read(os.path.join(res, "gpt_block_gpu_bench.log"))[-300:])
elif bench and "error" in bench:
    details = [r for r in bench.get("results", []) + [bench.get("offload") or {}] if "error" in r]
    bench_error = bench["error"] + "".join("\n      %s %s: %s" % (r.get("dtype"), r.get("dim"), r["error"][:300])
                                           for r in details)
summary["bench_error"] = bench_error
torch_note = None
if torch is None and read(os.path.join(res, "torch_gpt_block.rc")).strip():
    torch_note = "no output: " + read(os.path.join(res, "torch_gpt_block.log"))[-300:]
elif torch and ("skipped" in torch or "error" in torch or "errors" in torch):
    torch_note = torch.get("skipped") or torch.get("error") or json.dumps(torch.get("errors"))[:500]
summary["torch_note"] = torch_note

# ---- report ----
out = []
w = out.append
w("GPU check report")
w("  device: %s" % device)
w("  bundle: %s" % summary["bundle_status"])
for line in summary["bundle_manifest"].splitlines():
    if line.startswith(("built:", "git commit:", "left out:")):
        w("          " + line)
for p in summary["bundle_problems"]:
    w("  LIBRARY PROBLEM: " + p)
if tests:
    w("")
    w("  %-34s %6s %6s %7s %6s %7s" % ("test binary", "passed", "failed", "skipped", "exit", "seconds"))
    for name, r in tests.items():
        w("  %-34s %6d %6d %7d %6d %7s" % (name, r["passed"], r["failed"], r["skipped"], r["exit"], r["seconds"]))
        for t in r["failed_tests"]:
            w("      FAILED: " + t)
    w("  %-34s %6d %6d %7d" % ("total", tot["passed"], tot["failed"], tot["skipped"]))
if bench is not None:
    w("")
    if "skipped" in bench:
        w("  benchmark: skipped (%s)" % bench["skipped"])
    elif bench_error:
        w("  benchmark: ERROR %s" % bench_error)
    if comparison:
        peak = bench.get("peak_tflops", {})
        w("  benchmark (median ms; TFLOP/s; %% of peak: bf16 %s, fp32 %s TFLOP/s; ours/torch = torch ms / our ms, >1 = ours faster)"
          % (peak.get("bf16"), peak.get("fp32")))
        w("  %-6s %5s %-4s %9s %8s %6s | %9s %7s | %9s %7s" % ("dtype", "dim", "pass", "ms", "TFLOP/s", "%peak",
                                                             "sdpa ms", "ours/t", "naive ms", "ours/t"))
        for r in comparison:
            def cell(v):
                ms, ratio = r.get("torch_%s_ms" % v), r.get("ours_over_torch_%s" % v)
                return ("%9.3f %7.2f" % (ms, ratio)) if ms is not None else ("%9s %7s" % ("-", "-"))
            w("  %-6s %5d %-4s %9.3f %8.1f %5.1f%% | %s | %s" % (r["dtype"], r["dim"], r["pass"], r["ms"], r["tflops"],
                                                               100 * r["peak_fraction"], cell("sdpa"), cell("naive")))
        w("  (torch W = full backward - input-only backward, an estimate; FLOPs count attention in full)")
off = summary["offload"]
if off:
    w("")
    sb, mb = off.get("single_block", {}), off.get("microbatched")
    w("  offload (bf16, dim %s, %.0f MiB saved per block; copies %.1f GB/s D2H, %.1f GB/s H2D):"
      % (off["dim"], off["saved_bytes_per_block"] / 2**20, off["copy"]["d2h_GBps"], off["copy"]["h2d_GBps"]))
    w("    single block:    %8.3f ms with / %8.3f ms without = ratio %.2f" % (sb["ms_with"], sb["ms_without"], sb["ratio"]))
    if mb:
        w("    %d micro-batches: %8.3f ms with / %8.3f ms without = ratio %.2f"
          % (mb["microbatches"], mb["ms_with"], mb["ms_without"], mb["ratio"]))
if torch is not None or torch_note:
    w("")
    if torch and "torch" in torch:
        w("  pytorch: %s (CUDA %s)" % (torch["torch"]["version"], torch["torch"]["cuda"]))
    if torch_note:
        w("  pytorch: %s" % torch_note)
no_device = not device or device.startswith("none")
code = 1 if any_failed else (4 if no_device else (3 if bench_error else 0))
summary["exit_code"] = code
w("")
w("RESULT: %s" % ("FAILED (a test failed)" if code == 1 else
                  "NOTHING VERIFIED (no CUDA device: the GPU tests skipped themselves)" if code == 4 else
                  "tests OK, benchmark error" if code == 3 else "OK"))
print("\n".join(out))
with open(os.path.join(res, "gpu_check_summary.json"), "w") as f:
    json.dump(summary, f, indent=2)
with open(os.path.join(res, "gpu_check_report.txt"), "w") as f:
    f.write("\n".join(out) + "\n")
sys.exit(code)
PYEOF
rc=$?
[[ -n ${OUT:-} ]] && echo "(JSON and logs in $OUT)" >&2
exit "$rc"
