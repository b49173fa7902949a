package pipeforge

import (
	"fmt"
	"runtime"
	"sort"
	"time"

	"github.com/pipeforge/pipeforge-go/internal/core"
)

// TrainerOptions configures a Trainer. Zero fields take the C API's defaults: 1 micro-batch, seed 0,
// "adamw", LR 1e-3, Beta1 0.9, Beta2 0.999, Eps 1e-8, no momentum, weight decay or clipping, 1 BLAS
// thread; sequential (not pipelined).
//
// Pipelined training (docs/EXECUTION.md): Schedule (a name from ScheduleNames) with Stages ranks and
// Chunks model chunks per rank, or ScheduleText (a schedule in the text form), runs one worker per
// rank; the parameters stay bitwise equal to the sequential trainer's. LayersPerStage splits the
// model's top-level layers (nil: balancing their parameter counts; Config{"partition": "even"}: equal
// layer counts); RecvTimeout bounds a rank's wait for a peer (0: 60 s).
// ActivationPolicy (one of ActivationPolicies; "" = "none"), ActivationBudgetBytes (selective) and
// OffloadDir (offload-file, selective; "" = $TMPDIR or /tmp) manage the ranks' activation memory
// (docs/MEMORY.md); the parameters stay bitwise equal, and RankStats reports OffloadedBytes and
// Recomputes. Devices says where to train (docs/CUDA.md): "cpu", "cuda:N", or for a pipeline one
// device per rank, comma-separated ("cuda:0,cuda:1"; one entry = every rank); "" = cpu.
//
// One process per rank (docs/EXECUTION.md, "Several processes"): Processes "auto" ("" too: one
// process per rank when started by mpirun with more than one process and a schedule is set, else
// threads), "threads" or "mpi" (an error unless started by mpirun). Every process then builds the
// same model and trainer and steps it on the same data; Parameter/SetParameter work on its own
// stages' parameters, every process must call Checksum, checkpoints are not supported yet;
// Process gives the launch rank and size and RankStats' Local which rank this process ran.
// DataParallel D (0 = 1) trains D pipeline replicas on disjoint micro-batches (mpirun -np D*P;
// MicroBatches is per replica; without a schedule the sequential trainer reproduces D replicas'
// arithmetic); GradientReduction "allreduce" ("" too) or "deterministic". Ranks is Stages under
// the name the schedule IR uses (0 = Stages).
//
// Asynchronous schedules (docs/SCHEDULES.md, "Asynchronous schedules"): Schedule "pipedream",
// "pipedream-2bw", "spectrain" or "pipemare" runs without a flush: a step is a window of
// MicroBatches (>= Ranks - 1) micro-batches and leaves some in flight, which the next step or
// Drain finishes (call it before reading the final parameters); checkpoints are not supported.
// Their options, zero meaning the default as in the C API: VerticalSync (pipedream),
// SpectrainVersion (spectrain: 1, the paper's, or 2; 0 = 1), PipemareAnnealUpdates (pipemare:
// updates over which the learning rate anneals; 0 = 100, -1 = no annealing) and PipemareDecay
// (pipemare: decay of the discrepancy average in (0, 1); 0 = 0.9, -1 = no average). One set for
// another schedule is an InvalidArgument error naming both.
//
// Local learning (docs/SCHEDULES.md, "Local learning"): Schedule "ppll" or "local-updates" trains
// every stage but the last on an auxiliary head of its own (no gradient crosses ranks); steps are
// windows as above (Drain at the end; checkpoints are not supported yet). LocalHead is the heads'
// kind: "auto" ("" too: LayerNorm + linear for token models, linear for feature models), "linear",
// "layernorm-linear" or "mlp"; a kind other than "auto" with another schedule (or an unknown kind)
// is an InvalidArgument error naming LocalHead's C name, local_head, and the schedule (the kind).
//
// Sequence-sliced 1F1B (C API 0.7, docs/SCHEDULES.md, "Sequence-sliced 1F1B"): Schedule "seq1f1b"
// with SeqSlices S runs each micro-batch as S slices of its token sequence (a token model such as
// the GPT whose SeqLen S divides; the CPU, threads, one replica, ActivationPolicy "none"): less
// activation memory per rank, losses equal to 1f1b's within 1e-5 relative (not bitwise). 0 = 1. A
// value the runtime cannot slice with is an InvalidArgument error naming SeqSlices' C name,
// seq_slices.
type TrainerOptions struct {
	MicroBatches int     // equal micro-batches per step; must divide the batch rows
	Seed         int64   // parameter initialisation
	Optimizer    string  // "adamw" or "sgd"
	LR           float32 // learning rate
	Momentum     float32 // SGD
	WeightDecay  float32 // SGD: L2 on the gradient; AdamW: decoupled
	Beta1, Beta2 float32 // AdamW
	Eps          float32 // AdamW
	ClipNorm     float32 // > 0: clip gradients to this global L2 norm
	BLASThreads  int     // BLAS threads used by the step

	Schedule       string        // a schedule name, e.g. "1f1b"; "" = none
	ScheduleText   string        // or a schedule in the text form; "" = none
	Stages         int           // pipeline ranks P for Schedule; 0 = 1
	Chunks         int           // model chunks per rank V (interleaved-1f1b, bfs); 0 = 1
	LayersPerStage []int         // top-level layers per stage; nil = balanced parameter counts
	RecvTimeout    time.Duration // a rank waiting longer for a peer fails the step; 0 = 60 s

	ActivationPolicy      string  // "none", "recompute", "offload-host", "offload-file", "selective", "balance"; "" = none
	ActivationBudgetBytes float64 // selective: device-resident activation bytes per rank (> 0)
	OffloadDir            string  // folder for offload-file (and selective) files; "" = $TMPDIR or /tmp

	Devices string // "cpu", "cuda:N", or one per rank comma-separated ("cuda:0,cuda:1"); "" = cpu

	Processes         string // "auto", "threads" or "mpi"; "" = auto
	DataParallel      int    // D pipeline replicas; 0 = 1
	GradientReduction string // "allreduce" or "deterministic"; "" = allreduce
	Ranks             int    // pipeline ranks P for Schedule; 0 = Stages

	VerticalSync          bool    // pipedream: vertical sync
	SpectrainVersion      int     // spectrain: 1 (the paper) or 2; 0 = 1
	PipemareAnnealUpdates int64   // pipemare: updates over which the learning rate anneals; 0 = 100, -1 = none
	PipemareDecay         float32 // pipemare: decay of the discrepancy average in (0, 1); 0 = 0.9, -1 = none

	LocalHead string // ppll, local-updates: "auto", "linear", "layernorm-linear" or "mlp"; "" = auto

	// The learning-rate schedule (docs/TRAINING.md): "constant" ("" too), "cosine" or "linear",
	// with WarmupSteps of linear warm-up; cosine and linear decay to MinLR over DecaySteps after it.
	// StepResult.LR reports each step's rate.
	LRSchedule  string
	WarmupSteps int64
	DecaySteps  int64
	MinLR       float64

	SeqSlices int // seq1f1b: sequence slices per micro-batch S; 0 = 1

	// Fail-slow adaptation (C API 0.9, docs/PLANNING.md, "Adapting to a slow rank"): with a
	// synchronous schedule the trainer profiles the model on the first step's micro-batch and
	// re-partitions live when a rank stays AdaptThreshold times slower than predicted for
	// AdaptPatience steps in a row; the results stay bitwise equal to the run without it.
	// Trainer.AdaptationsJSON lists the moves. What adaptation does not support is an
	// InvalidArgument error naming adapt.
	Adapt          bool
	AdaptThreshold float64 // > 1; 0 = 1.5
	AdaptPatience  int     // steps; 0 = 3
	// Test and benchmark knobs: pipeline rank SlowRank's compute takes SlowFactor times as long
	// (SlowFactor 0 = 1: no rank is slowed, and SlowRank is not used).
	SlowRank   int
	SlowFactor float64

	// Any option as a key/value entry (C API 0.11; docs/CAPABILITIES.md, "Config keys"), e.g.
	// {"partition": "even"}: applied after the fields above (in key order), so it wins; the runtime
	// checks each key and value. New options arrive as keys.
	Config map[string]string
}

// StepResult is the result of one optimizer step.
type StepResult struct {
	Loss       float64 // mean loss over the batch
	GradNorm   float64 // global gradient L2 norm before clipping; 0 with ClipNorm 0 (not computed)
	Samples    int64   // rows in the batch
	Tokens     int64   // target elements in the batch
	Seconds    float64 // wall time of the step
	LR         float64 // the learning rate the step used
	BubbleRate float64 // pipelines: the step's measured idle share (0 for the sequential trainer)
}

// Metrics are a trainer's progress counters.
type Metrics struct {
	Step            int64 // optimizer steps taken
	LastLoss        float64
	LastGradNorm    float64
	TokensPerSecond float64 // of the last step
	TotalTokens     int64
	DataPosition    int64 // micro-batches taken from data loaders so far
}

// Trainer trains a model: parameters, optimizer state and an optional data loader. Not safe for
// concurrent use. Close it when done (a finalizer frees a forgotten one; every method keeps the
// receiver alive until its native call returns, so the finalizer cannot run mid-call).
type Trainer struct {
	t    core.Trainer
	data installedLoader // the training data loader (SetDataLoader)
	eval installedLoader // the held-out loader (SetEvalLoader)
}

// NewTrainer creates a trainer on model (which it retains) and initialises the model's parameters
// from opts.Seed. At most one live trainer may use a model.
func NewTrainer(model *Model, opts TrainerOptions) (*Trainer, error) {
	if abiError != nil {
		return nil, abiError
	}
	if model == nil || model.m == nil {
		return nil, errClosed("model")
	}
	defer runtime.KeepAlive(model) // model.m is used below; its finalizer must wait
	o, err := opts.toCore()
	if err != nil {
		return nil, err
	}
	defer core.DeleteTrainerOptions(o)
	var t core.Trainer
	if err := call(func(s core.Status) { t = core.TrainerCreate(model.m, o, s) }); err != nil {
		return nil, err
	}
	trainer := &Trainer{t: t}
	runtime.SetFinalizer(trainer, (*Trainer).Close)
	return trainer, nil
}

// Close destroys the trainer and its data loader. Idempotent.
func (t *Trainer) Close() error {
	if t == nil || t.t == nil {
		return nil
	}
	core.DeleteTrainer(t.t) // destroys the native loaders first, so the bridges are free to go
	t.t = nil
	t.data.drop()
	t.eval.drop()
	runtime.SetFinalizer(t, nil)
	return nil
}

// Step runs one optimizer step on a whole batch, split into MicroBatches equal micro-batches (e.g.
// MLP: inputs Float32(x, rows, inputDim), targets Int32(y, rows)).
func (t *Trainer) Step(inputs, targets Tensor) (StepResult, error) {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return StepResult{}, errClosed("trainer")
	}
	in, err := inputs.toCore()
	if err != nil {
		return StepResult{}, err
	}
	defer core.DeleteTensor(in)
	tg, err := targets.toCore()
	if err != nil {
		return StepResult{}, err
	}
	defer core.DeleteTensor(tg)
	var r core.StepResult
	err = call(func(s core.Status) { r = t.t.Step(in, tg, s) })
	defer core.DeleteStepResult(r)
	if err != nil {
		return StepResult{}, err
	}
	return stepResult(r), nil
}

func stepResult(r core.StepResult) StepResult {
	return StepResult{Loss: r.GetLoss(), GradNorm: r.GetGradNorm(), Samples: r.GetSamples(),
		Tokens: r.GetTokens(), Seconds: r.GetSeconds(), LR: r.GetLr(), BubbleRate: r.GetBubbleRate()}
}

// SetDataLoader installs a data loader (nil removes it). The runtime calls it on the goroutine that
// runs StepFromLoader.
func (t *Trainer) SetDataLoader(loader DataLoader) error {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return errClosed("trainer")
	}
	return t.install(&t.data, t.t.SetDataLoader, loader)
}

// StepFromLoader runs one step on MicroBatches micro-batches from the data loader. If the loader
// returned an error (or panicked), the *Error has code CallbackError, its message holds the loader's
// error text, and errors.Unwrap gives the loader's error itself (a *LoaderPanic for a panic). The
// trainer is then unchanged and the step can be retried.
func (t *Trainer) StepFromLoader() (StepResult, error) {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return StepResult{}, errClosed("trainer")
	}
	var r core.StepResult
	err := t.withLoaders(func(s core.Status) { r = t.t.StepFromLoader(s) })
	defer core.DeleteStepResult(r)
	if err != nil {
		return StepResult{}, err
	}
	return stepResult(r), nil
}

// Drain runs what an asynchronous or local-learning schedule still has in flight, on every rank,
// so that every stage has applied every micro-batch it was given (call it before reading the final
// parameters or at the end of training); the next step refills the pipeline. A no-op for
// synchronous schedules and the sequential trainer.
func (t *Trainer) Drain() error {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return errClosed("trainer")
	}
	return call(func(s core.Status) { t.t.Drain(s) })
}

// Metrics returns the trainer's progress counters.
func (t *Trainer) Metrics() (Metrics, error) {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return Metrics{}, errClosed("trainer")
	}
	var m core.Metrics
	err := call(func(s core.Status) { m = t.t.Metrics(s) })
	defer core.DeleteMetrics(m)
	if err != nil {
		return Metrics{}, err
	}
	return Metrics{Step: m.GetStep(), LastLoss: m.GetLastLoss(), LastGradNorm: m.GetLastGradNorm(),
		TokensPerSecond: m.GetTokensPerSecond(), TotalTokens: m.GetTotalTokens(),
		DataPosition: m.GetDataPosition()}, nil
}

// Parameter returns a copy of parameter name as a float32 Tensor (a NotFound error if there is none).
func (t *Trainer) Parameter(name string) (Tensor, error) {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return Tensor{}, errClosed("trainer")
	}
	var p core.Tensor
	err := call(func(s core.Status) { p = t.t.Parameter(name, s) })
	defer core.DeleteTensor(p)
	if err != nil {
		return Tensor{}, err
	}
	shape := make([]int64, p.Ndim())
	for i := range shape {
		shape[i] = p.Dim(int64(i))
	}
	values := make([]float32, p.Size())
	if err := call(func(s core.Status) { p.CopyFloats(values, s) }); err != nil {
		return Tensor{}, err
	}
	return Float32(values, shape...), nil
}

// SetParameter overwrites parameter name with values (its element count, in row-major order).
func (t *Trainer) SetParameter(name string, values []float32) error {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return errClosed("trainer")
	}
	v, err := Float32(values, int64(len(values))).toCore()
	if err != nil {
		return err
	}
	defer core.DeleteTensor(v)
	return call(func(s core.Status) { t.t.SetParameter(name, v, s) })
}

// Checksum is the SHA-256 (hex) of every parameter: equal checksums mean bitwise-equal parameters.
// With one process per rank every process must call it (collective).
func (t *Trainer) Checksum() (string, error) {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return "", errClosed("trainer")
	}
	var sum string
	err := call(func(s core.Status) { sum = t.t.Checksum(s) })
	return sum, err
}

// SaveCheckpoint writes parameters, optimizer state, step and data position to path, atomically.
func (t *Trainer) SaveCheckpoint(path string) error {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return errClosed("trainer")
	}
	return call(func(s core.Status) { t.t.SaveCheckpoint(path, s) })
}

// LoadCheckpoint restores a checkpoint written for a model with the same parameters.
func (t *Trainer) LoadCheckpoint(path string) error {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return errClosed("trainer")
	}
	return call(func(s core.Status) { t.t.LoadCheckpoint(path, s) })
}

// LoadHFWeights loads the weights of a Hugging Face Transformers folder (model.safetensors or its
// shards) into the parameters this process holds (since 0.17). Everything is checked first: a
// missing, extra or misshapen tensor is an InvalidArgument error naming it and changes nothing.
func (t *Trainer) LoadHFWeights(dir string) error {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return errClosed("trainer")
	}
	return call(func(s core.Status) { t.t.LoadHfWeights(dir, s) })
}

// ExportHF writes the model and its current weights as a Transformers folder (config.json,
// model.safetensors) that from_pretrained(dir) loads, with the names of family names: "hf-llama"
// (LlamaForCausalLM) or "hf-gpt2" (GPT2LMHeadModel, for a GPT with tie_embeddings); since 0.17.
// This process must hold every parameter (FailedPrecondition with one process per pipeline rank).
func (t *Trainer) ExportHF(dir, names string) error {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return errClosed("trainer")
	}
	return call(func(s core.Status) { t.t.ExportHf(dir, names, s) })
}

// Process returns this process's rank in the mpirun launch and the launch's number of processes,
// for a trainer with one process per rank; 0 and 1 when the ranks are threads.
func (t *Trainer) Process() (rank, size int, err error) {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return 0, 0, errClosed("trainer")
	}
	var p core.ProcessInfo
	err = call(func(s core.Status) { p = t.t.Process(s) })
	defer core.DeleteProcessInfo(p)
	if err != nil {
		return 0, 0, err
	}
	return int(p.GetRank()), int(p.GetSize()), nil
}

// NumRanks is the number of pipeline ranks (1 for the sequential trainer).
func (t *Trainer) NumRanks() (int, error) {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return 0, errClosed("trainer")
	}
	var n int
	err := call(func(s core.Status) { n = t.t.NumRanks(s) })
	return n, err
}

// RankStats returns every rank's statistics over the last step of a pipelined trainer, rank 0 first,
// in microseconds from the step start. A FailedPrecondition error for the sequential trainer or
// before the first step.
func (t *Trainer) RankStats() ([]RankStats, error) {
	n, err := t.NumRanks()
	if err != nil {
		return nil, err
	}
	defer runtime.KeepAlive(t)
	ranks := make([]RankStats, n)
	for i := range ranks {
		var r core.RankStats
		err := call(func(s core.Status) { r = t.t.RankStats(i, s) })
		if err == nil {
			ranks[i] = rankStats(r)
		}
		core.DeleteRankStats(r)
		if err != nil {
			return nil, err
		}
	}
	return ranks, nil
}

// BubbleRate is the last step's measured bubble rate: (makespan - busiest rank's busy time) /
// makespan. A FailedPrecondition error for the sequential trainer or before the first step.
func (t *Trainer) BubbleRate() (float64, error) {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return 0, errClosed("trainer")
	}
	var rate float64
	err := call(func(s core.Status) { rate = t.t.BubbleRate(s) })
	return rate, err
}

// TimelineToChromeTrace is the last step's measured timeline as Chrome trace JSON
// (https://ui.perfetto.dev): a track per rank, an event per action.
func (t *Trainer) TimelineToChromeTrace() (string, error) {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return "", errClosed("trainer")
	}
	var text string
	err := call(func(s core.Status) { text = t.t.TimelineToChromeTrace(s) })
	return text, err
}

// TimelineToSVG is the last step's measured timeline as an SVG image.
func (t *Trainer) TimelineToSVG() (string, error) {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return "", errClosed("trainer")
	}
	var text string
	err := call(func(s core.Status) { text = t.t.TimelineToSvg(s) })
	return text, err
}

// AdaptationsJSON is the re-partitions of an adaptive trainer (TrainerOptions.Adapt) so far, as
// a JSON array of {"step", "slowdown" (per rank), "from", "to" (layers per stage)}; "[]" without
// adaptation.
func (t *Trainer) AdaptationsJSON() (string, error) {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return "", errClosed("trainer")
	}
	var text string
	err := call(func(s core.Status) { text = t.t.AdaptationsJson(s) })
	return text, err
}

// FillReportJSON is what the fill job (Config["fill"], e.g. "sweep:grid.json": a packed MLP sweep
// run in the pipeline's bubbles) has done so far, as one JSON object with "steps_taken",
// "steps_total", "fill_seconds" and "models" (ranked by held-out loss); "null" without a fill job.
func (t *Trainer) FillReportJSON() (string, error) {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return "", errClosed("trainer")
	}
	var text string
	err := call(func(s core.Status) { text = t.t.FillReportJson(s) })
	return text, err
}

// toCore returns the native trainer options (the caller deletes them), or an error for a value
// they cannot carry.
func (opts TrainerOptions) toCore() (core.TrainerOptions, error) {
	o := core.NewTrainerOptions()
	if opts.MicroBatches != 0 {
		o.SetMicroBatches(opts.MicroBatches)
	}
	if opts.Seed != 0 {
		o.SetSeed(opts.Seed)
	}
	if opts.Optimizer != "" {
		o.SetOptimizer(opts.Optimizer)
	}
	for _, f := range []struct {
		v   float32
		set func(float32)
	}{
		{opts.LR, o.SetLr}, {opts.Momentum, o.SetMomentum}, {opts.WeightDecay, o.SetWeightDecay},
		{opts.Beta1, o.SetBeta1}, {opts.Beta2, o.SetBeta2}, {opts.Eps, o.SetEps}, {opts.ClipNorm, o.SetClipNorm},
	} {
		if f.v != 0 {
			f.set(f.v)
		}
	}
	if opts.BLASThreads != 0 {
		o.SetBlasThreads(opts.BLASThreads)
	}
	o.SetSchedule(opts.Schedule)
	o.SetScheduleText(opts.ScheduleText)
	for _, f := range []struct {
		name string
		v    int
		set  func(int)
	}{{"Stages", opts.Stages, o.SetStages}, {"Chunks", opts.Chunks, o.SetChunks},
		{"DataParallel", opts.DataParallel, o.SetDataParallel}, {"Ranks", opts.Ranks, o.SetRanks},
		{"SpectrainVersion", opts.SpectrainVersion, o.SetSpectrainVersion},
		{"SeqSlices", opts.SeqSlices, o.SetSeqSlices}, {"AdaptPatience", opts.AdaptPatience, o.SetAdaptPatience}} {
		if err := checkInt32(f.name, f.v); err != nil {
			core.DeleteTrainerOptions(o)
			return nil, err
		}
		if f.v != 0 {
			f.set(f.v)
		}
	}
	if opts.LayersPerStage != nil {
		layers := make([]int64, len(opts.LayersPerStage))
		for i, n := range opts.LayersPerStage {
			if err := checkInt32(fmt.Sprintf("LayersPerStage[%d]", i), n); err != nil {
				core.DeleteTrainerOptions(o)
				return nil, err
			}
			layers[i] = int64(n)
		}
		o.SetLayersPerStage(layers)
	}
	if opts.RecvTimeout != 0 {
		o.SetRecvTimeoutSeconds(opts.RecvTimeout.Seconds())
	}
	o.SetActivationPolicy(opts.ActivationPolicy)
	if opts.ActivationBudgetBytes != 0 {
		o.SetActivationBudgetBytes(opts.ActivationBudgetBytes)
	}
	o.SetOffloadDir(opts.OffloadDir)
	o.SetDevices(opts.Devices)
	if opts.Processes != "" {
		o.SetProcesses(opts.Processes)
	}
	o.SetGradientReduction(opts.GradientReduction)
	o.SetVerticalSync(opts.VerticalSync)
	// -1 is the C API's "none": the core layer's 0 (the runtime's terms).
	switch {
	case opts.PipemareAnnealUpdates == -1:
		o.SetPipemareAnnealUpdates(0)
	case opts.PipemareAnnealUpdates < -1:
		core.DeleteTrainerOptions(o)
		return nil, &Error{Code: InvalidArgument, Message: fmt.Sprintf(
			"PipemareAnnealUpdates is %d (expected > 0, 0 for the default or -1 for none)", opts.PipemareAnnealUpdates)}
	case opts.PipemareAnnealUpdates != 0:
		o.SetPipemareAnnealUpdates(opts.PipemareAnnealUpdates)
	}
	switch {
	case opts.PipemareDecay == -1:
		o.SetPipemareDecay(0)
	case opts.PipemareDecay != 0:
		o.SetPipemareDecay(opts.PipemareDecay) // outside (0, 1): refused by the core layer
	}
	o.SetLocalHead(opts.LocalHead)
	if opts.LRSchedule != "" {
		o.SetLrSchedule(opts.LRSchedule)
	}
	o.SetWarmupSteps(opts.WarmupSteps)
	o.SetDecaySteps(opts.DecaySteps)
	o.SetMinLr(opts.MinLR)
	o.SetAdapt(opts.Adapt)
	if opts.AdaptThreshold != 0 {
		o.SetAdaptThreshold(opts.AdaptThreshold)
	}
	if opts.SlowFactor != 0 {
		if err := checkInt32("SlowRank", opts.SlowRank); err != nil {
			core.DeleteTrainerOptions(o)
			return nil, err
		}
		o.SetSlowRank(opts.SlowRank)
		o.SetSlowFactor(opts.SlowFactor)
	}
	keys := make([]string, 0, len(opts.Config))
	for k := range opts.Config {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		o.Set(k, opts.Config[k])
	}
	return o, nil
}
