#!/usr/bin/env python3
"""Validates `pipeforge plan` on this machine: plans a model, trains the plan's top candidates and a
spread of the others for real (alternating, so that a noisy neighbour hits all of them alike),
and prints one JSON object with the predicted and measured step time of each, the prediction error
and the regret (how much slower the planner's choice measured than the fastest one measured).

Usage: bench/planner/run.sh [--steps N] [--rounds R] [--spread K] [model options of pipeforge plan]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}\n{r.stderr[-4000:]}")
    return r.stdout


def train_command(pipeforge, cand, batch_size, model_args, steps, log):
    d = cand["data_parallel"]
    cmd = [pipeforge, "train", *model_args, "--batch-size", str(batch_size // d),
           "--microbatches", str(cand["micro_batches"]), "--steps", str(steps), "--quiet",
           "--metrics-log", log]
    if cand["schedule"] != "sequential":
        cmd += ["--schedule", cand["schedule"], "--stages", str(cand["ranks"]),
                "--chunks", str(cand["chunks"]),
                "--layers-per-stage", *[str(x) for x in cand["layers_per_stage"]],
                "--activation-policy", cand["activation_policy"]]
    if d > 1:
        cmd = ["mpirun", "-np", str(d * cand["ranks"]), "--oversubscribe", "--bind-to", "none",
               *cmd, "--data-parallel", str(d)]
    return cmd


def measured_step_seconds(log, warmup):
    with open(log) as f:
        steps = [json.loads(line) for line in f if line.strip()]
    seconds = [s["seconds"] for s in steps[warmup:]]
    return statistics.median(seconds), len(seconds)


def label(c):
    return (f'{c["schedule"]} P={c["ranks"]} v={c["chunks"]} m={c["micro_batches"]} '
            f'D={c["data_parallel"]} {c["activation_policy"]} {c["layers_per_stage"]}')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--pipeforge", default="bazel-bin/pipeforge")
    ap.add_argument("--steps", type=int, default=30, help="measured steps per run (after 3 of warm-up)")
    ap.add_argument("--rounds", type=int, default=5, help="runs of each candidate, alternating (a short run varies by up to 45%% here)")
    ap.add_argument("--spread", type=int, default=7, help="candidates besides the top 3")
    ap.add_argument("--batch-size", type=int, default=16)
    args, model_args = ap.parse_known_args()
    if not model_args:
        model_args = ["--model", "gpt", "--d-model", "128", "--layers", "4", "--seq-len", "64"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_tcp_if_include="lo", OMPI_MCA_oob_tcp_if_include="lo")
    with tempfile.TemporaryDirectory() as tmp:
        # The plan's --measure launches mpirun -np 2 to time what processes pay: the same environment.
        plan = json.loads(run([args.pipeforge, "plan", *model_args, "--batch-size", str(args.batch_size),
                               "--measure", "--json", "--quiet", "--top", "100000",
                               "--out", "", "--svg", ""], env))
        ranked = plan["candidates"]
        # The top 3, then an even spread over the rest of the ranking (other schedules first).
        chosen = ranked[:3]
        rest = ranked[3:]
        if rest and args.spread > 0:
            step = max(1, len(rest) // args.spread)
            chosen += rest[::step][:args.spread]
        results = [{"candidate": c, "measured": []} for c in chosen]
        warmup = 3
        for _ in range(args.rounds):
            for r in results:
                log = os.path.join(tmp, "m.jsonl")
                if os.path.exists(log):
                    os.remove(log)
                run(train_command(args.pipeforge, r["candidate"], args.batch_size, model_args,
                                  args.steps + warmup, log), env)
                r["measured"].append(measured_step_seconds(log, warmup)[0])
        rows = []
        for rank, r in enumerate(results):
            c = r["candidate"]
            measured = statistics.median(r["measured"])
            rows.append({"candidate": label(c), "planner_rank": ranked.index(c) + 1,
                         "predicted_step_s": c["step_seconds"], "measured_step_s": measured,
                         "measured_runs_s": r["measured"],
                         "predicted_over_measured": c["step_seconds"] / measured})
        errors = [abs(x["predicted_over_measured"] - 1) for x in rows]
        fastest = min(x["measured_step_s"] for x in rows)
        choice = rows[0]["measured_step_s"]
        top3 = rows[:3]
        out = {
            "model": model_args, "batch_size": args.batch_size, "cluster": plan["cluster"],
            "candidates_ranked": len(ranked), "process_links": plan.get("process_links"),
            "calibration_seconds": plan.get("calibration_seconds"), "measured": rows,
            "max_prediction_error": max(errors),
            "mean_prediction_error": statistics.mean(errors),
            "top3_max_prediction_error": max(abs(x["predicted_over_measured"] - 1) for x in top3),
            "regret": choice / fastest - 1,
            "fastest_measured": min(rows, key=lambda x: x["measured_step_s"])["candidate"],
            "load_average": os.getloadavg(),
        }
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
