package pipeforge

import (
	"encoding/json"
	"runtime"

	"github.com/pipeforge/pipeforge-go/internal/core"
)

// LinearOptions says how TrainLinear and TrainLinearFile train (docs/GLM.md). Zero fields take
// the C API's defaults: Loss "logistic" ("squared": ridge regression, "hinge": the linear SVM),
// Lambda 1e-4 (λ of (1/n) Σ loss + (λ/2) ‖w‖² + μ ‖w‖₁), L1 0 (μ: the elastic net), Solver "syscd" ("sequential", "async"), Threads
// every hardware thread (sequential: 1), Tol 1e-6 (the relative duality gap to stop at), MaxEpochs
// 1000, Seed 0, BucketRows about 1 KiB of values per SySCD bucket; Features (files only) the
// largest index in the file.
type LinearOptions struct {
	Loss, Solver string
	Lambda, Tol  float64
	L1           float64
	Threads      int
	MaxEpochs    int
	Seed         int64
	BucketRows   int64
	Features     int64
}

// LinearModel is what training reached: the weights w (no intercept) and how close to the
// optimum (Objective - DualityGap <= the optimum <= Objective). NegativeLabel and PositiveLabel
// are a file's two classes read as -1 and +1 (NaN for squared or arrays).
type LinearModel struct {
	Weights                              []float64
	Objective, DualObjective, DualityGap float64
	Epochs                               int
	Converged                            bool
	Seconds, Accuracy                    float64
	NegativeLabel, PositiveLabel         float64
}

func (opts LinearOptions) toCore() (core.GlmOptions, error) {
	for _, f := range []struct {
		name string
		v    int
	}{{"Threads", opts.Threads}, {"MaxEpochs", opts.MaxEpochs}} {
		if err := checkInt32(f.name, f.v); err != nil {
			return nil, err
		}
	}
	o := core.NewGlmOptions()
	if opts.Loss != "" {
		o.SetLoss(opts.Loss)
	}
	if opts.Solver != "" {
		o.SetSolver(opts.Solver)
	}
	if opts.Lambda != 0 {
		o.SetLambda(opts.Lambda)
	}
	if opts.Tol != 0 {
		o.SetTol(opts.Tol)
	}
	if opts.MaxEpochs != 0 {
		o.SetMaxEpochs(opts.MaxEpochs)
	}
	o.SetThreads(opts.Threads)
	o.SetSeed(opts.Seed)
	o.SetBucketRows(opts.BucketRows)
	o.SetL1(opts.L1)
	return o, nil
}

// TrainLinearFile trains on a libsvm-format file (<label> <feature>:<value> ..., features from 1);
// for logistic and hinge its two label values become -1 (the smaller) and +1. Errors name the
// file, line and column.
func TrainLinearFile(path string, opts LinearOptions) (*LinearModel, error) {
	o, err := opts.toCore()
	if err != nil {
		return nil, err
	}
	defer core.DeleteGlmOptions(o)
	return linearModel(func(s core.Status) core.GlmModel { return core.GlmModelTrainLibsvm(path, opts.Features, o, s) })
}

// TrainLinear trains on x, a float32 tensor of examples x features (row-major), and y, one label
// per example (-1 or +1 for logistic and hinge).
func TrainLinear(x Tensor, y []float64, opts LinearOptions) (*LinearModel, error) {
	o, err := opts.toCore()
	if err != nil {
		return nil, err
	}
	defer core.DeleteGlmOptions(o)
	values, err := x.toCore()
	if err != nil {
		return nil, err
	}
	defer core.DeleteTensor(values)
	data := core.NewGlmData()
	defer core.DeleteGlmData(data)
	data.SetDense(values)
	data.SetLabels(y)
	return linearModel(func(s core.Status) core.GlmModel { return core.GlmModelTrain(data, o, s) })
}

func linearModel(train func(core.Status) core.GlmModel) (*LinearModel, error) {
	var m core.GlmModel
	if err := call(func(s core.Status) { m = train(s) }); err != nil {
		return nil, err
	}
	defer core.DeleteGlmModel(m)
	var r core.GlmResult
	var text string
	if err := call(func(s core.Status) { r = m.Result(s) }); err != nil {
		return nil, err
	}
	defer core.DeleteGlmResult(r)
	if err := call(func(s core.Status) { text = m.ToJson(s) }); err != nil {
		return nil, err
	}
	var parsed struct {
		Weights []float64 `json:"weights"`
	}
	if err := json.Unmarshal([]byte(text), &parsed); err != nil {
		return nil, &Error{Code: Internal, Message: "the model's JSON: " + err.Error()}
	}
	runtime.KeepAlive(m)
	return &LinearModel{Weights: parsed.Weights, Objective: r.GetObjective(), DualObjective: r.GetDualObjective(),
		DualityGap: r.GetDualityGap(), Epochs: int(r.GetEpochs()), Converged: r.GetConverged(), Seconds: r.GetSeconds(),
		Accuracy: r.GetAccuracy(), NegativeLabel: r.GetNegativeLabel(), PositiveLabel: r.GetPositiveLabel()}, nil
}
