#!/usr/bin/env bash
# The packed MLP sweep benchmark (docs/SWEEP.md, "Speed"): at three grid sizes of the ParallelMLPs
# paper that fit here, the packed sweep's time against its models trained one after another, in
# PipeForge (sweep_bench) and in a plain PyTorch loop (torch_loop.py, one thread, as the packed
# sweep's 1-thread figure). One JSON object on stdout with every time and the speed-ups.
#
#   bench/sweep/run.sh            # about a minute on 2 cores, after PyTorch is installed
#   bench/sweep/run.sh --quick    # small grids, to try the script
#
# PyTorch comes from PyPI into the peer benchmark's venv (bench/peer/setup.sh) the first time.
set -euo pipefail
cd "$(dirname "$0")/../.."
python=$(bench/peer/setup.sh)
bazel build -c opt --ui_event_filters=-info --noshow_progress //bench/sweep:sweep_bench >&2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
bazel-bin/bench/sweep/sweep_bench "$@" >"$work/pipeforge.json"
"$python" - "$work/pipeforge.json" "$python" <<'PY'
import json, subprocess, sys
result = json.load(open(sys.argv[1]))
for s in result["settings"]:
    line = [sys.argv[2], "bench/sweep/torch_loop.py", "--features", str(s["features"]), "--classes", str(s["classes"]),
            "--train-rows", str(s["train_rows"]), "--hidden", ",".join(map(str, s["hidden"])),
            "--activations", ",".join(s["activations"]), "--epochs", str(s["epochs"]), "--batch", str(s["batch"]),
            "--threads", "1"]
    torch = json.loads(subprocess.run(line, check=True, capture_output=True, text=True).stdout)
    s["torch"] = torch["torch"]
    s["torch_models_timed"] = torch["models_timed"]
    s["torch_seconds_per_model"] = torch["seconds_per_model"]
    s["torch_seconds_all_models"] = torch["seconds_per_model"] * s["models"]
    s["speedup_over_torch_1_thread"] = s["torch_seconds_all_models"] / s["packed_seconds_1_thread"]
    s["speedup_over_torch_2_threads"] = s["torch_seconds_all_models"] / s["packed_seconds_2_threads"]
    print(f"features {s['features']}, {s['models']} models: packed {s['packed_seconds_1_thread']:.3f} s on 1 thread; "
          f"alone in PipeForge {s['alone_seconds_all_models']:.2f} s ({s['speedup_1_thread']:.1f}x), "
          f"in PyTorch {s['torch_seconds_all_models']:.2f} s ({s['speedup_over_torch_1_thread']:.1f}x)", file=sys.stderr)
print(json.dumps(result, indent=1))
PY
