#!/usr/bin/env python3
"""Validates `pipeforge plan` on this machine: plans a model, trains the plan's top candidates and a
spread of the others for real (alternating, so that a noisy neighbour hits all of them alike),
and prints one JSON object with the predicted and measured step time of each, the prediction error
and the regret (how much slower the planner's choice measured than the fastest one measured).

The machine's speed drifts by tens of percent between rounds (shared hosts), for every candidate
at once. So the rounds run the candidates in alternating order, and `measured_step_s` is each candidate's time with the drift between rounds taken out: a
two-way median polish of log(seconds) over candidates x rounds (Tukey), candidate effect plus the
median round's effect; the errors and the regret use it. The plain medians over the rounds
(`raw_measured_step_s`) and the figures from them (`uncorrected`) are printed beside it.

The drift also lies between the plan's calibration (its first seconds) and the measurement
(minutes later). So each round starts with a calibration of its own (`plan --measure` again,
`--recalibrate`, the default): `recalibrated` gives each candidate's error as the median over the
rounds of (that round's prediction / that round's measurement), a prediction made from a profile
timed next to the runs it predicts. The candidates, their order and the planner's choice are the
first plan's throughout.

Usage: bench/planner/run.sh [--steps N] [--rounds R] [--spread K] [model options of pipeforge plan]
"""
import argparse
import json
import math
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


def median_polish(table, iterations=10):
    """log(table[c][r]) = overall + row[c] + col[r] + residual, by alternately removing medians.
    Returns each row's fitted value at the median column effect (the typical round), as seconds."""
    logs = [[math.log(x) for x in row] for row in table]
    rows, cols = len(logs), len(logs[0])
    row_eff, col_eff = [0.0] * rows, [0.0] * cols
    for _ in range(iterations):
        for i in range(rows):
            m = statistics.median(logs[i])
            row_eff[i] += m
            logs[i] = [x - m for x in logs[i]]
        for j in range(cols):
            m = statistics.median(logs[i][j] for i in range(rows))
            col_eff[j] += m
            for i in range(rows):
                logs[i][j] -= m
    typical = statistics.median(col_eff)
    return [math.exp(r + typical) for r in row_eff]


def summary(rows, key):
    errors = [abs(x["predicted_step_s"] / x[key] - 1) for x in rows]
    fastest = min(rows, key=lambda x: x[key])
    return {"max_prediction_error": max(errors), "mean_prediction_error": statistics.mean(errors),
            "top3_max_prediction_error": max(errors[:3]),
            "regret": rows[0][key] / fastest[key] - 1, "fastest_measured": fastest["candidate"]}


def key(c):
    """A candidate as the planner enumerates it: its partition may differ from one calibration to
    the next, so it is not part of the key."""
    return (c["schedule"], c["ranks"], c["chunks"], c["micro_batches"], c["data_parallel"], c["activation_policy"])


def recalibrated_summary(rows):
    errors = [abs(statistics.median(x["round_predicted_over_measured"]) - 1) for x in rows]
    return {"max_prediction_error": max(errors), "mean_prediction_error": statistics.mean(errors),
            "top3_max_prediction_error": max(errors[:3]),
            "partition_changed": sum(x["round_partition_changed"] for x in rows)}


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
    ap.add_argument("--recalibrate", action=argparse.BooleanOptionalAction, default=True,
                    help="calibrate again at the start of each round (the recalibrated figures)")
    args, model_args = ap.parse_known_args()
    if not model_args:
        model_args = ["--model", "gpt", "--d-model", "128", "--layers", "4", "--seq-len", "64"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_tcp_if_include="lo", OMPI_MCA_oob_tcp_if_include="lo")
    with tempfile.TemporaryDirectory() as tmp:
        # The plan's --measure launches mpirun -np 2 to time what processes pay: the same environment.
        plan_command = [args.pipeforge, "plan", *model_args, "--batch-size", str(args.batch_size),
                        "--measure", "--json", "--quiet", "--top", "100000", "--out", "", "--svg", ""]
        plan = json.loads(run(plan_command, env))
        ranked = plan["candidates"]
        # The top 3, then an even spread over the rest of the ranking (other schedules first).
        chosen = ranked[:3]
        rest = ranked[3:]
        if rest and args.spread > 0:
            step = max(1, len(rest) // args.spread)
            chosen += rest[::step][:args.spread]
        results = [{"candidate": c, "measured": [], "predicted": [], "partition_changed": 0} for c in chosen]
        warmup = 3
        for round_index in range(args.rounds):
            if args.recalibrate:
                fresh = {key(c): c for c in json.loads(run(plan_command, env))["candidates"]}
                for r in results:
                    again = fresh.get(key(r["candidate"]))
                    r["predicted"].append(again["step_seconds"] if again else r["candidate"]["step_seconds"])
                    r["partition_changed"] += int(again is None or
                                                  again["layers_per_stage"] != r["candidate"]["layers_per_stage"])
            # Forward, then backward: a drift within a round weighs on the first and the last alike.
            for r in (results if round_index % 2 == 0 else list(reversed(results))):
                log = os.path.join(tmp, "m.jsonl")
                if os.path.exists(log):
                    os.remove(log)
                run(train_command(args.pipeforge, r["candidate"], args.batch_size, model_args,
                                  args.steps + warmup, log), env)
                r["measured"].append(measured_step_seconds(log, warmup)[0])
        corrected = median_polish([r["measured"] for r in results])
        rows = []
        for r, drift_free in zip(results, corrected):
            c = r["candidate"]
            raw = statistics.median(r["measured"])
            rows.append({"candidate": label(c), "planner_rank": ranked.index(c) + 1,
                         "predicted_step_s": c["step_seconds"], "measured_step_s": drift_free,
                         "raw_measured_step_s": raw, "measured_runs_s": r["measured"],
                         "predicted_over_measured": c["step_seconds"] / drift_free})
            if args.recalibrate:
                rows[-1].update({"round_predicted_s": r["predicted"],
                                 "round_predicted_over_measured": [p / m for p, m in zip(r["predicted"], r["measured"])],
                                 "round_partition_changed": r["partition_changed"]})
        out = {
            "model": model_args, "batch_size": args.batch_size, "cluster": plan["cluster"],
            "candidates_ranked": len(ranked), "process_links": plan.get("process_links"),
            "calibration_seconds": plan.get("calibration_seconds"), "measured": rows,
            **summary(rows, "measured_step_s"),
            "uncorrected": summary(rows, "raw_measured_step_s"),
            **({"recalibrated": recalibrated_summary(rows)} if args.recalibrate else {}),
            "load_average": os.getloadavg(),
        }
        print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
