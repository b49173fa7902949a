"""PipeForge for Python: train models through the PipeForge runtime (libpipeforge.so).

    import numpy as np
    import pipeforge

    model = pipeforge.Model.mlp(input_dim=8, hidden=[32, 32], classes=4)
    with pipeforge.Trainer(model, micro_batches=2, seed=1, lr=1e-2) as trainer:
        result = trainer.step(np.zeros((16, 8), np.float32), np.zeros(16, np.int32))
        print(result.loss, trainer.checksum())

    # Pipelined: two ranks running 1F1B; bitwise the same parameters as above.
    with pipeforge.Trainer(model, micro_batches=2, seed=1, lr=1e-2, schedule="1f1b", stages=2) as trainer:
        trainer.step(np.zeros((16, 8), np.float32), np.zeros(16, np.int32))
        print(trainer.bubble_rate, [r.busy for r in trainer.rank_stats])

    # The same under `mpirun -np 2 python3 this.py`: one process per rank, the same parameters;
    # trainer.process() is (rank, 2) there and every process must call trainer.checksum().

    # Let the planner choose the schedule, ranks, chunks, micro-batches and partition.
    plan = pipeforge.Plan(model, np.zeros((16, 8), np.float32), np.zeros(16, np.int32), seed=1, lr=1e-2)
    print(plan.candidates[0], plan.trainer_options(0))

    # Linear models by parallel coordinate descent (SySCD) on libsvm data or arrays.
    linear = pipeforge.train_linear("data.svm", loss="logistic", lambda_=1e-4)
    print(linear.objective, linear.duality_gap, linear.weights[:4])

    schedule = pipeforge.Schedule.generate("1f1b", stages=4, micro_batches=8)
    with schedule.simulate(t_f=1, t_b=1, t_w=1) as simulation:
        print(simulation.bubble_rate, [r.peak_activations for r in simulation.ranks])

Errors raise pipeforge.Error subclasses (InvalidArgumentError is also a ValueError) carrying the
runtime's message. docs/BINDINGS.md has the details.
"""

from . import core as _core
from ._api import (BuiltinData, EvalResult, Metrics, Model, ProcessInfo, RankStats, RunResult, StepInfo, StepResult,
                   Trainer)
from ._linear import LinearModel, train_linear
from ._plan import Plan
from ._schedule import ACTIVATION_POLICIES, COMM_SEMANTICS, SCHEDULE_NAMES, Schedule, Simulation
from ._errors import (CallbackError, CancelledError, CublasError, CudaError, DataLossError, DivergedError, Error,
                      FailedPreconditionError, InternalError, InvalidArgumentError, IoError, MpiError, NcclError,
                      NotFoundError, OutOfMemoryError, TimeoutError, UnimplementedError)

__version__ = _core.version()
# The ABI this package was built for; importing it fails if libpipeforge.so has another.
ABI_VERSION = _core.header_abi_version()

__all__ = [
    "ABI_VERSION", "ACTIVATION_POLICIES", "BuiltinData", "COMM_SEMANTICS", "CallbackError", "CancelledError", "CublasError", "CudaError", "DataLossError", "DivergedError", "Error", "EvalResult",
    "FailedPreconditionError", "InternalError", "InvalidArgumentError", "IoError", "LinearModel", "Metrics", "Model", "MpiError",
    "NcclError", "NotFoundError", "OutOfMemoryError", "Plan", "ProcessInfo", "RankStats", "RunResult", "SCHEDULE_NAMES", "Schedule", "Simulation",
    "StepInfo", "StepResult", "TimeoutError", "Trainer", "UnimplementedError", "train_linear",
]
