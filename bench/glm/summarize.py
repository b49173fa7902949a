#!/usr/bin/env python3
"""Combines bench/glm/run.sh's results (a folder of <set>.pf.<run>.json and <set>.peers.json
files) into one JSON object on stdout.

Per set: every run (pipeforge's three solvers at --tol 1e-6 and SySCD at 1e-4; each peer at every
rung of its tolerance sweep) with its objective, seconds and rel_gap = (objective - best) / |best|,
best being the lowest objective of any run; then, per library, the fastest run with
rel_gap <= 1e-4 ("the time to it"), and the ratios of the libraries' times to pipeforge's."""
import glob
import json
import os
import sys

TARGET = 1e-4


def main():
    folder, cores, cpu = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    sets = sorted({os.path.basename(p).split(".")[0] for p in glob.glob(os.path.join(folder, "*.pf.*.json"))})
    out = {"machine": {"cores": cores, "cpu": cpu}, "target_rel_gap": TARGET, "sets": []}
    for name in sets:
        runs = []
        data = None
        for path in sorted(glob.glob(os.path.join(folder, name + ".pf.*.json"))):
            r = json.load(open(path))
            data = data or {"examples": r["examples"], "features": r["features"], "nonzeros": r["nonzeros"],
                            "loss": r["options"]["loss"], "lambda": r["options"]["lambda"]}
            runs.append({"library": "pipeforge", "name": "pipeforge-" + r["options"]["solver"],
                         "threads": r["options"]["threads"], "tol": r["options"]["tol"], "objective": r["objective"],
                         "seconds": r["seconds"], "epochs": r["epochs"], "duality_gap": r["duality_gap"]})
        path = os.path.join(folder, f"{name}.peers.json")
        for p in json.load(open(path))["peers"] if os.path.exists(path) else []:
            library = p["name"].split("-")[0]
            if "error" in p:
                runs.append({"library": library, "name": p["name"], "error": p["error"]})
                continue
            for rung in p.get("sweep") or [dict(p, tol=p["params"].get("tol"))]:
                if "objective" in rung:
                    runs.append({"library": library, "name": p["name"], "tol": rung["tol"],
                                 "objective": rung["objective"], "seconds": rung["seconds"]})
        ok = [r for r in runs if "objective" in r]
        best = min(r["objective"] for r in ok)
        for r in ok:
            r["rel_gap"] = (r["objective"] - best) / abs(best)
        fastest = {}
        for r in ok:
            if r["rel_gap"] <= TARGET and (r["library"] not in fastest or r["seconds"] < fastest[r["library"]]["seconds"]):
                fastest[r["library"]] = r
        entry = {"set": name, "data": data, "best_objective": best, "runs": runs,
                 "fastest_within_target": {k: {"name": v["name"], "seconds": v["seconds"]} for k, v in fastest.items()}}
        if "pipeforge" in fastest:
            base = fastest["pipeforge"]["seconds"]
            entry["speedup_of_pipeforge_over"] = {k: v["seconds"] / base for k, v in fastest.items() if k != "pipeforge"}
        out["sets"].append(entry)
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
