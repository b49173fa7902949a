"""Pipeline schedules and their simulation: Schedule, Simulation and RankStats over pipeforge.core."""

import operator

from . import core
from ._api import RankStats, _Closeable

# The schedules Schedule.generate knows (the C API's pf_schedule_generate); after the synchronous
# ones (among them the sequence-sliced "seq1f1b": Trainer(seq_slices=S); Schedule.generate gives
# its one-slice form, 1f1b's order) come the asynchronous "pipedream" ... "pipemare" and the
# local-learning "ppll", "local-updates" (no flush; Trainer.drain()).
SCHEDULE_NAMES = ("gpipe", "1f1b", "interleaved-1f1b", "bfs", "zb-h1", "zb-h2", "zb-v", "zb-auto",
                  "interleaved-zb", "dualpipe-v", "v-half", "v-min", "bitpipe", "seq1f1b", "pipedream",
                  "pipedream-2bw", "spectrain", "pipemare", "ppll", "local-updates")
# The activation-memory policies (Schedule.apply_activation_policy, Trainer(activation_policy=...)).
ACTIVATION_POLICIES = ("none", "recompute", "offload-host", "offload-file", "selective", "balance")
# What a SEND/RECV pair means (Schedule.validate, Schedule.simulate; docs/SCHEDULES.md,
# "Communication semantics"): "rendezvous" (both block until the other is reached) or "posted" (MPI
# isend/irecv, NCCL, PyTorch: a SEND never blocks, only the compute consuming a RECV's tensor waits).
COMM_SEMANTICS = ("rendezvous", "posted")


def _comm(comm):
    if not isinstance(comm, str):
        raise TypeError(f"comm must be a str, not {type(comm).__name__}")
    return comm


class Simulation(_Closeable):
    """A schedule timed under a cost model (Schedule.simulate). The results (makespan, ideal,
    bubble_rate, max_span, span_bubble_rate, num_ranks, ranks) are read when it is made and stay
    readable after close(); the renderings need the native object. Times are in the cost model's
    unit."""

    def __init__(self, handle):
        if not isinstance(handle, core.Simulation):
            raise TypeError("use Schedule.simulate to make a Simulation")
        self._handle = handle
        s = handle.summary()
        self.makespan = s.makespan  # latest finish over all ranks
        self.ideal = s.ideal  # bubble-free time of the busiest rank
        self.bubble_rate = s.bubble_rate  # (makespan - ideal) / makespan
        self.num_ranks = s.num_ranks
        self.max_span = s.max_span  # longest finish - first start of a rank
        self.span_bubble_rate = s.span_bubble_rate  # (max_span - ideal) / max_span (the zero-bubble paper's)
        self.ranks = [RankStats._from_core(handle.rank_stats(i)) for i in range(s.num_ranks)]

    def to_chrome_trace(self):
        """The timeline as Chrome trace JSON (chrome://tracing, https://ui.perfetto.dev): a track per
        rank, an event per action."""
        return self._handle.to_chrome_trace()

    def to_svg(self):
        """The timeline as an SVG image."""
        return self._handle.to_svg()

    def to_ascii(self, width=100):
        """The timeline as a terminal grid `width` (>= 10) characters wide."""
        return self._handle.to_ascii(operator.index(width))

    def __repr__(self):
        return (f"Simulation(makespan={self.makespan:g}, ideal={self.ideal:g}, bubble_rate={self.bubble_rate:.4f}, "
                f"num_ranks={self.num_ranks})")


def _floats(values, what):
    try:
        return [float(v) for v in values]
    except TypeError:
        raise TypeError(f"{what}: expected a sequence of numbers, got {type(values).__name__}") from None


_SCALAR_COSTS = ("t_f", "t_b", "t_w", "t_comm", "m_b", "m_w", "m_in", "transfer_bandwidth")
_STAGE_COSTS = ("stage_t_f", "stage_t_b", "stage_t_w", "stage_m_b", "stage_m_w", "stage_m_in")


def _cost_model(**costs):
    """A core.CostModel: the C API's defaults, overridden by the keywords given (None: the default)."""
    unknown = sorted(set(costs) - set(_SCALAR_COSTS) - set(_STAGE_COSTS))
    if unknown:
        raise TypeError(f"unknown cost(s): {', '.join(unknown)} (known: {', '.join(_SCALAR_COSTS + _STAGE_COSTS)})")
    model = core.CostModel()
    for name in _SCALAR_COSTS:
        if costs.get(name) is not None:
            setattr(model, name, float(costs[name]))
    for name in _STAGE_COSTS:
        if costs.get(name) is not None:
            getattr(model, "set_" + name)(_floats(costs[name], name))
    return model


class Schedule(_Closeable):
    """A pipeline schedule: the actions (F, B, W, BW, SEND/RECV) each rank runs, in order. Make one
    with Schedule.generate or Schedule.parse; either validates it. Errors raise
    InvalidArgumentError (a ValueError) with the runtime's message."""

    NAMES = SCHEDULE_NAMES
    ACTIVATION_POLICIES = ACTIVATION_POLICIES
    COMM_SEMANTICS = COMM_SEMANTICS

    def __init__(self, handle):
        if not isinstance(handle, core.Schedule):
            raise TypeError("use Schedule.generate or Schedule.parse to make a Schedule")
        self._handle = handle

    @classmethod
    def generate(cls, name, stages, micro_batches, chunks=1, t_f=None, t_b=None, t_w=None, t_comm=None,
                 mem_limit=None):
        """Generates schedule `name` (one of Schedule.NAMES) for `stages` pipeline ranks P,
        `micro_batches` M and `chunks` V model chunks per rank (interleaved-1f1b, bfs). t_f, t_b,
        t_w, t_comm and mem_limit steer the cost-driven schedules only: "zb-auto"'s search and
        "v-half" / "v-min"'s list scheduling under their memory cap (mem_limit micro-batches per
        rank); left out, they take the C API's defaults (1, 1, 1, 0, 0 = the schedule's own cap: P
        for zb-auto, (P+2)//2 for v-half, (P+4)//3 for v-min)."""
        options = core.ScheduleOptions()
        options.stages = operator.index(stages)
        options.micro_batches = operator.index(micro_batches)
        options.chunks = operator.index(chunks)
        for field, value in (("t_f", t_f), ("t_b", t_b), ("t_w", t_w), ("t_comm", t_comm), ("mem_limit", mem_limit)):
            if value is not None:
                setattr(options, field, float(value))
        return cls(core.Schedule.generate(str(name), options))

    @classmethod
    def parse(cls, text):
        """Parses the text form (what to_text writes) or PyTorch-style compact action lists, one rank
        per line, and validates it (under rendezvous send/recv, else under posted ones)."""
        return cls(core.Schedule.parse(text))

    @classmethod
    def parse_pytorch_csv(cls, text):
        """Parses PyTorch's pipeline-schedule CSV (torch.distributed.pipelining's dump, compute-only
        or compute+comms: one row per rank, one action per cell; PyTorch's I is our B and its B our
        BW) and validates it like parse. UNSHARD/RESHARD cells (FSDP) are dropped with one warning
        in the library's log."""
        return cls(core.Schedule.parse_pytorch_csv(text))

    def to_text(self):
        """The text form; Schedule.parse reads it back to the same schedule."""
        return self._handle.to_text()

    def to_pytorch_csv(self, with_comms=False):
        """The schedule as PyTorch's CSV (Schedule.parse_pytorch_csv reads it back). with_comms also
        writes SEND/RECV and ALLREDUCE (as REDUCE_GRAD); a kind the format cannot carry (OFFLOAD,
        RECOMPUTE, ...) raises InvalidArgumentError."""
        return self._handle.to_pytorch_csv(bool(with_comms))

    def validate(self, comm="rendezvous"):
        """Checks the schedule again under send/recv semantics `comm` (one of COMM_SEMANTICS); raises
        InvalidArgumentError naming the rank, the action and the unmet dependency (or the unknown
        semantics). A schedule with PyTorch's deferred receives may be valid under "posted" only."""
        self._handle.validate_comm(_comm(comm))

    def lower(self):
        """A new Schedule with SEND/RECV actions for every cross-rank dependency, in an order that
        cannot deadlock."""
        return Schedule(self._handle.lower())

    @property
    def num_ranks(self):
        return self._handle.num_ranks()

    @property
    def num_stages(self):
        return self._handle.num_stages()

    @property
    def num_micro_batches(self):
        return self._handle.num_micro_batches()

    def simulate(self, t_f=1.0, t_b=1.0, t_w=1.0, t_comm=0.0, m_b=1.0, m_w=0.0, stage_t_f=None, stage_t_b=None,
                 stage_t_w=None, stage_m_b=None, stage_m_w=None, m_in=0.0, stage_m_in=None, transfer_bandwidth=0.0,
                 comm="rendezvous"):
        """Times the schedule: each rank runs its actions in order; a cross-rank dependency waits
        t_comm after its producer ends. `comm` (one of COMM_SEMANTICS) is what a SEND/RECV pair
        means: under "posted" a RECV blocks nothing and the compute consuming its tensor starts no
        earlier than the matching SEND's end + t_comm. t_f, t_b, t_w are the forward, backward-input and
        backward-weight times of a stage (a fused BW costs t_b + t_w); m_b is the activation memory a
        micro-batch holds from F until its B, m_w from B until its W, m_in what a recomputed
        micro-batch keeps from F until its RECOMPUTE; transfer_bandwidth is the bytes per time unit of
        an OFFLOAD/RELOAD copy (0: free). A stage_* sequence (one entry per stage) overrides its
        scalar. Returns a Simulation."""
        return Simulation(self._handle.simulate_comm(_cost_model(
            t_f=t_f, t_b=t_b, t_w=t_w, t_comm=t_comm, m_b=m_b, m_w=m_w, m_in=m_in,
            transfer_bandwidth=transfer_bandwidth, stage_t_f=stage_t_f, stage_t_b=stage_t_b, stage_t_w=stage_t_w,
            stage_m_b=stage_m_b, stage_m_w=stage_m_w, stage_m_in=stage_m_in), _comm(comm)))

    def apply_activation_policy(self, policy, budget_bytes=0.0, **costs):
        """A new Schedule with activation policy `policy` (one of ACTIVATION_POLICIES; docs/MEMORY.md)
        applied as a pass: OFFLOAD / RELOAD / RECOMPUTE (and HOLD / RETURN for "balance") are
        inserted, so that simulate() predicts each rank's peak under it. `costs` are simulate's
        keywords (m_b, m_w, m_in and their stage_* sequences give the bytes); `budget_bytes` is
        "selective"'s per-rank limit on device-resident activation bytes (> 0). An unknown policy,
        or a budget below min_activation_budget() ("... smallest budget that works: N bytes"),
        raises InvalidArgumentError."""
        if not isinstance(policy, str):
            raise TypeError(f"policy must be a str, not {type(policy).__name__}")
        return Schedule(self._handle.apply_activation_policy(policy, _cost_model(**costs), float(budget_bytes)))

    def min_activation_budget(self, **costs):
        """The smallest per-rank activation budget (bytes) "selective" can meet for this schedule
        under `costs` (simulate's keywords)."""
        return self._handle.min_activation_budget(_cost_model(**costs))

    def __str__(self):
        return repr(self) if self.closed else self.to_text()

    def __repr__(self):
        if self.closed:
            return "Schedule(closed)"
        return f"Schedule(num_ranks={self.num_ranks}, num_stages={self.num_stages}, " \
               f"num_micro_batches={self.num_micro_batches})"
