#!/usr/bin/env python3
"""PipeForge against PyTorch on the same GPT, the same initial parameters, the same data and the same
work: alternates `pipeforge train --model gpt` and bench/peer/torch_gpt.py per row and prints ONE JSON
object with the tokens/s of each side and their ratio.

Rows: d_model 64 / 2 layers, 256 / 8 and 512 / 8 at seq 64, 512 / 4 at seq 512; each sequential
on 1 thread, 1f1b and zb-v on 2 ranks. Pipelined PipeForge runs twice: as threads of one process
(--blas-threads 1: 2 cores, its default way) and as 2 mpirun processes (like PyTorch's 2 gloo
processes); `ratio` is PipeForge processes / PyTorch processes, `ratio_threads` the threads' one.
Both sides skip the same warm-up steps and time the same steady-state steps (PipeForge's per-step
seconds from --metrics-log; PyTorch's from time.perf_counter around the whole step).

The machine's speed drifts by tens of percent over minutes (shared hosts), so each configuration
runs --repeats times in alternating order (A B C, C B A, A B C, ...) and `ratio` is the median of
the ratios of the runs made next to each other (PipeForge run i / PyTorch run i), which cancels
the drift that a ratio of medians over the whole row keeps; `ratio_of_medians` and `pair_ratios`
are printed beside it.

Usage: bench/peer/setup.sh; bench/peer/run.py [--quick] [--repeats N] [--python PATH]
(the python is the venv setup.sh made; build with `bazel build -c opt //:pipeforge` or --build).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HERE = os.path.join(ROOT, "bench", "peer")
PIPEFORGE = os.path.join(ROOT, "bazel-bin", "pipeforge")
DEFAULT_VENV = os.path.join(os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")),
                            "pipeforge", "peer-venv")

# name, d_model, layers, seq_len, batch_size, micro-batches, warm-up steps, measured steps. Every
# micro-batch holds 512 tokens (8 rows of 64, or 1 of 512); 4 micro-batches per step (zb-v on 2
# ranks needs m >= 4).
ROWS = [
    ("d64-L2-seq64", 64, 2, 64, 32, 4, 3, 15),
    ("d256-L8-seq64", 256, 8, 64, 32, 4, 1, 4),
    ("d512-L8-seq64", 512, 8, 64, 32, 4, 1, 3),
    ("d512-L4-seq512", 512, 4, 512, 4, 4, 1, 3),
]
QUICK_ROWS = [("d64-L2-seq64", 64, 2, 64, 32, 4, 2, 6), ("d256-L8-seq64", 256, 8, 64, 32, 4, 1, 2)]
MODES = ["sequential", "1f1b", "zb-v"]
HEADS = 4  # pipeforge train's default


def mpi_env():
    env = dict(os.environ)
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_tcp_if_include="lo", OMPI_MCA_oob_tcp_if_include="lo")
    return env


def run_pipeforge(row, mode, processes, tmp):
    name, d, layers, seq, batch, micro, warm, steps = row
    log = os.path.join(tmp, "metrics.jsonl")
    if os.path.exists(log):
        os.remove(log)
    cmd = [PIPEFORGE, "train", "--model", "gpt", "--d-model", str(d), "--layers", str(layers),
           "--heads", str(HEADS), "--seq-len", str(seq), "--batch-size", str(batch), "--microbatches", str(micro),
           "--steps", str(warm + steps), "--seed", "0", "--blas-threads", "1", "--json", "--quiet",
           "--metrics-log", log]
    if mode != "sequential":
        cmd += ["--schedule", mode, "--stages", "2"]
    env = None
    if processes:
        cmd = ["mpirun", "-np", "2", "--oversubscribe", "--bind-to", "none"] + cmd
        env = mpi_env()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
    result = json.loads([line for line in out.splitlines() if line.startswith("{")][-1])
    lines = [json.loads(line) for line in open(log)]
    measured = [l for l in lines if l["step"] > warm]
    result["steady_tokens_per_s"] = sum(l["tokens"] for l in measured) / sum(l["seconds"] for l in measured)
    result["step_seconds"] = [l["seconds"] for l in lines]
    return result


def run_torch(python, row, mode, partition):
    name, d, layers, seq, batch, micro, warm, steps = row
    cmd = [python, os.path.join(HERE, "torch_gpt.py"), "--mode", mode, "--d-model", str(d), "--layers", str(layers),
           "--heads", str(HEADS), "--seq-len", str(seq), "--batch-size", str(batch), "--microbatches", str(micro),
           "--steps", str(warm + steps), "--warmup-steps", str(warm), "--seed", "0", "--threads", "1"]
    if mode != "sequential":
        cmd += ["--layers-per-stage", ",".join(map(str, partition["layers_per_stage"])),
                "--stage-ranks", ",".join(map(str, partition["stage_ranks"]))]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def load_average():
    return [float(v) for v in open("/proc/loadavg").read().split()[:3]]


def machine(python):
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
    torch_version = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True,
                                   text=True).stdout.strip()
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    return {"cpu": cpu, "cores": os.cpu_count(), "kernel": platform.release(), "torch_version": torch_version,
            "pipeforge_commit": commit}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="two small rows, fewer steps")
    ap.add_argument("--repeats", type=int, default=3, help="alternations per row and mode")
    ap.add_argument("--python", default=os.path.join(DEFAULT_VENV, "bin", "python"),
                    help="the python with torch (default: the venv bench/peer/setup.sh creates)")
    ap.add_argument("--build", action="store_true", help="bazel build -c opt //:pipeforge first")
    ap.add_argument("--no-mpi", action="store_true", help="skip PipeForge's process-per-rank runs")
    ap.add_argument("--rows", default="", help="comma-separated row names (default: all)")
    args = ap.parse_args()
    if args.build:
        subprocess.run(["bazel", "build", "-c", "opt", "//:pipeforge"], cwd=ROOT, check=True, stdout=sys.stderr)
    if not os.path.exists(PIPEFORGE):
        raise SystemExit("run.py: build PipeForge first: bazel build -c opt //:pipeforge (or pass --build)")
    if not os.path.exists(args.python):
        raise SystemExit(f"run.py: no python at {args.python}: run bench/peer/setup.sh (or pass --python)")
    rows = QUICK_ROWS if args.quick else ROWS
    if args.rows:
        rows = [r for r in ROWS if r[0] in args.rows.split(",")]
    report = {"machine": machine(args.python), "load_average_start": load_average(), "heads": HEADS,
              "seed": 0, "optimizer": "adamw lr 3e-3 betas 0.9/0.999 eps 1e-8 weight decay 0",
              "ratio_is": "pipeforge tokens/s / torch tokens/s (pipelined: both as 2 processes of 1 thread)",
              "rows": []}
    with tempfile.TemporaryDirectory() as tmp:
        for row in rows:
            name, d, layers, seq, batch, micro, warm, steps = row
            for mode in MODES:
                sides = ["pf_threads", "torch"] if mode == "sequential" else ["pf_threads", "pf_processes", "torch"]
                if args.no_mpi and "pf_processes" in sides:
                    sides.remove("pf_processes")
                runs = {s: [] for s in sides}
                partition = None
                for rep in range(args.repeats):
                    for side in (sides if rep % 2 == 0 else list(reversed(sides))):
                        if side == "torch":
                            runs[side].append(run_torch(args.python, row, mode, partition))
                        else:
                            r = run_pipeforge(row, mode, side == "pf_processes", tmp)
                            partition = partition or r["partition"]
                            runs[side].append(r)
                        print(f"run.py: {name} {mode} {side}: "
                              f"{runs[side][-1].get('steady_tokens_per_s', runs[side][-1].get('tokens_per_s')):.0f}"
                              " tokens/s", file=sys.stderr)
                pf_rate = lambda side: statistics.median(r["steady_tokens_per_s"] for r in runs[side])
                torch_rate = statistics.median(r["tokens_per_s"] for r in runs["torch"])
                main_side = "pf_threads" if mode == "sequential" or "pf_processes" not in runs else "pf_processes"
                pair_ratios = lambda side: [p["steady_tokens_per_s"] / t["tokens_per_s"]
                                            for p, t in zip(runs[side], runs["torch"])]
                entry = {
                    "model": name, "d_model": d, "layers": layers, "seq_len": seq, "batch_size": batch,
                    "micro_batches": micro, "warmup_steps": warm, "measured_steps": steps,
                    "mode": mode if mode == "sequential" else f"{mode} 2 ranks",
                    "pipeforge_tokens_per_s": round(pf_rate(main_side)),
                    "torch_tokens_per_s": round(torch_rate),
                    "ratio": round(statistics.median(pair_ratios(main_side)), 3),
                    "ratio_of_medians": round(pf_rate(main_side) / torch_rate, 3),
                    "pair_ratios": [round(r, 3) for r in pair_ratios(main_side)],
                    "first_loss_pipeforge": runs[main_side][0]["first_loss"],
                    "first_loss_torch": runs["torch"][0]["first_loss"],
                    "first_loss_diff": abs(runs[main_side][0]["first_loss"] - runs["torch"][0]["first_loss"]),
                    "last_loss_pipeforge": runs[main_side][0]["loss"],
                    "last_loss_torch": runs["torch"][0]["losses"][-1],
                    "pipeforge_runs": [round(r["steady_tokens_per_s"]) for r in runs[main_side]],
                    "torch_runs": [round(r["tokens_per_s"]) for r in runs["torch"]],
                    "load_average_after": load_average(),
                }
                if mode != "sequential":
                    entry["partition"] = partition
                    entry["pipeforge_as"] = "2 mpirun processes" if main_side == "pf_processes" else "2 threads"
                    if main_side == "pf_processes":
                        entry["pipeforge_threads_tokens_per_s"] = round(pf_rate("pf_threads"))
                        entry["ratio_threads"] = round(statistics.median(pair_ratios("pf_threads")), 3)
                        entry["pipeforge_threads_runs"] = [round(r["steady_tokens_per_s"]) for r in runs["pf_threads"]]
                report["rows"].append(entry)
    report["load_average_end"] = load_average()
    report["all_first_losses_agree_1e-5"] = all(r["first_loss_diff"] < 1e-5 for r in report["rows"])
    report["target_met_1_25x"] = all(r["ratio"] >= 1.25 for r in report["rows"])
    print(json.dumps(report))


if __name__ == "__main__":
    main()
