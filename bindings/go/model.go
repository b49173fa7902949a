package pipeforge

import (
	"runtime"

	"github.com/pipeforge/pipeforge-go/internal/core"
)

// Model is a model: layers, a loss and the shape of its inputs. A Trainer retains its model, so the
// Model may be closed once a trainer is built on it. Not safe for concurrent use.
type Model struct {
	m core.Model
}

// MLPConfig configures an MLP classifier: inputs float32 [B, InputDim], targets int32 [B]. Zero
// fields take the C API's defaults (32, [64 64], 10, "relu"); Hidden: nil is the default, an empty
// non-nil slice means no hidden layer.
type MLPConfig struct {
	InputDim   int64
	Hidden     []int64
	Classes    int64
	Activation string
}

// GPTConfig configures a small GPT: inputs int32 token ids [B, T], targets int32 [B, T],
// T <= SeqLen. Zero fields take the C API's defaults.
type GPTConfig struct {
	Vocab, SeqLen, DModel, Heads, Layers, MLPHidden int64
}

func newModel(build func(core.Status) core.Model) (*Model, error) {
	if abiError != nil {
		return nil, abiError
	}
	var m core.Model
	if err := call(func(s core.Status) { m = build(s) }); err != nil {
		return nil, err
	}
	model := &Model{m: m}
	runtime.SetFinalizer(model, (*Model).Close)
	return model, nil
}

// ModelFromJSON builds a model from model JSON ({"preset": "mlp"|"gpt", ...} or
// {"input": ..., "layers": [...], "loss": ...}). Malformed JSON is an InvalidArgument error naming the
// JSON path.
func ModelFromJSON(json string) (*Model, error) {
	return newModel(func(s core.Status) core.Model { return core.ModelFromJson(json, s) })
}

// ModelFromHF builds the model of a Hugging Face Transformers folder's config.json (a Llama or a
// GPT-2; since 0.17). Its weights are the folder's once Trainer.LoadHFWeights(dir) has loaded them. What PipeForge
// does not compute the same way is an InvalidArgument error naming the field; a missing config.json
// is NotFound.
func ModelFromHF(dir string) (*Model, error) {
	return newModel(func(s core.Status) core.Model { return core.ModelFromHf(dir, s) })
}

// NewMLP builds an MLP classifier.
func NewMLP(cfg MLPConfig) (*Model, error) {
	c := core.NewMlpConfig()
	defer core.DeleteMlpConfig(c)
	if cfg.InputDim != 0 {
		c.SetInputDim(cfg.InputDim)
	}
	if cfg.Hidden != nil {
		c.SetHidden(cfg.Hidden)
	}
	if cfg.Classes != 0 {
		c.SetClasses(cfg.Classes)
	}
	if cfg.Activation != "" {
		c.SetActivation(cfg.Activation)
	}
	return newModel(func(s core.Status) core.Model { return core.ModelMlp(c, s) })
}

// NewGPT builds a small GPT.
func NewGPT(cfg GPTConfig) (*Model, error) {
	c := core.NewGptConfig()
	defer core.DeleteGptConfig(c)
	for _, f := range []struct {
		v   int64
		set func(int64)
	}{
		{cfg.Vocab, c.SetVocab}, {cfg.SeqLen, c.SetSeqLen}, {cfg.DModel, c.SetDModel},
		{cfg.Heads, c.SetHeads}, {cfg.Layers, c.SetLayers}, {cfg.MLPHidden, c.SetMlpHidden},
	} {
		if f.v != 0 {
			f.set(f.v)
		}
	}
	return newModel(func(s core.Status) core.Model { return core.ModelGpt(c, s) })
}

// Close releases the model (a trainer built on it keeps its own reference). Idempotent.
func (m *Model) Close() error {
	if m != nil && m.m != nil {
		core.DeleteModel(m.m)
		m.m = nil
		runtime.SetFinalizer(m, nil)
	}
	return nil
}

// JSON is the model JSON that rebuilds this model (architecture, not parameter values).
func (m *Model) JSON() (string, error) {
	defer runtime.KeepAlive(m)
	if m == nil || m.m == nil {
		return "", errClosed("model")
	}
	var json string
	err := call(func(s core.Status) { json = m.m.ToJson(s) })
	return json, err
}

// ParameterNames lists the parameters in model order, e.g. "fc0.weight".
func (m *Model) ParameterNames() ([]string, error) {
	defer runtime.KeepAlive(m)
	if m == nil || m.m == nil {
		return nil, errClosed("model")
	}
	var n int64
	if err := call(func(s core.Status) { n = m.m.NumParameters(s) }); err != nil {
		return nil, err
	}
	names := make([]string, n)
	for i := range names {
		if err := call(func(s core.Status) { names[i] = m.m.ParameterName(int64(i), s) }); err != nil {
			return nil, err
		}
	}
	return names, nil
}

// NumParameterElements is the total number of parameter values.
func (m *Model) NumParameterElements() (int64, error) {
	defer runtime.KeepAlive(m)
	if m == nil || m.m == nil {
		return 0, errClosed("model")
	}
	var n int64
	err := call(func(s core.Status) { n = m.m.NumParameterElements(s) })
	return n, err
}
