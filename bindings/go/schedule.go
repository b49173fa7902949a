package pipeforge

import (
	"fmt"
	"math"
	"runtime"

	"github.com/pipeforge/pipeforge-go/internal/core"
)

// ScheduleNames are the schedules GenerateSchedule knows; after the synchronous ones (among them
// the sequence-sliced "seq1f1b": TrainerOptions.SeqSlices; GenerateSchedule gives its one-slice
// form, 1f1b's order) come the asynchronous "pipedream" ... "pipemare" and the local-learning
// "ppll", "local-updates" (no flush; Trainer.Drain).
var ScheduleNames = []string{"gpipe", "1f1b", "interleaved-1f1b", "bfs", "zb-h1", "zb-h2", "zb-v", "zb-auto",
	"interleaved-zb", "dualpipe-v", "v-half", "v-min", "bitpipe", "seq1f1b", "pipedream", "pipedream-2bw", "spectrain",
	"pipemare", "ppll", "local-updates"}

// ActivationPolicies are the activation-memory policies (docs/MEMORY.md) that
// Schedule.ApplyActivationPolicy and TrainerOptions.ActivationPolicy know.
var ActivationPolicies = []string{"none", "recompute", "offload-host", "offload-file", "selective", "balance"}

// CommSemantics are what a SEND/RECV pair can mean (Schedule.ValidateComm, Schedule.SimulateComm;
// docs/SCHEDULES.md, "Communication semantics"): "rendezvous" (both block until the other is
// reached; what Validate and Simulate use) or "posted" (MPI isend/irecv, NCCL, PyTorch: a SEND never
// blocks, only the compute that consumes a RECV's tensor waits for it).
var CommSemantics = []string{"rendezvous", "posted"}

// ScheduleOptions says what GenerateSchedule builds. Stages (P pipeline ranks) and MicroBatches (M)
// are required. Zero fields take the C API's defaults: Chunks 1 (V model chunks per rank, for
// interleaved-1f1b and bfs); TF, TB, TW 1, TComm 0 and MemLimit 0 (the schedule's own cap: P for
// zb-auto, (P+2)/2 for v-half, (P+4)/3 for v-min), which steer the cost-driven schedules only:
// "zb-auto"'s search and "v-half" / "v-min"'s list scheduling under their memory cap.
type ScheduleOptions struct {
	Stages, MicroBatches, Chunks int
	TF, TB, TW, TComm            float64
	MemLimit                     float64 // cap on in-flight micro-batches per rank
}

// CostModel are the costs Simulate (and the activation-policy pass) times a schedule under, in any
// one time unit. Fields are used as they are (zero is a valid cost), so start from DefaultCostModel.
// A non-nil Stage* slice (one entry per stage) overrides its scalar.
type CostModel struct {
	TF, TB, TW float64 // forward, backward-input and backward-weight time of a stage (a fused BW: TB + TW)
	TComm      float64 // latency of every cross-rank dependency
	MB         float64 // activation memory a micro-batch keeps from F until its B
	MW         float64 // memory kept from B until its W
	MIn        float64 // what a recomputed micro-batch keeps from F until its RECOMPUTE (its stage input)

	TransferBandwidth float64 // bytes per time unit of an OFFLOAD/RELOAD copy; 0 = free

	StageTF, StageTB, StageTW, StageMB, StageMW, StageMIn []float64
}

// DefaultCostModel returns the C API's default costs: TF = TB = TW = 1, TComm 0, MB 1, MW 0, MIn 0,
// TransferBandwidth 0.
func DefaultCostModel() CostModel {
	c := core.NewCostModel()
	defer core.DeleteCostModel(c)
	return CostModel{TF: c.GetTF(), TB: c.GetTB(), TW: c.GetTW(), TComm: c.GetTComm(), MB: c.GetMB(), MW: c.GetMW(),
		MIn: c.GetMIn(), TransferBandwidth: c.GetTransferBandwidth()}
}

// toCore returns the native cost model (the caller deletes it).
func (costs CostModel) toCore() core.CostModel {
	c := core.NewCostModel()
	c.SetTF(costs.TF)
	c.SetTB(costs.TB)
	c.SetTW(costs.TW)
	c.SetTComm(costs.TComm)
	c.SetMB(costs.MB)
	c.SetMW(costs.MW)
	c.SetMIn(costs.MIn)
	c.SetTransferBandwidth(costs.TransferBandwidth)
	for _, f := range []struct {
		v   []float64
		set func([]float64)
	}{
		{costs.StageTF, c.SetStageTF}, {costs.StageTB, c.SetStageTB}, {costs.StageTW, c.SetStageTW},
		{costs.StageMB, c.SetStageMB}, {costs.StageMW, c.SetStageMW}, {costs.StageMIn, c.SetStageMIn},
	} {
		if f.v != nil {
			f.set(f.v)
		}
	}
	return c
}

// SimulationSummary are a simulation's whole-schedule results.
type SimulationSummary struct {
	Makespan   float64 // latest finish over all ranks
	Ideal      float64 // bubble-free time of the busiest rank
	BubbleRate float64 // (Makespan - Ideal) / Makespan
	NumRanks   int
	// The zero-bubble paper's measure: a rank's span is finish - first start; MaxSpan is the longest
	// and SpanBubbleRate = (MaxSpan - Ideal) / MaxSpan.
	MaxSpan        float64
	SpanBubbleRate float64
}

// RankStats are one rank's results: of a simulation (in the cost model's unit) or of a pipelined
// trainer's last step (measured, in microseconds from the step start).
type RankStats struct {
	Busy                float64 // time spent in actions
	Idle                float64 // Makespan - Busy
	FirstStart, Finish  float64 // start of its first action, end of its last
	PeakActivations     int64   // most micro-batches held at once (F done, B not yet)
	PeakActivationBytes float64 // the same in bytes (MB and MW of its stages)
	OffloadedBytes      float64 // bytes its OFFLOADs move off the device per step (the same come back)
	Recomputes          int64   // RECOMPUTE actions per step
	Local               bool    // trainers: this process ran the rank (every rank for threads)
}

func rankStats(r core.RankStats) RankStats {
	return RankStats{Busy: r.GetBusy(), Idle: r.GetIdle(), FirstStart: r.GetFirstStart(), Finish: r.GetFinish(),
		PeakActivations: r.GetPeakActivations(), PeakActivationBytes: r.GetPeakActivationBytes(),
		OffloadedBytes: r.GetOffloadedBytes(), Recomputes: r.GetRecomputes(), Local: r.GetLocal()}
}

// Schedule is a validated pipeline schedule: the actions (F, B, W, BW, SEND/RECV) each rank runs, in
// order. Not safe for concurrent use. Close it when done (a finalizer frees a forgotten one).
type Schedule struct {
	s core.Schedule
}

func newSchedule(build func(core.Status) core.Schedule) (*Schedule, error) {
	if abiError != nil {
		return nil, abiError
	}
	var s core.Schedule
	if err := call(func(st core.Status) { s = build(st) }); err != nil {
		return nil, err
	}
	schedule := &Schedule{s: s}
	runtime.SetFinalizer(schedule, (*Schedule).Close)
	return schedule, nil
}

// GenerateSchedule generates schedule name (one of ScheduleNames) and validates it. An unknown name,
// or a schedule that cannot exist for these P, M, V, is an InvalidArgument error saying why.
func GenerateSchedule(name string, opts ScheduleOptions) (*Schedule, error) {
	for _, f := range []struct {
		name string
		v    int
	}{{"Stages", opts.Stages}, {"MicroBatches", opts.MicroBatches}, {"Chunks", opts.Chunks}} {
		if err := checkInt32(f.name, f.v); err != nil {
			return nil, err
		}
	}
	o := core.NewScheduleOptions()
	defer core.DeleteScheduleOptions(o)
	o.SetStages(opts.Stages)
	o.SetMicroBatches(opts.MicroBatches)
	if opts.Chunks != 0 {
		o.SetChunks(opts.Chunks)
	}
	for _, f := range []struct {
		v   float64
		set func(float64)
	}{
		{opts.TF, o.SetTF}, {opts.TB, o.SetTB}, {opts.TW, o.SetTW}, {opts.TComm, o.SetTComm},
		{opts.MemLimit, o.SetMemLimit},
	} {
		if f.v != 0 {
			f.set(f.v)
		}
	}
	return newSchedule(func(s core.Status) core.Schedule { return core.ScheduleGenerate(name, o, s) })
}

// ParseSchedule parses the text form (what Text returns) or PyTorch-style compact action lists, one
// rank per line, and validates it. Errors name the line, the token or the rule broken.
func ParseSchedule(text string) (*Schedule, error) {
	return newSchedule(func(s core.Status) core.Schedule { return core.ScheduleParse(text, s) })
}

// ParsePytorchCSV parses PyTorch's pipeline-schedule CSV (torch.distributed.pipelining's dump,
// compute-only or compute+comms: one row per rank, one action per cell; PyTorch's I is our B and its
// B our BW) and validates it like ParseSchedule. UNSHARD/RESHARD cells (FSDP) are dropped with one
// warning in the library's log. Errors name the line, the cell number and its text.
func ParsePytorchCSV(text string) (*Schedule, error) {
	return newSchedule(func(s core.Status) core.Schedule { return core.ScheduleParsePytorchCsv(text, s) })
}

// Close destroys the schedule (its simulations stay valid). Idempotent.
func (s *Schedule) Close() error {
	if s != nil && s.s != nil {
		core.DeleteSchedule(s.s)
		s.s = nil
		runtime.SetFinalizer(s, nil)
	}
	return nil
}

// Text is the schedule's text form; ParseSchedule reads it back to the same schedule.
func (s *Schedule) Text() (string, error) {
	defer runtime.KeepAlive(s)
	if s == nil || s.s == nil {
		return "", errClosed("schedule")
	}
	var text string
	err := call(func(st core.Status) { text = s.s.ToText(st) })
	return text, err
}

// PytorchCSV is the schedule as PyTorch's CSV (ParsePytorchCSV reads it back); withComms also
// writes SEND/RECV and ALLREDUCE (as REDUCE_GRAD). A kind the format cannot carry (OFFLOAD,
// RECOMPUTE, ...) is an InvalidArgument error.
func (s *Schedule) PytorchCSV(withComms bool) (string, error) {
	defer runtime.KeepAlive(s)
	if s == nil || s.s == nil {
		return "", errClosed("schedule")
	}
	var text string
	err := call(func(st core.Status) { text = s.s.ToPytorchCsv(withComms, st) })
	return text, err
}

// Validate checks the schedule again under rendezvous send/recv; an InvalidArgument error names the
// rank, the action and the unmet dependency.
func (s *Schedule) Validate() error {
	defer runtime.KeepAlive(s)
	if s == nil || s.s == nil {
		return errClosed("schedule")
	}
	return call(func(st core.Status) { s.s.Validate(st) })
}

// ValidateComm is Validate under send/recv semantics comm (one of CommSemantics); a schedule with
// PyTorch's deferred receives may be valid under "posted" only. An unknown comm is an
// InvalidArgument error naming it.
func (s *Schedule) ValidateComm(comm string) error {
	defer runtime.KeepAlive(s)
	if s == nil || s.s == nil {
		return errClosed("schedule")
	}
	return call(func(st core.Status) { s.s.ValidateComm(comm, st) })
}

// Lower returns a new schedule with SEND/RECV actions for every cross-rank dependency, in an order
// that cannot deadlock.
func (s *Schedule) Lower() (*Schedule, error) {
	defer runtime.KeepAlive(s)
	if s == nil || s.s == nil {
		return nil, errClosed("schedule")
	}
	return newSchedule(func(st core.Status) core.Schedule { return s.s.Lower(st) })
}

func (s *Schedule) shape(get func(core.Status) int) (int, error) {
	defer runtime.KeepAlive(s)
	if s == nil || s.s == nil {
		return 0, errClosed("schedule")
	}
	var n int
	err := call(func(st core.Status) { n = get(st) })
	return n, err
}

// NumRanks is the number of pipeline ranks.
func (s *Schedule) NumRanks() (int, error) {
	if s == nil || s.s == nil {
		return 0, errClosed("schedule")
	}
	return s.shape(s.s.NumRanks)
}

// NumStages is the number of model stages (ranks x chunks).
func (s *Schedule) NumStages() (int, error) {
	if s == nil || s.s == nil {
		return 0, errClosed("schedule")
	}
	return s.shape(s.s.NumStages)
}

// NumMicroBatches is the number of micro-batches.
func (s *Schedule) NumMicroBatches() (int, error) {
	if s == nil || s.s == nil {
		return 0, errClosed("schedule")
	}
	return s.shape(s.s.NumMicroBatches)
}

// Simulate times the schedule under costs: each rank runs its actions in order; every cross-rank
// dependency waits TComm after its producer ends (rendezvous send/recv).
func (s *Schedule) Simulate(costs CostModel) (*Simulation, error) {
	return s.SimulateComm(costs, "rendezvous")
}

// SimulateComm is Simulate under send/recv semantics comm (one of CommSemantics): under "posted" a
// RECV blocks nothing and the compute that consumes its tensor starts no earlier than the matching
// SEND's end + TComm. An unknown comm is an InvalidArgument error naming it.
func (s *Schedule) SimulateComm(costs CostModel, comm string) (*Simulation, error) {
	defer runtime.KeepAlive(s)
	if s == nil || s.s == nil {
		return nil, errClosed("schedule")
	}
	c := costs.toCore()
	defer core.DeleteCostModel(c)
	var sim core.Simulation
	if err := call(func(st core.Status) { sim = s.s.SimulateComm(c, comm, st) }); err != nil {
		return nil, err
	}
	simulation := &Simulation{sim: sim}
	runtime.SetFinalizer(simulation, (*Simulation).Close)
	if err := simulation.read(); err != nil {
		simulation.Close()
		return nil, err
	}
	return simulation, nil
}

// ApplyActivationPolicy returns a new schedule with activation policy policy (one of
// ActivationPolicies; docs/MEMORY.md) applied as a pass: OFFLOAD / RELOAD / RECOMPUTE (and HOLD /
// RETURN for "balance") are inserted, so that Simulate predicts each rank's peak under it. costs give
// the per-stage bytes (MB, MW, MIn); budgetBytes is "selective"'s per-rank limit (> 0, else ignored).
// An unknown policy, or a budget below MinActivationBudget (the message names "the smallest budget
// that works"), is an InvalidArgument error.
func (s *Schedule) ApplyActivationPolicy(policy string, costs CostModel, budgetBytes float64) (*Schedule, error) {
	defer runtime.KeepAlive(s)
	if s == nil || s.s == nil {
		return nil, errClosed("schedule")
	}
	c := costs.toCore()
	defer core.DeleteCostModel(c)
	return newSchedule(func(st core.Status) core.Schedule {
		return s.s.ApplyActivationPolicy(policy, c, budgetBytes, st)
	})
}

// MinActivationBudget is the smallest per-rank activation budget (bytes) "selective" can meet for
// the schedule under costs.
func (s *Schedule) MinActivationBudget(costs CostModel) (float64, error) {
	defer runtime.KeepAlive(s)
	if s == nil || s.s == nil {
		return 0, errClosed("schedule")
	}
	c := costs.toCore()
	defer core.DeleteCostModel(c)
	var budget float64
	err := call(func(st core.Status) { budget = s.s.MinActivationBudget(c, st) })
	return budget, err
}

// Simulation is a schedule timed under a cost model. Its results (Summary, Ranks) are read when it is
// made and stay available after Close; the renderings need the native object. Not safe for
// concurrent use.
type Simulation struct {
	sim     core.Simulation
	summary SimulationSummary
	ranks   []RankStats
}

func (m *Simulation) read() error {
	var s core.SimulationSummary
	err := call(func(st core.Status) { s = m.sim.Summary(st) })
	defer core.DeleteSimulationSummary(s)
	if err != nil {
		return err
	}
	m.summary = SimulationSummary{Makespan: s.GetMakespan(), Ideal: s.GetIdeal(), BubbleRate: s.GetBubbleRate(),
		NumRanks: s.GetNumRanks(), MaxSpan: s.GetMaxSpan(), SpanBubbleRate: s.GetSpanBubbleRate()}
	m.ranks = make([]RankStats, m.summary.NumRanks)
	for i := range m.ranks {
		var r core.RankStats
		err := call(func(st core.Status) { r = m.sim.RankStats(i, st) })
		if err == nil {
			m.ranks[i] = rankStats(r)
		}
		core.DeleteRankStats(r)
		if err != nil {
			return err
		}
	}
	return nil
}

// Close destroys the native simulation (Summary and Ranks stay available). Idempotent.
func (m *Simulation) Close() error {
	if m != nil && m.sim != nil {
		core.DeleteSimulation(m.sim)
		m.sim = nil
		runtime.SetFinalizer(m, nil)
	}
	return nil
}

// Summary returns the whole-schedule results.
func (m *Simulation) Summary() SimulationSummary { return m.summary }

// Ranks returns every rank's results, rank 0 first (a copy).
func (m *Simulation) Ranks() []RankStats { return append([]RankStats(nil), m.ranks...) }

func (m *Simulation) render(f func(core.Status) string) (string, error) {
	defer runtime.KeepAlive(m)
	if m == nil || m.sim == nil {
		return "", errClosed("simulation")
	}
	var text string
	err := call(func(st core.Status) { text = f(st) })
	return text, err
}

// ChromeTrace is the timeline as Chrome trace JSON (chrome://tracing, https://ui.perfetto.dev): a
// track per rank, an event per action.
func (m *Simulation) ChromeTrace() (string, error) {
	if m == nil || m.sim == nil {
		return "", errClosed("simulation")
	}
	return m.render(m.sim.ToChromeTrace)
}

// SVG is the timeline as an SVG image.
func (m *Simulation) SVG() (string, error) {
	if m == nil || m.sim == nil {
		return "", errClosed("simulation")
	}
	return m.render(m.sim.ToSvg)
}

// ASCII is the timeline as a terminal grid width (>= 10) characters wide.
func (m *Simulation) ASCII(width int) (string, error) {
	if m == nil || m.sim == nil {
		return "", errClosed("simulation")
	}
	if err := checkInt32("width", width); err != nil {
		return "", err
	}
	return m.render(func(st core.Status) string { return m.sim.ToAscii(width, st) })
}

// checkInt32 rejects a value the C API's int32_t cannot hold (SWIG would truncate it).
func checkInt32(name string, v int) error {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return &Error{Code: InvalidArgument, Message: fmt.Sprintf("%s is %d, outside the int32 range", name, v)}
	}
	return nil
}
