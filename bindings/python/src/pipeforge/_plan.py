"""The planner (C API 0.8 "Planning", docs/PLANNING.md): Plan over pipeforge.core."""

import json
import operator

from . import core
from ._api import Model, Trainer, _Closeable, _as_array, _core_trainer_options


class Plan(_Closeable):
    """Chooses how to train `model`: every data-parallel degree, pipeline degree, synchronous
    schedule, chunk count, micro-batch count and activation policy the cluster allows, each
    partitioned, simulated from the model's measured layer profile and ranked by predicted step
    time (docs/PLANNING.md). Planning works on a copy of the model; `inputs`, `targets` are one
    step's batch (all replicas' rows), whose row slices are profiled.

    cluster= a dict or JSON str (docs/PLANNING.md, "Input: the cluster"); None measures this machine
    (devices= its device count, default one per core). memory_limit_bytes= per device (default: the
    cluster's); schedules= and policies= lists of names to search (default: every synchronous
    schedule; none and recompute); max_micro_batches=, max_chunks=, repeats= (profile runs per
    measurement), calibration_steps= (0: none). Other keyword options are Trainer's (the optimizer's
    matter: its state and update time).

    candidates: the ones that fit, fastest first, as dicts (schedule, ranks, chunks, micro_batches,
    data_parallel, activation_policy, layers_per_stage, step_seconds, tokens_per_second,
    peak_memory_bytes, ...). trainer_options(i) gives the Trainer keyword options that run
    candidate i; to_json() and to_svg() render the whole plan."""

    _PLAN_OPTIONS = ("cluster", "devices", "memory_limit_bytes", "schedules", "policies", "max_micro_batches",
                     "max_chunks", "repeats", "calibration_steps")

    def __init__(self, model, inputs, targets, **options):
        if not isinstance(model, Model):
            raise TypeError(f"model must be a pipeforge.Model, not {type(model).__name__}")
        plan_options = {k: options.pop(k) for k in self._PLAN_OPTIONS if k in options}
        unknown = sorted(set(options) - set(Trainer._OPTIONS))
        if unknown:
            raise TypeError(f"unknown plan option(s): {', '.join(unknown)}")
        trainer = _core_trainer_options(options)
        po = core.PlanOptions()
        for name, value in plan_options.items():
            if value is None:
                continue
            if name == "cluster":
                po.cluster_json = value if isinstance(value, str) else json.dumps(value)
            elif name in ("schedules", "policies"):
                if isinstance(value, str):
                    raise TypeError(f"{name} must be a list of str, not a str")
                items = list(value)
                for item in items:
                    if not isinstance(item, str):
                        raise TypeError(f"{name} must be a list of str, not a list holding {type(item).__name__}")
                setattr(po, name, ",".join(items))
            elif name == "memory_limit_bytes":
                po.memory_limit_bytes = float(value)
            else:
                setattr(po, name, operator.index(value))
        if model._handle is None:
            raise ValueError("the model has no native object")
        self._handle = core.Plan.create(model._handle, _as_array(inputs, "inputs"), _as_array(targets, "targets"),
                                        trainer, po)
        self.candidates = [json.loads(self._handle.candidate_json(i)) for i in range(self._handle.num_candidates())]

    def trainer_options(self, index=0):
        """The Trainer keyword options that run candidate `index` (step it on the plan's batch
        divided by data_parallel rows; data_parallel > 1 needs mpirun -np data_parallel * ranks)."""
        c = self.candidates[operator.index(index)]
        options = {"micro_batches": c["micro_batches"], "data_parallel": c["data_parallel"]}
        if c["schedule"] != "sequential":
            options.update(schedule=c["schedule"], stages=c["ranks"], chunks=c["chunks"],
                           layers_per_stage=list(c["layers_per_stage"]), activation_policy=c["activation_policy"])
        return options

    def to_json(self):
        """The whole plan: the cluster, the counts, every candidate that fits (and, when none does,
        smallest_memory_that_works_bytes)."""
        return json.loads(self._handle.to_json())

    def to_svg(self):
        """Predicted step time against peak memory per rank, the Pareto front and the choice marked."""
        return self._handle.to_svg()
