"""One process of tests/bindings/python/mpirun_test.py: started by `mpirun -np 2 python3
mpi_worker.py OUT_DIR`, it trains through the Python binding with one process per rank and writes
what it saw to OUT_DIR/rank<launch rank>.json. The test imports it too, for the data and for the
single-process reference run (`reference`)."""

import json
import os
import sys

import numpy as np

import pipeforge

FEATURES, CLASSES, ROWS, MICRO_BATCHES, STEPS, LOADER_STEPS = 8, 4, 16, 4, 3, 2


def rows(position, count):
    """Micro-batch or batch `position`: a deterministic learnable task (exact float32 values)."""
    rng = np.random.default_rng(1000 + position)
    inputs = (rng.integers(-1000, 1001, size=(count, FEATURES)) / 1024.0).astype(np.float32)
    weights = np.array([[1.0 if (f + c) % 3 == 0 else -0.5 for c in range(CLASSES)] for f in range(FEATURES)],
                       dtype=np.float32)
    targets = np.argmax(inputs @ weights, axis=1).astype(np.int32)
    return inputs, targets


def model():
    return pipeforge.Model.mlp(input_dim=FEATURES, hidden=[16, 16, 16], classes=CLASSES)


def options(**extra):
    base = dict(micro_batches=MICRO_BATCHES, seed=5, optimizer="adamw", lr=0.01, clip_norm=0.5,
                recv_timeout_seconds=60)
    base.update(extra)
    return base


def train(trainer):
    """STEPS whole-batch steps, then LOADER_STEPS steps from a loader: the losses as float.hex."""
    losses = [trainer.step(*rows(step, ROWS)).loss.hex() for step in range(STEPS)]
    trainer.set_data_loader(lambda position: rows(10000 + position, ROWS // MICRO_BATCHES))
    losses += [trainer.step_from_loader().loss.hex() for _ in range(LOADER_STEPS)]
    return losses


def reference(**extra):
    """The single-process sequential run of the same options: (losses, checksum)."""
    with pipeforge.Trainer(model(), **options(**extra)) as trainer:
        losses = train(trainer)
        return losses, trainer.checksum()


def parameters(trainer, names):
    """Per parameter: "local" when this process holds it (and can write it), else the error class
    and whether the message names the parameter and the rank that holds it."""
    out = {}
    for name in names:
        try:
            values = trainer.get_parameter(name)
            trainer.set_parameter(name, values)  # the same values: the run is unchanged
            out[name] = "local"
        except pipeforge.Error as e:
            named = f"'{name}'" in str(e) and "held by pipeline rank" in str(e)
            out[name] = f"{type(e).__name__}:{'named' if named else str(e)}"
    return out


def main(out_dir):
    result = {}
    net = model()
    names = net.parameter_names()
    with pipeforge.Trainer(net, schedule="1f1b", ranks=2, **options()) as trainer:
        rank, size = trainer.process()
        result["process"] = [rank, size]
        result["num_ranks"] = trainer.num_ranks
        result["parameters"] = parameters(trainer, names)
        result["losses"] = train(trainer)
        result["local"] = [r.local for r in trainer.rank_stats]
        result["busy"] = [r.busy > 0 for r in trainer.rank_stats]
        result["checksum"] = trainer.checksum()  # collective: every process calls it
        # A checkpoint across the processes (collective): a folder of shards, read back here and
        # into a trainer of this process alone.
        folder = os.path.join(out_dir, "checkpoint")
        trainer.save_checkpoint(folder)
        train(trainer)
        trainer.load_checkpoint(folder)
        result["reloaded_checksum"] = trainer.checksum()
        with pipeforge.Trainer(model(), **options()) as alone:
            alone.load_checkpoint(folder)
            result["alone_checksum"] = alone.checksum()
    # Data parallel: 2 replicas of one rank, reduced in replica order.
    with pipeforge.Trainer(model(), schedule="1f1b", ranks=1, data_parallel=2, gradient_reduction="deterministic",
                           processes="mpi", **options(micro_batches=2)) as trainer:
        result["dp_losses"] = train(trainer)
        result["dp_checksum"] = trainer.checksum()
    with open(os.path.join(out_dir, f"rank{result['process'][0]}.json"), "w") as f:
        json.dump(result, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
