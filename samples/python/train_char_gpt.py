"""Trains a small GPT as a character-level language model on the licence texts every Debian machine
has (/usr/share/common-licenses), through the Python binding. The same model, data and settings as
the C sample (samples/train_char_gpt.c), so it prints the same losses and parameter checksum.

    bazel run //samples/python:train_char_gpt -- [--steps N] [--text-dir DIR] [--checkpoint FILE]

Pipelined, one process per rank, under mpirun (the same losses and checksum: a synchronous schedule
keeps the parameters bitwise equal to the sequential run's); only rank 0 prints:

    bazel build //samples/python:train_char_gpt
    mpirun -np 2 bazel-bin/samples/python/train_char_gpt --schedule 1f1b --stages 2
    # or, with the package on the path: PYTHONPATH=bazel-bin/bindings/python \
    #   mpirun -np 2 -x PYTHONPATH python3 samples/python/train_char_gpt.py --schedule 1f1b --stages 2

(as root, Open MPI also wants OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1, and on a
machine with fewer cores than processes --oversubscribe). --data-parallel D trains D replicas of
the pipeline on D x 4 micro-batches per step (mpirun -np D*P). Without mpirun, --schedule runs the
ranks as threads of this process. Checkpoints are not supported with one process per rank yet.
"""

import argparse
import os
import sys

import numpy as np

import pipeforge

ROWS, SEQ_LEN, MICRO_BATCHES = 8, 64, 4
MASK = (1 << 64) - 1


def read_texts(folder):
    """Every regular file in `folder` (sorted by name, links skipped), as one bytes object."""
    parts = []
    for name in sorted(os.listdir(folder)):
        if name.startswith("."):
            continue
        path = os.path.join(folder, name)
        if os.path.isfile(path) and not os.path.islink(path):
            with open(path, "rb") as f:
                parts.append(f.read())
    return b"".join(parts)


def mix(z):
    """SplitMix64: the window of (position, row) is a pure function of both."""
    z = (z + 0x9E3779B97F4A7C15) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


class TextLoader:
    """Micro-batch `position`: ROWS windows of SEQ_LEN + 1 characters at pseudo-random offsets."""

    def __init__(self, tokens):
        self.tokens = tokens

    def next(self, position):
        starts = [mix(position * 1000003 + r) % (len(self.tokens) - SEQ_LEN - 1) for r in range(ROWS)]
        windows = np.stack([self.tokens[s:s + SEQ_LEN + 1] for s in starts])
        return windows[:, :-1], windows[:, 1:]  # strided views: the binding makes them contiguous


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--text-dir", default="/usr/share/common-licenses")
    parser.add_argument("--checkpoint", help="save the trained state here")
    parser.add_argument("--schedule", help="pipelined: a schedule name, e.g. 1f1b (under mpirun: one process per rank)")
    parser.add_argument("--stages", type=int, default=2, help="pipeline ranks of --schedule (default 2)")
    parser.add_argument("--data-parallel", type=int, default=1, help="pipeline replicas (mpirun -np D*stages)")
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error("--steps must be >= 1")
    pipeline = dict(schedule=args.schedule, ranks=args.stages) if args.schedule else {}
    # `bazel run` starts us in the runfiles: relative paths are the caller's.
    os.chdir(os.environ.get("BUILD_WORKING_DIRECTORY", "."))

    try:
        text = read_texts(args.text_dir)
    except OSError as e:
        print(f"cannot read '{args.text_dir}': {e}", file=sys.stderr)
        return 1
    if len(text) < 2 * SEQ_LEN:
        print(f"no usable text in '{args.text_dir}'", file=sys.stderr)
        return 1
    raw = np.frombuffer(text, dtype=np.uint8)
    vocabulary, tokens = np.unique(raw, return_inverse=True)  # ids of the sorted distinct bytes
    tokens = tokens.astype(np.int32)

    model = pipeforge.Model.gpt(vocab=len(vocabulary), seq_len=SEQ_LEN, d_model=64, heads=4, layers=2)
    num_parameters = model.num_parameter_elements()
    with pipeforge.Trainer(model, micro_batches=MICRO_BATCHES, seed=1, optimizer="adamw", lr=3e-3,
                           clip_norm=1.0, data_parallel=args.data_parallel, **pipeline) as trainer:
        model.close()  # the trainer keeps it
        rank, size = trainer.process()  # (0, 1) unless mpirun started one process per rank
        say = print if rank == 0 else (lambda *a, **k: None)
        trainer.set_data_loader(TextLoader(tokens))
        say(f"PipeForge {pipeforge.__version__}: character GPT ({num_parameters} parameters, "
            f"vocabulary {len(vocabulary)}) on {args.text_dir}, {len(tokens)} characters")
        say(f"{args.steps} steps of {args.data_parallel * MICRO_BATCHES} micro-batches x {ROWS} sequences x "
            f"{SEQ_LEN} characters" + (f", {args.schedule} on {trainer.num_ranks} ranks" if args.schedule else "") +
            (f", {size} processes" if size > 1 else ""))
        first = loss = None
        for step in range(1, args.steps + 1):
            result = trainer.step_from_loader()
            loss = result.loss
            first = loss if first is None else first
            if step == 1 or step % 25 == 0 or step == args.steps:
                speed = result.tokens / result.seconds if result.seconds > 0 else 0.0
                say(f"step {step:4d}  loss {loss:.4f}  {speed:7.0f} tok/s", flush=True)
        if args.checkpoint:
            try:
                trainer.save_checkpoint(args.checkpoint)
            except pipeforge.FailedPreconditionError as e:
                say(f"no checkpoint: {e}", file=sys.stderr)
                return 1
        checksum = trainer.checksum()  # every process takes part (one process per rank)
        say(f"loss {first:.4f} -> {loss:.4f}; parameter checksum {checksum}")
    return 0 if loss < first else 1


if __name__ == "__main__":
    sys.exit(main())
