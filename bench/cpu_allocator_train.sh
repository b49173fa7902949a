#!/usr/bin/env bash
# End-to-end training with the CPU allocator's cache on and off (PF_CPU_ALLOCATOR_CACHE_BYTES=0),
# alternating run by run (the order swaps every repetition), each run a fresh process. Prints one
# JSON object: per program and setting the median tokens/s (the trainer's, per elapsed second),
# user + system CPU seconds and minor page faults of the whole run.
#
#   bazel build -c opt //:pipeforge //samples:train_char_gpt && bench/cpu_allocator_train.sh [reps]
set -euo pipefail
cd "$(dirname "$0")/.."
reps=${1:-3}
exec python3 - "$reps" <<'PY'
import json, os, re, resource, statistics, subprocess, sys

reps = int(sys.argv[1])
programs = {
    "pipeforge_gpt_d256_l8": (["bazel-bin/pipeforge", "train", "--model", "gpt", "--d-model", "256", "--layers", "8",
                               "--seq-len", "64", "--steps", "20", "--json"],
                              lambda out: json.loads(out.strip().splitlines()[-1])["tokens_per_s"]),
    "train_char_gpt_sample": (["bazel-bin/samples/train_char_gpt", "--steps", "100"],
                              lambda out: float(re.findall(r"step +\d+ +loss \S+ +(\d+) tok/s", out)[-1])),
}
settings = {"cache_on": None, "cache_off": "0"}
results = {p: {s: {"tokens_per_s": [], "cpu_s": [], "minflt": []} for s in settings} for p in programs}
for rep in range(reps):
    order = list(settings) if rep % 2 == 0 else list(reversed(list(settings)))
    for name, (cmd, parse) in programs.items():
        for setting in order:
            env = dict(os.environ)
            env.pop("PF_CPU_ALLOCATOR_CACHE_BYTES", None)
            if settings[setting] is not None:
                env["PF_CPU_ALLOCATOR_CACHE_BYTES"] = settings[setting]
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            r = results[name][setting]
            r["tokens_per_s"].append(parse(out))
            r["cpu_s"].append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            r["minflt"].append(after.ru_minflt - before.ru_minflt)
report = {"benchmark": "cpu_allocator_train", "repetitions": reps}
for name in programs:
    for setting in settings:
        for key, values in results[name][setting].items():
            report[f"{name}/{setting}/{key}"] = statistics.median(values)
    on, off = results[name]["cache_on"], results[name]["cache_off"]
    report[f"{name}/tokens_per_s_on_over_off"] = statistics.median(on["tokens_per_s"]) / statistics.median(off["tokens_per_s"])
    report[f"{name}/cpu_s_off_over_on"] = statistics.median(off["cpu_s"]) / statistics.median(on["cpu_s"])
print(json.dumps(report))
PY
