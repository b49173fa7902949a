"""The Python API: Model and Trainer over the SWIG module pipeforge.core."""

import dataclasses
import json as _json
import operator
import os
import typing

import numpy as np

from . import core
from ._errors import CallbackError, DivergedError

_INT32 = np.iinfo(np.int32)


def _as_array(value, what):
    """`value` as a C-contiguous float32 or int32 array. Copies only when it must: a C-contiguous
    float32/int32 array goes to the runtime as it is; a strided one is made contiguous once; other
    floating dtypes become float32 and other integer dtypes int32 (range-checked)."""
    array = np.asarray(value)
    if array.dtype == np.float32 or array.dtype == np.int32:
        return np.ascontiguousarray(array)  # the same object when already contiguous
    if array.dtype.kind == "f":
        return np.ascontiguousarray(array, dtype=np.float32)
    if array.dtype.kind in "iub":
        if array.size and array.dtype.kind != "b" and (array.min() < _INT32.min or array.max() > _INT32.max):
            raise ValueError(f"{what}: values do not fit in int32")
        return np.ascontiguousarray(array, dtype=np.int32)
    raise TypeError(f"{what}: unsupported dtype {array.dtype} (use float32 or int32)")


@dataclasses.dataclass(frozen=True)
class StepResult:
    """The result of one optimizer step."""

    loss: float  # mean loss over the batch
    grad_norm: float  # global gradient L2 norm before clipping; 0.0 with clip_norm 0 (not computed)
    samples: int  # rows in the batch
    tokens: int  # target elements in the batch
    seconds: float  # wall time of the step
    lr: float = 0.0  # the learning rate the step used (the trainer's lr_schedule)
    bubble_rate: float = 0.0  # pipelines: the step's measured idle share (0 for the sequential trainer)

    @classmethod
    def _from_core(cls, r):
        return cls(r.loss, r.grad_norm, r.samples, r.tokens, r.seconds, r.lr, r.bubble_rate)


@dataclasses.dataclass(frozen=True)
class EvalResult:
    """A forward-only pass over held-out data (Trainer.evaluate)."""

    loss: float  # mean over the micro-batches of their mean loss
    accuracy: float  # share of the targets whose largest logit is the target
    micro_batches: int
    samples: int  # rows
    targets: int  # target elements (rows x positions for token models)

    @classmethod
    def _from_core(cls, r):
        return cls(r.loss, r.accuracy, r.micro_batches, r.samples, r.targets)


@dataclasses.dataclass(frozen=True)
class RunResult:
    """What Trainer.run did; eval_loss and eval_accuracy are NaN when no evaluation ran."""

    step: int  # the trainer's step count at the end
    steps_run: int
    loss: float  # the last step's
    eval_loss: float  # the last evaluation's
    eval_accuracy: float
    evaluations: int
    checkpoints: int
    diverged: bool  # a diverged step (non-finite loss, gradient norm or parameter) stopped the run
    last_checkpoint: typing.Optional[str]  # the newest checkpoint saved, or None
    stopped: bool = False  # on_step (or Ctrl-C) ended the run early
    divergence: typing.Optional[str] = None  # with diverged: why, e.g. "the loss is nan"

    @classmethod
    def _from_core(cls, r):
        return cls(r.step, r.steps_run, r.loss, r.eval_loss, r.eval_accuracy, r.evaluations, r.checkpoints,
                   bool(r.diverged), r.last_checkpoint or None, bool(r.stopped), r.divergence or None)


@dataclasses.dataclass(frozen=True)
class StepInfo:
    """What Trainer.run's on_step callback sees after a step."""

    step: int  # the trainer's step count after it
    steps_run: int  # steps this run() has taken, this one included
    tokens: int
    loss: float
    lr: float
    seconds: float


class _StepWatcher(core.StepCallback):
    """Trainer.run's callback (a SWIG director): tells the user's on_step, and turns Ctrl-C or an
    exception in it into "stop after this step", kept to be raised once run() has returned, so that
    nothing crosses into C. It runs on the thread that called run(), where Python delivers Ctrl-C."""

    def __init__(self, user):
        super().__init__()
        self._user = user
        self.exception = None

    def on_step(self, info):
        try:
            if self._user is None:
                return False
            return bool(self._user(StepInfo(info.step, info.steps_run, info.tokens, info.loss, info.lr, info.seconds)))
        except BaseException as error:  # KeyboardInterrupt included
            self.exception = error
            return True


class BuiltinData:
    """A data source the runtime ships, to pass to Trainer.set_data_loader or set_eval_loader:

        BuiltinData("char_text", rows=8, seq_len=64, path=None, held_out_fraction=0.1, held_out=False)
        BuiltinData("synthetic", rows=8, features=32, classes=10, held_out=False)
        BuiltinData("csv", path="digits.csv", rows=8, feature_scale=1/16, held_out_fraction=0.2)
        BuiltinData("token_file", path="train.bin", vocab=50257, rows=8, seq_len=256, held_out_fraction=0.1)
        BuiltinData("cifar10", path="cifar-10-batches-bin", rows=32, held_out=False)

    char_text reads a text file or a folder of them (None: the licence texts in
    /usr/share/common-licenses) and serves windows of seq_len + 1 characters; held_out=True serves
    the last held_out_fraction of the text. token_file (since 0.17) serves the same windows of a
    pre-tokenised file (nanoGPT's uint16 train.bin, llm.c's GPT-2 and Llama-3 files); vocab, which
    the file does not hold, is required, and a token >= vocab fails the step that reads it. cifar10
    (since 0.18) serves CIFAR-10's binary files: path is one .bin file (held_out_fraction of it held
    out) or the cifar-10-batches-bin folder (data_batch_1.bin .. data_batch_5.bin for training,
    test_batch.bin held out); a row is an image's 3072 pixels in channel-major (c, y, x) order, each
    byte v as v / 255, the target its label 0..9. info() says what a model for it needs."""

    _FIELDS = ("rows", "seed", "path", "seq_len", "held_out_fraction", "held_out", "feature_scale", "features",
               "classes", "vocab")

    def __init__(self, kind, **options):
        unknown = sorted(set(options) - set(self._FIELDS))
        if unknown:
            raise TypeError(f"unknown data option(s): {', '.join(unknown)}")
        self._options = core.DataOptions()
        self._options.kind = kind
        for name, value in options.items():
            if value is None:
                continue
            if name == "path":
                value = os.fspath(value)
            elif name == "held_out":
                value = bool(value)
            elif name in ("held_out_fraction", "feature_scale"):
                value = float(value)
            else:
                value = operator.index(value)
            setattr(self._options, name, value)

    def info(self):
        """{"vocab_size": .., "seq_len": ..} for char_text and token_file, {"features": .., "classes": ..}
        otherwise."""
        i = core.builtin_data_info(self._options)
        if self._options.kind in ("char_text", "token_file"):
            return {"vocab_size": i.vocab_size, "seq_len": i.seq_len}
        return {"features": i.features, "classes": i.classes}


@dataclasses.dataclass(frozen=True)
class Metrics:
    """Progress counters of a trainer."""

    step: int  # optimizer steps taken
    last_loss: float
    last_grad_norm: float
    tokens_per_second: float  # of the last step
    total_tokens: int
    data_position: int  # micro-batches taken from data loaders so far


@dataclasses.dataclass(frozen=True)
class RankStats:
    """One rank's share of a timeline: of a simulation (Simulation.ranks, in the cost model's unit) or
    of a pipelined trainer's last step (Trainer.rank_stats, measured, in microseconds from the step
    start)."""

    busy: float  # time spent in actions
    idle: float  # makespan - busy
    first_start: float  # start of its first action
    finish: float  # end of its last action
    peak_activations: int  # most micro-batches held at once (F done, B not yet)
    peak_activation_bytes: float  # the same in bytes
    offloaded_bytes: float = 0.0  # bytes its OFFLOADs move off the device per step (the same come back)
    recomputes: int = 0  # RECOMPUTE actions per step
    local: bool = False  # trainers: this process ran the rank (every rank when the ranks are threads)

    @classmethod
    def _from_core(cls, r):
        return cls(r.busy, r.idle, r.first_start, r.finish, r.peak_activations, r.peak_activation_bytes,
                   r.offloaded_bytes, r.recomputes, bool(r.local))


class ProcessInfo(typing.NamedTuple):
    """Where a trainer's process stands (Trainer.process()): its rank in the mpirun launch and the
    launch's number of processes; 0 and 1 when the ranks are threads of this process. A tuple:
    `rank, size = trainer.process()`."""

    rank: int
    size: int


class _Closeable:
    """close() plus the context-manager protocol; the wrapped core object is `_handle`."""

    _handle = None

    def close(self):
        """Releases the native object now (idempotent); later calls raise FailedPreconditionError."""
        if self._handle is not None:
            self._handle.close()

    @property
    def closed(self):
        return self._handle is None or self._handle.closed()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False


class Model(_Closeable):
    """A model: layers, a loss and the shape of its inputs. Build one with Model.from_json,
    Model.mlp, Model.gpt or Model.from_hf. A Trainer keeps its model alive, so a model may be closed
    once a trainer has been built on it."""

    def __init__(self, handle):
        if not isinstance(handle, core.Model):
            raise TypeError("use Model.from_json, Model.mlp, Model.gpt or Model.from_hf to build a model")
        self._handle = handle

    def __repr__(self):
        if self.closed:
            return "<pipeforge.Model (closed)>"
        return f"<pipeforge.Model {self.num_parameter_elements()} parameters>"

    @classmethod
    def from_json(cls, json):
        """Builds a model from model JSON (a string, or a dict that is serialised first)."""
        if not isinstance(json, str):
            json = _json.dumps(json)
        return cls(core.Model.from_json(json))

    @classmethod
    def from_hf(cls, dir):
        """The model of a Hugging Face Transformers folder's config.json (a Llama or a GPT-2; since
        0.17). Its weights are the folder's once Trainer.load_hf_weights(dir) has loaded them."""
        return cls(core.Model.from_hf(os.fspath(dir)))

    @classmethod
    def mlp(cls, input_dim=None, hidden=None, classes=None, activation=None):
        """MLP classifier: inputs float32 [B, input_dim], targets int32 [B]. Arguments left out take
        the C API's defaults (32, (64, 64), 10, "relu")."""
        config = core.MlpConfig()
        if input_dim is not None:
            config.input_dim = input_dim
        if hidden is not None:
            config.set_hidden([int(h) for h in hidden])
        if classes is not None:
            config.classes = classes
        if activation is not None:
            config.activation = activation
        return cls(core.Model.mlp(config))

    @classmethod
    def gpt(cls, vocab=None, seq_len=None, d_model=None, heads=None, layers=None, mlp_hidden=None):
        """Small GPT: inputs int32 token ids [B, T], targets int32 [B, T], T <= seq_len. Arguments
        left out take the C API's defaults."""
        config = core.GptConfig()
        for name, value in (("vocab", vocab), ("seq_len", seq_len), ("d_model", d_model), ("heads", heads),
                            ("layers", layers), ("mlp_hidden", mlp_hidden)):
            if value is not None:
                setattr(config, name, value)
        return cls(core.Model.gpt(config))

    def to_json(self):
        """The model JSON that rebuilds this model (architecture, not parameter values)."""
        return self._handle.to_json()

    def parameter_names(self):
        """Parameter names in model order, e.g. ["fc0.weight", "fc0.bias", ...]."""
        return [self._handle.parameter_name(i) for i in range(self._handle.num_parameters())]

    def num_parameter_elements(self):
        """Total number of parameter values."""
        return self._handle.num_parameter_elements()

    def partition_balanced(self, inputs, targets, stages):
        """Layers per stage that minimise the slowest of `stages` stages, from each top-level
        layer's time measured on the micro-batch (inputs, targets); pass it as
        Trainer(layers_per_stage=...)."""
        return list(self._handle.partition_balanced(_as_array(inputs, "inputs"), _as_array(targets, "targets"),
                                                    operator.index(stages)))

    def partition_by_parameters(self, stages):
        """Layers per stage that minimise the largest of `stages` stages' parameter counts, from
        the parameters' shapes only (the command line's default partition; since 0.10); pass it
        as Trainer(layers_per_stage=...)."""
        return list(self._handle.partition_by_parameters(operator.index(stages)))


class _LoaderAdapter(core.LoaderCallback):
    """Serves micro-batches from a Python loader; called by the runtime on the thread that runs
    step_from_loader, holding the GIL (SWIG takes it). Never lets an exception out: it keeps it
    (for step_from_loader to chain) and returns its text, which the runtime reports."""

    def __init__(self, loader):
        super().__init__()
        next_method = getattr(loader, "next", None)
        if callable(next_method):
            self._next = next_method
        elif callable(loader):
            self._next = loader
        else:
            raise TypeError("a data loader is a callable loader(position) -> (inputs, targets), "
                            "or an object with such a next(position) method")
        seek_method = getattr(loader, "seek", None)
        self._seek = seek_method if callable(seek_method) else None
        self.loader = loader
        self.exception = None

    def next(self, position, batch):
        try:
            inputs, targets = self._next(position)
            batch.set_inputs(_as_array(inputs, "inputs"))
            batch.set_targets(_as_array(targets, "targets"))
            return ""
        except BaseException as e:  # noqa: B902 -- nothing may unwind into the runtime
            return self._failed(e)

    def seek(self, position):
        if self._seek is None:
            return ""
        try:
            self._seek(position)
            return ""
        except BaseException as e:  # noqa: B902
            return self._failed(e)

    def _failed(self, exception):
        self.exception = exception
        kind = type(exception)
        name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
        text = str(exception)
        return f"{name}: {text}" if text else name


def _config_text(key, value):
    """A config entry's value in the runtime's text form: True -> "true", [3, 4] -> "3,4"."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(_config_text(key, v) for v in value)
    if isinstance(value, (str, int, float, np.integer, np.floating)):
        return str(value)
    raise TypeError(f"config[{key!r}] must be a str, number, bool or list, not {type(value).__name__}")


_INT_OPTIONS = ("micro_batches", "seed", "blas_threads", "stages", "chunks", "data_parallel", "ranks",
                "spectrain_version", "pipemare_anneal_updates", "warmup_steps", "decay_steps", "seq_slices",
                "adapt_patience", "slow_rank")
_FLOAT_OPTIONS = ("lr", "momentum", "weight_decay", "beta1", "beta2", "eps", "clip_norm", "recv_timeout_seconds",
                  "activation_budget_bytes", "pipemare_decay", "min_lr", "adapt_threshold", "slow_factor")


def _int_option(name, value):
    """An int option's value, or TypeError naming it (a bool or a float is not taken for an int)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an int, not bool")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(value).__name__}") from None


def _float_option(name, value):
    """A number option's value as float, or TypeError naming it ("0.1" is not taken for 0.1)."""
    if isinstance(value, (str, bytes, bool, np.bool_)) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    return float(value)


def _core_trainer_options(options):
    """core.TrainerOptions from Trainer's keyword options (checked by name: see Trainer)."""
    core_options = core.TrainerOptions()
    for name, value in options.items():
        if value is None:
            continue
        if name in ("schedule", "schedule_text", "activation_policy", "offload_dir", "devices", "processes",
                    "gradient_reduction", "local_head", "lr_schedule"):
            if name == "offload_dir" and isinstance(value, os.PathLike):
                value = os.fspath(value)
            if name == "devices" and not isinstance(value, (str, bytes)):
                try:
                    entries = list(value)
                except TypeError:
                    raise TypeError(f"devices must be a str or a list of str, not {type(value).__name__}") from None
                for entry in entries:
                    if not isinstance(entry, str):
                        raise TypeError(f"devices must be a str or a list of str, not a list holding "
                                        f"{type(entry).__name__}")
                value = ",".join(entries)
            if not isinstance(value, str):
                raise TypeError(f"{name} must be a str, not {type(value).__name__}")
            if not value:
                default = "the default" if name == "local_head" else "none"
                raise ValueError(f"{name} is empty (leave it out, or None, for {default})")
            setattr(core_options, name, value)
        elif name in _INT_OPTIONS:
            setattr(core_options, name, _int_option(name, value))
        elif name in _FLOAT_OPTIONS:
            setattr(core_options, name, _float_option(name, value))
        elif name == "optimizer":
            if not isinstance(value, str):
                raise TypeError(f"optimizer must be a str (\"adamw\" or \"sgd\"), not {type(value).__name__}")
            setattr(core_options, name, value)
        elif name in ("vertical_sync", "adapt"):
            if not isinstance(value, (bool, np.bool_)):
                raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
            setattr(core_options, name, bool(value))
        elif name == "config":
            if not isinstance(value, dict):
                raise TypeError(f"config must be a dict of option keys to values, not {type(value).__name__}")
            for key, entry in value.items():
                if not isinstance(key, str):
                    raise TypeError(f"config keys must be str, not {type(key).__name__}")
                core_options.set(key, _config_text(key, entry))
        elif name == "layers_per_stage":
            if isinstance(value, (str, bytes)):
                raise TypeError("layers_per_stage must be a sequence of ints")
            core_options.set_layers_per_stage([operator.index(n) for n in value])
        else:
            setattr(core_options, name, value)
    return core_options


class Trainer(_Closeable):
    """Trains a model: parameters, optimizer state and an optional data loader.

    Keyword options (left out or None: the C API's defaults): micro_batches, seed, optimizer
    ("adamw" or "sgd"), lr, momentum, weight_decay, beta1, beta2, eps, clip_norm, blas_threads.
    micro_batches defaults to 1 without a schedule and to 2 x the pipeline ranks with one (so that
    the ranks overlap; pass a count that divides your batch when that does not).

    Pipelined training (docs/EXECUTION.md): schedule="1f1b" (a name from SCHEDULE_NAMES) with
    stages=P ranks and chunks=V model chunks per rank, or schedule_text="..." (a schedule in the
    text form), runs one worker per rank; layers_per_stage=[...] splits the model's top-level layers
    (default: balancing their parameter counts; config={"partition": "even"} for equal layer
    counts) and recv_timeout_seconds bounds a rank's wait for a peer (default 60). config= is a dict
    of option keys to values (docs/CAPABILITIES.md, "Config keys"): any option as a key/value entry,
    checked by the runtime, winning over the keywords. The
    parameters stay bitwise equal to the sequential trainer's. After a step, num_ranks, rank_stats,
    bubble_rate and the timeline renderings measure it.

    Activation memory of pipelined training (docs/MEMORY.md; the results stay bitwise equal):
    activation_policy= "none" (default), "recompute", "offload-host", "offload-file", "selective" or
    "balance"; activation_budget_bytes= selective's per-rank limit on device-resident activation
    bytes; offload_dir= the folder for offload-file (and selective) files (default $TMPDIR or /tmp).
    rank_stats then reports offloaded_bytes and recomputes.

    Where to train (docs/CUDA.md): devices= "cpu" (default), "cuda:N", or for a pipeline one device
    per rank, as a comma-separated str ("cuda:0,cuda:1") or a list of str (["cuda:0", "cuda:1"]);
    one device means every rank.

    One process per rank (docs/EXECUTION.md, "Several processes"): processes= "auto" (default: one
    process per rank when started by mpirun with more than one process and a schedule is set, else
    threads), "threads" or "mpi" (an error unless started by mpirun). `mpirun -np P python3
    train.py` then runs rank r of the schedule in process r: every process builds the same model and
    trainer and steps it on the same data, and gets the same results; get_parameter/set_parameter
    work on the parameters of the process's own stages (FailedPreconditionError elsewhere),
    checksum() must be called by every process, and save_checkpoint/load_checkpoint are collective
    (every process calls them): the path becomes a folder of per-rank shards and a manifest, which
    also loads into a trainer of one process (docs/TRAINING.md). process()
    gives (rank, size); rank_stats[r].local says which rank this process ran. data_parallel=D
    trains D pipeline replicas on disjoint micro-batches (mpirun -np D*P; micro_batches is per
    replica; without a schedule the sequential trainer reproduces D replicas' arithmetic);
    gradient_reduction= "allreduce" (default) or "deterministic" (bitwise equal to the sequential
    trainer). ranks=P is stages= under the name the schedule IR uses.

    Asynchronous schedules (docs/SCHEDULES.md, "Asynchronous schedules"): schedule= "pipedream",
    "pipedream-2bw", "spectrain" or "pipemare" runs without a flush: a step is a window of
    micro_batches (>= ranks - 1) micro-batches and leaves some in flight, which the next step or
    drain() finishes (call it before reading the final parameters, and before a checkpoint: one
    with micro-batches in flight is FailedPreconditionError; pipemare's is UnimplementedError).
    Their options: vertical_sync= (pipedream; bool, default False), spectrain_version= (spectrain;
    1, the paper's and the default, or 2), pipemare_anneal_updates= (pipemare; updates over which
    the learning rate anneals, default 100, 0 = none) and pipemare_decay= (pipemare; the decay of
    the discrepancy average in [0, 1), default 0.9). One set for another schedule is
    InvalidArgumentError naming both.

    Local learning (docs/SCHEDULES.md, "Local learning"): schedule= "ppll" or "local-updates"
    trains every stage but the last on an auxiliary head of its own (no gradient crosses ranks);
    steps are windows as above (drain() at the end; checkpoints are not supported yet).
    local_head= the heads' kind: "auto" (the default: LayerNorm + linear for token models, linear
    for feature models), "linear", "layernorm-linear" or "mlp". A kind other than "auto" with
    another schedule, or an unknown kind, is InvalidArgumentError naming it.

    Learning-rate schedule (docs/TRAINING.md): lr_schedule= "constant" (default), "cosine" or
    "linear"; warmup_steps= steps of linear warm-up; decay_steps= (cosine, linear) steps of decay to
    min_lr= after it. Each StepResult.lr is the step's rate; a trainer resumed from a checkpoint
    follows the schedule bitwise.

    Sequence-sliced 1F1B (C API 0.7; docs/SCHEDULES.md, "Sequence-sliced 1F1B"): schedule="seq1f1b"
    with seq_slices=S runs each micro-batch as S slices of its token sequence (a token model such
    as the GPT whose seq_len S divides; the CPU, threads, one replica, activation_policy "none"):
    less activation memory per rank, losses equal to 1f1b's within 1e-5 relative (not bitwise).
    seq_slices defaults to 1; a value the runtime cannot slice with is InvalidArgumentError naming
    seq_slices.

    Fail-slow adaptation (C API 0.9; docs/PLANNING.md, "Adapting to a slow rank"): adapt=True with
    a synchronous schedule profiles the model on the first step's micro-batch and re-partitions
    live when a rank stays adapt_threshold= (default 1.5) times slower than predicted for
    adapt_patience= (default 3) steps in a row; the losses and parameters stay bitwise equal to the
    run without it. The adaptations property lists the moves. slow_rank= and slow_factor= are test
    and benchmark knobs: that pipeline rank's compute takes slow_factor times as long. Adaptation
    with what it does not support (no or an asynchronous schedule, one process per rank, data
    parallelism) is InvalidArgumentError naming adapt.

    The training loop (docs/TRAINING.md): set_data_loader and set_eval_loader (a callable, a
    loader object or a BuiltinData), then run(steps, eval_every=, checkpoint_every=,
    checkpoint_dir=, keep_checkpoints=, metrics_log=) or evaluate(micro_batches); partition is the
    layers per stage in use.

    Long calls (step, step_from_loader, checkpoints) release the GIL. A trainer is not safe to use
    from two threads at once."""

    _OPTIONS = ("micro_batches", "seed", "optimizer", "lr", "momentum", "weight_decay", "beta1", "beta2", "eps",
                "clip_norm", "blas_threads", "schedule", "schedule_text", "stages", "chunks", "layers_per_stage",
                "recv_timeout_seconds", "activation_policy", "activation_budget_bytes", "offload_dir",
                "devices", "processes", "data_parallel", "gradient_reduction", "ranks", "vertical_sync",
                "spectrain_version", "pipemare_anneal_updates", "pipemare_decay", "local_head", "lr_schedule",
                "warmup_steps", "decay_steps", "min_lr", "seq_slices", "adapt", "adapt_threshold", "adapt_patience",
                "slow_rank", "slow_factor", "config")

    def __init__(self, model: "Model", *,
                 micro_batches: typing.Optional[int] = None, seed: typing.Optional[int] = None,
                 optimizer: typing.Optional[str] = None, lr: typing.Optional[float] = None,
                 momentum: typing.Optional[float] = None, weight_decay: typing.Optional[float] = None,
                 beta1: typing.Optional[float] = None, beta2: typing.Optional[float] = None,
                 eps: typing.Optional[float] = None, clip_norm: typing.Optional[float] = None,
                 blas_threads: typing.Optional[int] = None,
                 schedule: typing.Optional[str] = None, schedule_text: typing.Optional[str] = None,
                 stages: typing.Optional[int] = None, chunks: typing.Optional[int] = None,
                 layers_per_stage: typing.Optional[typing.Sequence[int]] = None,
                 recv_timeout_seconds: typing.Optional[float] = None,
                 activation_policy: typing.Optional[str] = None, activation_budget_bytes: typing.Optional[float] = None,
                 offload_dir: typing.Optional[typing.Union[str, os.PathLike]] = None,
                 devices: typing.Optional[typing.Union[str, typing.Sequence[str]]] = None,
                 processes: typing.Optional[str] = None, data_parallel: typing.Optional[int] = None,
                 gradient_reduction: typing.Optional[str] = None, ranks: typing.Optional[int] = None,
                 vertical_sync: typing.Optional[bool] = None, spectrain_version: typing.Optional[int] = None,
                 pipemare_anneal_updates: typing.Optional[int] = None, pipemare_decay: typing.Optional[float] = None,
                 local_head: typing.Optional[str] = None,
                 lr_schedule: typing.Optional[str] = None, warmup_steps: typing.Optional[int] = None,
                 decay_steps: typing.Optional[int] = None, min_lr: typing.Optional[float] = None,
                 seq_slices: typing.Optional[int] = None,
                 adapt: typing.Optional[bool] = None, adapt_threshold: typing.Optional[float] = None,
                 adapt_patience: typing.Optional[int] = None, slow_rank: typing.Optional[int] = None,
                 slow_factor: typing.Optional[float] = None,
                 config: typing.Optional[typing.Dict[str, typing.Any]] = None):
        options = {name: value for name, value in locals().items() if name in self._OPTIONS}
        if not isinstance(model, Model):
            raise TypeError(f"model must be a pipeforge.Model, not {type(model).__name__}")
        core_options = _core_trainer_options(options)
        if model._handle is None:
            raise ValueError("the model has no native object")
        self._loader = None
        self._eval_loader = None
        self._handle = core.Trainer.create(model._handle, core_options)
        self._schedule = schedule or ("custom" if schedule_text else None)

    def __repr__(self):
        if self.closed:
            return "<pipeforge.Trainer (closed)>"
        how = f"schedule={self._schedule!r}, ranks={self.num_ranks}" if self._schedule else "sequential"
        return f"<pipeforge.Trainer {how}, step {self.metrics().step}>"

    def step(self, inputs, targets):
        """One optimizer step on a whole batch, split into micro_batches equal micro-batches.
        `inputs` and `targets` are numpy arrays (or anything numpy.asarray takes); see _as_array for
        when they are copied."""
        return StepResult._from_core(self._handle.step(_as_array(inputs, "inputs"), _as_array(targets, "targets")))

    def set_data_loader(self, loader):
        """Installs a data loader: a callable loader(position) -> (inputs, targets), or an object with
        next(position) -> (inputs, targets) and, optionally, seek(position). `position` counts
        micro-batches (0, 1, 2, ... across steps). A BuiltinData serves one of the runtime's data
        sources. None removes the loader."""
        self._loader = self._install(self._handle.set_data_loader, self._handle.set_builtin_data, loader)

    def set_eval_loader(self, loader):
        """Installs the held-out loader that evaluate() and run() evaluate on (as set_data_loader;
        every evaluation reads its micro-batches from position 0). None removes it."""
        self._eval_loader = self._install(self._handle.set_eval_loader, self._handle.set_builtin_eval_data, loader)

    def _install(self, set_callback, set_builtin, loader):
        if loader is None:
            set_callback(None)
            return None
        if isinstance(loader, BuiltinData):
            set_builtin(loader._options)
            return None
        adapter = _LoaderAdapter(loader)
        set_callback(adapter)
        return adapter  # the runtime calls it: keep it alive while it is installed

    def _with_loaders(self, call):
        """Runs `call`, chaining a loader's exception to the CallbackError it caused."""
        adapters = [a for a in (self._loader, self._eval_loader) if a is not None]
        for adapter in adapters:
            adapter.exception = None
        try:
            return call()
        except CallbackError as error:
            cause = next((a.exception for a in adapters if a.exception is not None), None)
            if cause is None:
                raise
            for adapter in adapters:
                adapter.exception = None
            if isinstance(cause, (KeyboardInterrupt, SystemExit)):
                raise cause from None
            raise error from cause

    def step_from_loader(self):
        """One step on micro_batches micro-batches from the data loader. If the loader raises, this
        raises CallbackError with the loader's exception type and message in its text and the
        exception itself as __cause__ (a KeyboardInterrupt or SystemExit is re-raised as is); the
        trainer is then unchanged and the step can be retried."""
        return StepResult._from_core(self._with_loaders(self._handle.step_from_loader))

    def evaluate(self, micro_batches):
        """Forward-only over micro-batches 0 .. micro_batches - 1 of the eval loader, through the
        trainer's own pipeline: no gradient, no update (an EvalResult). Asynchronous and
        local-learning schedules: FailedPreconditionError."""
        return EvalResult._from_core(self._with_loaders(lambda: self._handle.evaluate(operator.index(micro_batches))))

    def run(self, steps, eval_every=0, eval_micro_batches=0, checkpoint_every=0, checkpoint_dir=None,
            keep_checkpoints=0, metrics_log=None, on_step=None):
        """The training loop: `steps` steps from the data loader; with eval_every > 0 an evaluation
        (eval_micro_batches, default micro_batches) after every eval_every-th step and the last;
        with checkpoint_every > 0 a checkpoint into checkpoint_dir (step-N.pfckpt) after every
        checkpoint_every-th step and the last, keeping the newest keep_checkpoints (0 = all); a
        JSON Lines metrics_log with one line per step. load_checkpoint(checkpoint_dir) resumes from
        the newest. Returns a RunResult.

        on_step(info), when given, is called after every step but the last with a StepInfo; a true
        return ends the run after that step as if it were the last (checkpoint_dir gets its
        checkpoint) and the result says stopped. Ctrl-C (KeyboardInterrupt) during run() does the
        same at the end of the step in progress, then is raised again; so is an exception raised
        by on_step. A diverged step (a NaN or infinity in the loss, the gradient norm or a parameter
        after the update) ends the run with DivergedError (its `result` is the RunResult, whose
        `divergence` says what diverged; no checkpoint is written for that step)."""
        o = core.RunOptions()
        o.steps = operator.index(steps)
        o.eval_every = operator.index(eval_every)
        o.eval_micro_batches = operator.index(eval_micro_batches)
        o.checkpoint_every = operator.index(checkpoint_every)
        o.checkpoint_dir = "" if checkpoint_dir is None else os.fspath(checkpoint_dir)
        o.keep_checkpoints = operator.index(keep_checkpoints)
        o.metrics_log = "" if metrics_log is None else os.fspath(metrics_log)
        if on_step is not None and not callable(on_step):
            raise TypeError(f"on_step must be callable, not {type(on_step).__name__}")
        watcher = _StepWatcher(on_step)
        result = RunResult._from_core(self._with_loaders(lambda: self._handle.run_watched(o, watcher)))
        if watcher.exception is not None:
            raise watcher.exception
        if result.diverged:
            raise DivergedError(f"training diverged at step {result.step}: {result.divergence} (no checkpoint "
                                "was written for it; try a smaller lr or clip_norm)", result)
        return result

    @property
    def partition(self):
        """Top-level layers per stage of the partition in use (one entry for the sequential trainer)."""
        return list(self._handle.partition())

    def drain(self):
        """Asynchronous and local-learning schedules: runs the micro-batches still in flight on
        every rank, so that every stage has applied every micro-batch it was given (call it before
        reading the final parameters or at the end of training); the next step refills the
        pipeline. A no-op
        for synchronous schedules and the sequential trainer. Releases the GIL."""
        self._handle.drain()

    def metrics(self):
        """Progress counters (a Metrics)."""
        m = self._handle.metrics()
        return Metrics(m.step, m.last_loss, m.last_grad_norm, m.tokens_per_second, m.total_tokens, m.data_position)

    def get_parameter(self, name):
        """A float32 numpy array with a copy of parameter `name` (NotFoundError if there is none)."""
        out = np.empty(self._handle.parameter_shape(name), dtype=np.float32)
        self._handle.copy_parameter(name, out)
        return out

    def set_parameter(self, name, values):
        """Overwrites parameter `name` with `values` (converted to float32; the shape must match)."""
        shape = self._handle.parameter_shape(name)
        array = np.ascontiguousarray(values, dtype=np.float32)
        if array.shape != tuple(shape):
            raise ValueError(f"parameter '{name}' has shape {tuple(shape)}, values have shape {array.shape}")
        self._handle.set_parameter(name, array)

    def checksum(self):
        """SHA-256 (hex) of every parameter: equal checksums mean bitwise-equal parameters. With one
        process per rank every process must call it (it gathers each parameter from its owner)."""
        return self._handle.checksum()

    def process(self):
        """A ProcessInfo(rank, size): this process's rank in the mpirun launch and the number of
        processes, for a trainer with one process per rank; (0, 1) when the ranks are threads."""
        p = self._handle.process()
        return ProcessInfo(p.rank, p.size)

    def save_checkpoint(self, path):
        """Writes parameters, optimizer state, step and data position to `path`, atomically."""
        self._handle.save_checkpoint(os.fspath(path))

    def load_checkpoint(self, path):
        """Restores a checkpoint written for a model with the same parameters."""
        self._handle.load_checkpoint(os.fspath(path))

    def load_hf_weights(self, dir):
        """Loads the weights of a Hugging Face Transformers folder (model.safetensors or its
        shards) into the parameters this process holds (since 0.17). Everything is checked first:
        a missing, extra or misshapen tensor raises InvalidArgumentError naming it and changes
        nothing."""
        self._handle.load_hf_weights(os.fspath(dir))

    def export_hf(self, dir, names="hf-llama"):
        """Writes the model and its current weights as a Transformers folder, config.json and
        model.safetensors, that from_pretrained(dir) loads (since 0.17). names: "hf-llama"
        (LlamaForCausalLM) or "hf-gpt2" (GPT2LMHeadModel, for a GPT with tie_embeddings). This
        process must hold every parameter (FailedPreconditionError with one process per pipeline
        rank)."""
        self._handle.export_hf(os.fspath(dir), names)

    # ---- pipelined training: measurements of the last step ----

    @property
    def num_ranks(self):
        """Pipeline ranks (1 for the sequential trainer)."""
        return self._handle.num_ranks()

    @property
    def rank_stats(self):
        """A list of RankStats, rank 0 first, measured over the last step (microseconds from the
        step start). FailedPreconditionError for the sequential trainer or before the first step."""
        return [RankStats._from_core(self._handle.rank_stats(i)) for i in range(self._handle.num_ranks())]

    @property
    def bubble_rate(self):
        """The last step's measured bubble rate: (makespan - busiest rank's busy time) / makespan.
        FailedPreconditionError for the sequential trainer or before the first step."""
        return self._handle.bubble_rate()

    def timeline_to_chrome_trace(self):
        """The last step's measured timeline as Chrome trace JSON (https://ui.perfetto.dev)."""
        return self._handle.timeline_to_chrome_trace()

    def timeline_to_svg(self):
        """The last step's measured timeline as an SVG image."""
        return self._handle.timeline_to_svg()

    @property
    def adaptations(self):
        """The re-partitions of an adaptive trainer (adapt=True) so far, oldest first: a list of
        dicts {"step": the step count when it decided, "slowdown": per rank, "from": layers per
        stage, "to": layers per stage from the next step on}; [] without adaptation."""
        return _json.loads(self._handle.adaptations_json())

    @property
    def fill_report(self):
        """What the fill job (config={"fill": "sweep:grid.json"}: a packed MLP sweep run in the
        pipeline's bubbles, docs/SWEEP.md) has done so far: a dict {"kind": "sweep", "steps_taken",
        "steps_total", "fill_seconds", "models": the models ranked by held-out loss, ...}; None
        without a fill job."""
        return _json.loads(self._handle.fill_report_json())

    def close(self):
        """Destroys the native trainer and its data loader now (idempotent)."""
        super().close()
        self._loader = None
        self._eval_loader = None
