package pipeforge

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/pipeforge/pipeforge-go/internal/core"
)

// EvalResult is a forward-only pass over held-out data (Trainer.Evaluate).
type EvalResult struct {
	Loss         float64 // mean over the micro-batches of their mean loss
	Accuracy     float64 // share of the targets whose largest logit is the target
	MicroBatches int64
	Samples      int64 // rows
	Targets      int64 // target elements (rows x positions for token models)
}

// RunOptions configure Trainer.Run, the training loop: Steps steps from the data loader; with
// EvalEvery > 0 an evaluation (EvalMicroBatches, 0 = the trainer's MicroBatches) after every
// EvalEvery-th step and the last; with CheckpointEvery > 0 a checkpoint into CheckpointDir
// (step-N.pfckpt) after every CheckpointEvery-th step and the last, keeping the newest
// KeepCheckpoints (0 = all); MetricsLog, a JSON Lines file with one line per step ("" = none).
type RunOptions struct {
	Steps            int64
	EvalEvery        int64
	EvalMicroBatches int
	CheckpointEvery  int64
	CheckpointDir    string
	KeepCheckpoints  int
	MetricsLog       string
	// OnStep (nil: none) is called after every step but the last, on the goroutine that called
	// Run; returning true ends the run after that step as if it were the last (CheckpointDir gets
	// its checkpoint) and RunResult.Stopped says so. A panic in it does the same, and Run returns
	// it as a *StepPanic error.
	OnStep func(StepInfo) bool
}

// StepInfo is what RunOptions.OnStep sees after a step.
type StepInfo struct {
	Step, StepsRun, Tokens int64 // the trainer's step count after it; steps this Run has taken
	Loss, LR, Seconds      float64
}

// ErrInterrupted is returned by Run when an interrupt (Ctrl-C, os.Interrupt) or SIGTERM arrived
// while it ran: the run ended after the step in progress, with its checkpoint written as for the
// last step; the RunResult is valid. During Run those signals are delivered to Run instead of ending
// the program.
var ErrInterrupted = errors.New("pipeforge: the run was interrupted (it ended after the step in progress)")

// DivergedError is returned by Run when a step diverged (its loss, gradient norm or a parameter
// after the update was NaN or infinite): the run ended there, and no checkpoint was written for
// that step. Result is the run up to it; Result.Divergence says why.
type DivergedError struct {
	Result RunResult
}

func (e *DivergedError) Error() string {
	return fmt.Sprintf("pipeforge: training diverged at step %d: %s (no checkpoint was written for it)",
		e.Result.Step, e.Result.Divergence)
}

// StepPanic is the error Run returns when RunOptions.OnStep panicked.
type StepPanic struct {
	Value interface{}
}

func (p *StepPanic) Error() string { return fmt.Sprintf("pipeforge: OnStep panicked: %v", p.Value) }

// stepBridge is what the native run calls after each step (through a SWIG director). It never
// lets a panic unwind into C.
type stepBridge struct {
	onStep      func(StepInfo) bool
	signals     chan os.Signal
	interrupted bool
	panicked    *StepPanic
}

func (b *stepBridge) OnStep(info core.StepInfo) (stop bool) {
	defer func() {
		if r := recover(); r != nil {
			b.panicked = &StepPanic{Value: r}
			stop = true
		}
	}()
	select {
	case <-b.signals:
		b.interrupted = true
		return true
	default:
	}
	if b.onStep == nil {
		return false
	}
	return b.onStep(StepInfo{Step: info.GetStep(), StepsRun: info.GetStepsRun(), Tokens: info.GetTokens(),
		Loss: info.GetLoss(), LR: info.GetLr(), Seconds: info.GetSeconds()})
}

// RunResult is what Trainer.Run did; EvalLoss and EvalAccuracy are NaN when no evaluation ran.
type RunResult struct {
	Step, StepsRun           int64
	Loss                     float64 // the last step's
	EvalLoss, EvalAccuracy   float64 // the last evaluation's
	Evaluations, Checkpoints int
	Diverged                 bool   // a diverged step stopped the run
	LastCheckpoint           string // the newest checkpoint saved; "" when none
	Stopped                  bool   // OnStep or an interrupt ended the run early
	Divergence               string // with Diverged: why, e.g. "the loss is nan"; "" otherwise
}

// DataOptions describe a data source the runtime ships: Kind "char_text" (Path: a text file or a
// folder of them, "" = the licence texts in /usr/share/common-licenses; windows of SeqLen + 1
// characters), "synthetic" (Features, Classes), "csv" (Path required; FeatureScale), since 0.17
// "token_file" (Path and Vocab required: a nanoGPT or llm.c token file, served in the windows of
// char_text; a token >= Vocab fails the step that reads it) or, since 0.18, "cifar10" (Path
// required: a CIFAR-10 .bin file or the cifar-10-batches-bin folder; rows of 3072 pixels / 255 in
// channel-major order, labels 0..9). HeldOut serves the held-out split (char_text, token_file, csv
// and one cifar10 file: the last HeldOutFraction; a cifar10 folder: test_batch.bin). Zero fields
// take the defaults: 8 rows, 64 tokens, 32 features, 10 classes, feature scale 1.
type DataOptions struct {
	Kind              string
	Rows              int64
	Seed              int64
	Path              string
	SeqLen            int64
	HeldOutFraction   float64
	HeldOut           bool
	FeatureScale      float32
	Features, Classes int64
	Vocab             int64
}

// DataInfo is what a model for a built-in data source needs: VocabSize and SeqLen for char_text
// and token_file, Features and Classes otherwise.
type DataInfo struct {
	VocabSize, SeqLen, Features, Classes int64
}

func (o DataOptions) toCore() core.DataOptions {
	c := core.NewDataOptions()
	c.SetKind(o.Kind)
	for _, f := range []struct {
		v   int64
		set func(int64)
	}{{o.Rows, c.SetRows}, {o.Seed, c.SetSeed}, {o.SeqLen, c.SetSeqLen}, {o.Features, c.SetFeatures},
		{o.Classes, c.SetClasses}, {o.Vocab, c.SetVocab}} {
		if f.v != 0 {
			f.set(f.v)
		}
	}
	c.SetPath(o.Path)
	c.SetHeldOutFraction(o.HeldOutFraction)
	c.SetHeldOut(o.HeldOut)
	if o.FeatureScale != 0 {
		c.SetFeatureScale(o.FeatureScale)
	}
	return c
}

// BuiltinDataInfo says what a model for the data source needs (reading the text or CSV once).
func BuiltinDataInfo(opts DataOptions) (DataInfo, error) {
	o := opts.toCore()
	defer core.DeleteDataOptions(o)
	var i core.DataInfo
	err := call(func(s core.Status) { i = core.BuiltinDataInfo(o, s) })
	defer core.DeleteDataInfo(i)
	if err != nil {
		return DataInfo{}, err
	}
	return DataInfo{VocabSize: i.GetVocabSize(), SeqLen: i.GetSeqLen(), Features: i.GetFeatures(),
		Classes: i.GetClasses()}, nil
}

// installedLoader is a Go data loader the runtime holds, kept alive while it is installed.
type installedLoader struct {
	bridge   *loaderBridge
	director core.LoaderCallback
}

func (l *installedLoader) drop() {
	if l.director != nil {
		core.DeleteDirectorLoaderCallback(l.director)
	}
	l.bridge, l.director = nil, nil
}

// SetBuiltinData installs a built-in data source as the training data loader.
func (t *Trainer) SetBuiltinData(opts DataOptions) error {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return errClosed("trainer")
	}
	o := opts.toCore()
	defer core.DeleteDataOptions(o)
	if err := call(func(s core.Status) { t.t.SetBuiltinData(o, s) }); err != nil {
		return err
	}
	t.data.drop() // the runtime has let go of a Go loader installed before
	return nil
}

// SetBuiltinEvalData installs a built-in data source as the held-out loader.
func (t *Trainer) SetBuiltinEvalData(opts DataOptions) error {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return errClosed("trainer")
	}
	o := opts.toCore()
	defer core.DeleteDataOptions(o)
	if err := call(func(s core.Status) { t.t.SetBuiltinEvalData(o, s) }); err != nil {
		return err
	}
	t.eval.drop()
	return nil
}

// SetEvalLoader installs the held-out loader that Evaluate and Run evaluate on (nil removes it);
// every evaluation reads its micro-batches from position 0.
func (t *Trainer) SetEvalLoader(loader DataLoader) error {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return errClosed("trainer")
	}
	return t.install(&t.eval, t.t.SetEvalLoader, loader)
}

// install puts loader (nil: none) into the runtime through set and keeps its bridge in slot while
// the runtime holds it.
func (t *Trainer) install(slot *installedLoader, set func(core.LoaderCallback, core.Status), loader DataLoader) error {
	if loader == nil {
		if err := call(func(s core.Status) { set(nil, s) }); err != nil {
			return err
		}
		slot.drop()
		return nil
	}
	bridge := &loaderBridge{loader: loader}
	director := core.NewDirectorLoaderCallback(bridge)
	if err := call(func(s core.Status) { set(director, s) }); err != nil {
		core.DeleteDirectorLoaderCallback(director)
		return err
	}
	slot.drop() // the runtime has let go of the previous one
	*slot = installedLoader{bridge: bridge, director: director}
	return nil
}

// withLoaders runs body; a CallbackError gets the loader's own error as its cause.
func (t *Trainer) withLoaders(body func(s core.Status)) error {
	bridges := []*loaderBridge{t.data.bridge, t.eval.bridge}
	for _, b := range bridges {
		if b != nil {
			b.lastErr = nil
		}
	}
	err := call(body)
	if e, ok := err.(*Error); ok && e.Code == CallbackError {
		for _, b := range bridges {
			if b != nil && b.lastErr != nil && e.cause == nil {
				e.cause = b.lastErr
			}
			if b != nil {
				b.lastErr = nil
			}
		}
	}
	return err
}

// Evaluate runs forward only over the held-out loader's micro-batches 0 .. microBatches - 1,
// through the trainer's own pipeline: no gradient, no update. Asynchronous and local-learning
// schedules: a FailedPrecondition error.
func (t *Trainer) Evaluate(microBatches int) (EvalResult, error) {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return EvalResult{}, errClosed("trainer")
	}
	if err := checkInt32("microBatches", microBatches); err != nil {
		return EvalResult{}, err
	}
	var r core.EvalResult
	err := t.withLoaders(func(s core.Status) { r = t.t.Evaluate(microBatches, s) })
	defer core.DeleteEvalResult(r)
	if err != nil {
		return EvalResult{}, err
	}
	return EvalResult{Loss: r.GetLoss(), Accuracy: r.GetAccuracy(), MicroBatches: r.GetMicroBatches(),
		Samples: r.GetSamples(), Targets: r.GetTargets()}, nil
}

// Run is the training loop (RunOptions); LoadCheckpoint(CheckpointDir) resumes from the newest
// checkpoint. Errors besides the runtime's: ErrInterrupted (Ctrl-C or SIGTERM during the run),
// *StepPanic (OnStep panicked), *DivergedError (a diverged step); the RunResult is valid with them.
func (t *Trainer) Run(opts RunOptions) (RunResult, error) {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return RunResult{}, errClosed("trainer")
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"EvalMicroBatches", opts.EvalMicroBatches}, {"KeepCheckpoints", opts.KeepCheckpoints}} {
		if err := checkInt32(f.name, f.v); err != nil {
			return RunResult{}, err
		}
	}
	o := core.NewRunOptions()
	defer core.DeleteRunOptions(o)
	o.SetSteps(opts.Steps)
	o.SetEvalEvery(opts.EvalEvery)
	o.SetEvalMicroBatches(opts.EvalMicroBatches)
	o.SetCheckpointEvery(opts.CheckpointEvery)
	o.SetCheckpointDir(opts.CheckpointDir)
	o.SetKeepCheckpoints(opts.KeepCheckpoints)
	o.SetMetricsLog(opts.MetricsLog)
	bridge := &stepBridge{onStep: opts.OnStep, signals: make(chan os.Signal, 1)}
	director := core.NewDirectorStepCallback(bridge)
	defer core.DeleteDirectorStepCallback(director)
	signal.Notify(bridge.signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(bridge.signals)
	var r core.RunResult
	err := t.withLoaders(func(s core.Status) { r = t.t.RunWatched(o, director, s) })
	defer core.DeleteRunResult(r)
	if err != nil {
		return RunResult{}, err
	}
	result := RunResult{Step: r.GetStep(), StepsRun: r.GetStepsRun(), Loss: r.GetLoss(), EvalLoss: r.GetEvalLoss(),
		EvalAccuracy: r.GetEvalAccuracy(), Evaluations: int(r.GetEvaluations()), Checkpoints: int(r.GetCheckpoints()),
		Diverged: r.GetDiverged(), LastCheckpoint: r.GetLastCheckpoint(), Stopped: r.GetStopped(),
		Divergence: r.GetDivergence()}
	switch {
	case bridge.panicked != nil:
		return result, bridge.panicked
	case bridge.interrupted:
		return result, ErrInterrupted
	case result.Diverged:
		return result, &DivergedError{Result: result}
	}
	return result, nil
}

// Partition returns the top-level layers per stage of the partition in use (one entry for the
// sequential trainer).
func (t *Trainer) Partition() ([]int, error) {
	defer runtime.KeepAlive(t)
	if t == nil || t.t == nil {
		return nil, errClosed("trainer")
	}
	var n int64
	if err := call(func(s core.Status) { n = t.t.PartitionInto(nil, s) }); err != nil {
		return nil, err
	}
	counts := make([]int32, n)
	if err := call(func(s core.Status) { t.t.PartitionInto(counts, s) }); err != nil {
		return nil, err
	}
	return intsOf(counts), nil
}

// PartitionByParameters returns the layers per stage that minimise the largest of `stages`
// stages' parameter counts, from the parameters' shapes only (the command line's default
// partition; since 0.10); pass it as TrainerOptions.LayersPerStage.
func (m *Model) PartitionByParameters(stages int) ([]int, error) {
	defer runtime.KeepAlive(m)
	if err := m.checkPartitionRequest(stages); err != nil {
		return nil, err
	}
	counts := make([]int32, stages)
	if err := call(func(s core.Status) { m.m.PartitionByParametersInto(counts, s) }); err != nil {
		return nil, err
	}
	return intsOf(counts), nil
}

// PartitionBalanced returns the layers per stage that minimise the slowest of `stages` stages,
// from each top-level layer's time measured on the micro-batch (inputs, targets); pass it as
// TrainerOptions.LayersPerStage.
func (m *Model) PartitionBalanced(inputs, targets Tensor, stages int) ([]int, error) {
	defer runtime.KeepAlive(m)
	if err := m.checkPartitionRequest(stages); err != nil {
		return nil, err
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
	counts := make([]int32, stages)
	if err := call(func(s core.Status) { m.m.PartitionBalancedInto(in, tg, counts, s) }); err != nil {
		return nil, err
	}
	return intsOf(counts), nil
}

// checkPartitionRequest: the model is open and `stages` is a stage count the C API takes.
func (m *Model) checkPartitionRequest(stages int) error {
	if m == nil || m.m == nil {
		return errClosed("model")
	}
	if stages < 1 {
		return &Error{Code: InvalidArgument, Message: "stages must be >= 1"}
	}
	return checkInt32("stages", stages)
}

// intsOf converts layer counts from the C API's int32 to Go's int.
func intsOf(counts []int32) []int {
	out := make([]int, len(counts))
	for i, c := range counts {
		out[i] = int(c)
	}
	return out
}
