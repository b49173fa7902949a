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

Each row also says how far any implementation could get with this BLAS: the blocks' matrix
products per step (the Linears' forward, input- and weight-gradient products and the causal
attention's six, counted over the causal triangle only; the head and everything else left out),
timed at OpenBLAS's rate on the block's own shapes measured just before the row
(bench/kernels:sgemm_ceiling_bench --openblas-only 1), split evenly over the ranks. `ratio_bound` =
PyTorch's step time over that: the ratio PipeForge would reach if its step were nothing but those
products at that rate. A row whose bound is below the target cannot meet it without a faster
SGEMM than OpenBLAS's. Both sides' steps are also given as a fraction of the core's FMA peak
(bench/kernels:fma_peak, measured at the start and the end, the larger kept).

Usage: bench/peer/setup.sh; bench/peer/run.py [--quick] [--repeats N] [--python PATH]
(the python is the venv setup.sh made; build with `bazel build -c opt //:pipeforge
//bench/kernels:sgemm_ceiling_bench //bench/kernels:fma_peak` or pass --build).
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
SGEMM_BENCH = os.path.join(ROOT, "bazel-bin", "bench", "kernels", "sgemm_ceiling_bench")
FMA_PEAK = os.path.join(ROOT, "bazel-bin", "bench", "kernels", "fma_peak")
TARGETS = ["//:pipeforge", "//bench/kernels:sgemm_ceiling_bench", "//bench/kernels:fma_peak"]
TARGET_RATIO = 1.25
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


def block_product_flops(row):
    """The blocks' matrix-product FLOPs of one step: per micro-batch and block, the four Linears'
    forward, input- and weight-gradient products (72 d^2 per token) and the causal attention's six
    products (2 forward, 4 backward) over the causal triangle only (hd T (T+1) each per row and
    head, so 6 d T (T+1) per row)."""
    name, d, layers, seq, batch, micro, warm, steps = row
    rows_per_micro = batch // micro
    linear = 72 * d * d * rows_per_micro * seq
    attention = 6 * d * seq * (seq + 1) * rows_per_micro
    return layers * micro * (linear + attention)


def openblas_block_rate(d, tokens):
    """OpenBLAS's GFLOP/s over the block's twelve Linear products at `tokens` rows, one thread, best
    of 5 rounds (bench/kernels:sgemm_ceiling_bench)."""
    out = subprocess.run([SGEMM_BENCH, "--d-model", str(d), "--tokens", str(tokens), "--rounds", "5",
                          "--openblas-only", "1"], check=True, capture_output=True, text=True).stdout
    seconds = json.loads(out)["openblas_block_seconds"]
    return 72 * d * d * tokens / seconds * 1e-9


def fma_peak():
    out = subprocess.run([FMA_PEAK, "--rounds", "3"], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["fma_peak_gflops"]


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
        subprocess.run(["bazel", "build", "-c", "opt"] + TARGETS, cwd=ROOT, check=True, stdout=sys.stderr)
    if not all(os.path.exists(p) for p in (PIPEFORGE, SGEMM_BENCH, FMA_PEAK)):
        raise SystemExit(f"run.py: build first: bazel build -c opt {' '.join(TARGETS)} (or pass --build)")
    if not os.path.exists(args.python):
        raise SystemExit(f"run.py: no python at {args.python}: run bench/peer/setup.sh (or pass --python)")
    rows = QUICK_ROWS if args.quick else ROWS
    if args.rows:
        rows = [r for r in ROWS if r[0] in args.rows.split(",")]
    report = {"machine": machine(args.python), "load_average_start": load_average(), "heads": HEADS,
              "seed": 0, "optimizer": "adamw lr 3e-3 betas 0.9/0.999 eps 1e-8 weight decay 0",
              "ratio_is": "pipeforge tokens/s / torch tokens/s (pipelined: both as 2 processes of 1 thread)",
              "rows": []}
    peak = fma_peak()
    with tempfile.TemporaryDirectory() as tmp:
        for row in rows:
            name, d, layers, seq, batch, micro, warm, steps = row
            tokens_per_micro = batch // micro * seq
            blas_rate = openblas_block_rate(d, tokens_per_micro)
            flops = block_product_flops(row)
            print(f"run.py: {name}: OpenBLAS {blas_rate:.1f} GFLOP/s at the block's shapes, "
                  f"{flops * 1e-9:.1f} GFLOP of block products per step", file=sys.stderr)
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
                ranks = 1 if mode == "sequential" else 2
                step_seconds = lambda rate: batch * seq / rate
                product_seconds = flops / (blas_rate * 1e9) / ranks
                entry.update({
                    "block_product_gflop_per_step": round(flops * 1e-9, 2),
                    "openblas_block_gflops": round(blas_rate, 1),
                    "openblas_product_seconds_per_rank": round(product_seconds, 4),
                    "pipeforge_step_seconds": round(step_seconds(pf_rate(main_side)), 4),
                    "torch_step_seconds": round(step_seconds(torch_rate), 4),
                    "ratio_bound": round(step_seconds(torch_rate) / product_seconds, 3),
                    "pipeforge_fraction_of_peak": round(flops / (step_seconds(pf_rate(main_side)) * ranks * peak * 1e9), 3),
                    "torch_fraction_of_peak": round(flops / (step_seconds(torch_rate) * ranks * peak * 1e9), 3),
                })
                if mode != "sequential":
                    entry["partition"] = partition
                    entry["pipeforge_as"] = "2 mpirun processes" if main_side == "pf_processes" else "2 threads"
                    if main_side == "pf_processes":
                        entry["pipeforge_threads_tokens_per_s"] = round(pf_rate("pf_threads"))
                        entry["ratio_threads"] = round(statistics.median(pair_ratios("pf_threads")), 3)
                        entry["pipeforge_threads_runs"] = [round(r["steady_tokens_per_s"]) for r in runs["pf_threads"]]
                report["rows"].append(entry)
    report["fma_peak_gflops"] = round(max(peak, fma_peak()), 1)
    for r in report["rows"]:  # the fractions against the larger of the two peak measurements
        r["pipeforge_fraction_of_peak"] = round(r["pipeforge_fraction_of_peak"] * peak / report["fma_peak_gflops"], 3)
        r["torch_fraction_of_peak"] = round(r["torch_fraction_of_peak"] * peak / report["fma_peak_gflops"], 3)
    report["load_average_end"] = load_average()
    report["all_first_losses_agree_1e-5"] = all(r["first_loss_diff"] < 1e-5 for r in report["rows"])
    report["target_met_1_25x"] = all(r["ratio"] >= TARGET_RATIO for r in report["rows"])
    label = lambda r: f"{r['model']} {r['mode']}"
    report["rows_below_target"] = [label(r) for r in report["rows"] if r["ratio"] < TARGET_RATIO]
    report["rows_whose_bound_is_below_target"] = [label(r) for r in report["rows"] if r["ratio_bound"] < TARGET_RATIO]
    print(json.dumps(report))


if __name__ == "__main__":
    main()
