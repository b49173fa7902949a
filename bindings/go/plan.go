package pipeforge

import (
	"runtime"
	"strings"

	"github.com/pipeforge/pipeforge-go/internal/core"
)

// PlanOptions says what NewPlan searches (docs/PLANNING.md). Zero fields take the C API's defaults:
// ClusterJSON "" measures this machine (Devices of them, 0 = one per core); MemoryLimitBytes 0 is
// the cluster's device memory; nil Schedules and Policies search every synchronous schedule and
// none and recompute; MaxMicroBatches 16, MaxChunks 2, Repeats 3; CalibrationSteps 5 (-1: none).
type PlanOptions struct {
	ClusterJSON      string
	Devices          int
	MemoryLimitBytes float64
	Schedules        []string
	Policies         []string
	MaxMicroBatches  int
	MaxChunks        int
	Repeats          int
	CalibrationSteps int
}

// Plan is the planner's answer: the candidates that fit, fastest first, each as JSON (schedule,
// ranks, chunks, micro_batches, data_parallel, activation_policy, layers_per_stage, step_seconds,
// tokens_per_second, peak_memory_bytes, ...).
type Plan struct {
	p core.Plan
}

// NewPlan profiles and calibrates a copy of model on row slices of one step's batch (all
// replicas' rows), with the optimizer of trainer, and plans.
func NewPlan(model *Model, inputs, targets Tensor, trainer TrainerOptions, opts PlanOptions) (*Plan, error) {
	if abiError != nil {
		return nil, abiError
	}
	if model == nil || model.m == nil {
		return nil, errClosed("model")
	}
	defer runtime.KeepAlive(model)
	t, err := trainer.toCore()
	if err != nil {
		return nil, err
	}
	defer core.DeleteTrainerOptions(t)
	o := core.NewPlanOptions()
	defer core.DeletePlanOptions(o)
	o.SetClusterJson(opts.ClusterJSON)
	o.SetSchedules(strings.Join(opts.Schedules, ","))
	o.SetPolicies(strings.Join(opts.Policies, ","))
	if opts.MemoryLimitBytes != 0 {
		o.SetMemoryLimitBytes(opts.MemoryLimitBytes)
	}
	for _, f := range []struct {
		name string
		v    int
		set  func(int)
	}{{"Devices", opts.Devices, o.SetDevices}, {"MaxMicroBatches", opts.MaxMicroBatches, o.SetMaxMicroBatches},
		{"MaxChunks", opts.MaxChunks, o.SetMaxChunks}, {"Repeats", opts.Repeats, o.SetRepeats}} {
		if err := checkInt32(f.name, f.v); err != nil {
			return nil, err
		}
		if f.v != 0 {
			f.set(f.v)
		}
	}
	switch {
	case opts.CalibrationSteps == -1:
		o.SetCalibrationSteps(0)
	case opts.CalibrationSteps != 0:
		if err := checkInt32("CalibrationSteps", opts.CalibrationSteps); err != nil {
			return nil, err
		}
		o.SetCalibrationSteps(opts.CalibrationSteps)
	}
	in, err := inputs.toCore()
	if err != nil {
		return nil, err
	}
	defer core.DeleteTensor(in)
	tg, err := targets.toCore()
	if err != nil {
		return nil, err
	}
	defer core.DeleteTensor(tg)
	var p core.Plan
	if err := call(func(s core.Status) { p = core.PlanCreate(model.m, in, tg, t, o, s) }); err != nil {
		return nil, err
	}
	plan := &Plan{p: p}
	runtime.SetFinalizer(plan, (*Plan).Close)
	return plan, nil
}

// Close destroys the plan. Idempotent.
func (p *Plan) Close() error {
	if p == nil || p.p == nil {
		return nil
	}
	core.DeletePlan(p.p)
	p.p = nil
	runtime.SetFinalizer(p, nil)
	return nil
}

// NumCandidates is the number of candidates that fit.
func (p *Plan) NumCandidates() (int, error) {
	defer runtime.KeepAlive(p)
	if p == nil || p.p == nil {
		return 0, errClosed("plan")
	}
	var n int
	err := call(func(s core.Status) { n = int(p.p.NumCandidates(s)) })
	return n, err
}

// CandidateJSON is candidate i (0 .. NumCandidates-1) as JSON.
func (p *Plan) CandidateJSON(i int) (string, error) {
	defer runtime.KeepAlive(p)
	if p == nil || p.p == nil {
		return "", errClosed("plan")
	}
	if err := checkInt32("index", i); err != nil {
		return "", err
	}
	var out string
	err := call(func(s core.Status) { out = p.p.CandidateJson(i, s) })
	return out, err
}

// JSON is the whole plan: the cluster, the counts and every candidate that fits (and, when none
// does, smallest_memory_that_works_bytes).
func (p *Plan) JSON() (string, error) {
	defer runtime.KeepAlive(p)
	if p == nil || p.p == nil {
		return "", errClosed("plan")
	}
	var out string
	err := call(func(s core.Status) { out = p.p.ToJson(s) })
	return out, err
}

// SVG charts predicted step time against peak memory per rank, the Pareto front and the choice marked.
func (p *Plan) SVG() (string, error) {
	defer runtime.KeepAlive(p)
	if p == nil || p.p == nil {
		return "", errClosed("plan")
	}
	var out string
	err := call(func(s core.Status) { out = p.p.ToSvg(s) })
	return out, err
}

// Apply sets the fields of opts that run candidate i: MicroBatches, DataParallel, Schedule ("" for
// the sequential trainer), Stages, Ranks, Chunks, LayersPerStage and ActivationPolicy.
func (p *Plan) Apply(i int, opts *TrainerOptions) error {
	defer runtime.KeepAlive(p)
	if p == nil || p.p == nil {
		return errClosed("plan")
	}
	if err := checkInt32("index", i); err != nil {
		return err
	}
	o := core.NewTrainerOptions()
	defer core.DeleteTrainerOptions(o)
	if err := call(func(s core.Status) { p.p.Apply(i, o, s) }); err != nil {
		return err
	}
	opts.MicroBatches = o.GetMicroBatches()
	opts.DataParallel = o.GetDataParallel()
	opts.Schedule = o.GetSchedule()
	opts.Stages = o.GetStages()
	opts.Ranks = o.GetRanks()
	opts.Chunks = o.GetChunks()
	opts.ActivationPolicy = o.GetActivationPolicy()
	opts.LayersPerStage = nil
	for k := int64(0); k < o.NumLayersPerStage(); k++ {
		opts.LayersPerStage = append(opts.LayersPerStage, int(o.LayersInStage(k)))
	}
	return nil
}
