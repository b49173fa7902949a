// Tests of the Go binding. -reference names the reference_loss program (the reference run through
// the C API, tests/bindings/reference_loss.c), whose losses and checksum the binding must reproduce
// bit for bit.
package pipeforge_test

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pipeforge/pipeforge-go"
)

var referenceBinary = flag.String("reference", "", "path to the reference_loss program")

const (
	features, classes, rows, microBatches, steps = 8, 4, 8, 2, 3
)

type reference struct {
	losses   []string
	checksum string
	pipeline string // pipelined runs: "ranks N bubble_rate_ok B"
}

func runReference(t *testing.T, args ...string) reference {
	t.Helper()
	if *referenceBinary == "" {
		t.Fatal("-reference is not set")
	}
	out, err := exec.Command(*referenceBinary, args...).Output()
	if err != nil {
		t.Fatalf("%s: %v", *referenceBinary, err)
	}
	var ref reference
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		w := strings.Fields(line)
		switch w[0] {
		case "step":
			ref.losses = append(ref.losses, w[3]+" "+w[5])
		case "checksum":
			ref.checksum = w[1]
		case "ranks":
			ref.pipeline = line
		}
	}
	if len(ref.losses) != steps || ref.checksum == "" {
		t.Fatalf("unexpected reference output:\n%s", out)
	}
	return ref
}

func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// batchRows returns rows [first, first+n) of batch step (see reference_loss.c).
func batchRows(step uint64, first, n int) (pipeforge.Tensor, pipeforge.Tensor) {
	x := make([]float32, n*features)
	y := make([]int32, n)
	for i := 0; i < n; i++ {
		r := uint64(first + i)
		for f := uint64(0); f < features; f++ {
			x[i*features+int(f)] = float32(int64(mix(step*1000003+r*101+f)%2001)-1000) / 1024
		}
		y[i] = int32(mix(step*7919+r+1000000007) % classes)
	}
	return pipeforge.Float32(x, int64(n), features), pipeforge.Int32(y, int64(n))
}

func microBatch(position int64) (pipeforge.Tensor, pipeforge.Tensor, error) {
	half := rows / microBatches
	inputs, targets := batchRows(uint64(position/microBatches), int(position%microBatches)*half, half)
	return inputs, targets, nil
}

func referenceModel(t *testing.T) *pipeforge.Model {
	t.Helper()
	m, err := pipeforge.NewMLP(pipeforge.MLPConfig{InputDim: features, Hidden: []int64{16, 16}, Classes: classes,
		Activation: "relu"})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func referenceOptions() pipeforge.TrainerOptions {
	return pipeforge.TrainerOptions{MicroBatches: microBatches, Seed: 42, Optimizer: "adamw", LR: 0.01, ClipNorm: 1}
}

func referenceTrainer(t *testing.T) *pipeforge.Trainer {
	t.Helper()
	return trainerWith(t, referenceOptions())
}

func trainerWith(t *testing.T, opts pipeforge.TrainerOptions) *pipeforge.Trainer {
	t.Helper()
	m := referenceModel(t)
	defer m.Close() // the trainer keeps its own reference
	tr, err := pipeforge.NewTrainer(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func bits(r pipeforge.StepResult) string {
	return fmt.Sprintf("%016x %016x", math.Float64bits(r.Loss), math.Float64bits(r.GradNorm))
}

func checkReference(t *testing.T, ref reference, losses []string, tr *pipeforge.Trainer) {
	t.Helper()
	if !reflect.DeepEqual(losses, ref.losses) {
		t.Errorf("losses %v, want (the C API's) %v", losses, ref.losses)
	}
	sum, err := tr.Checksum()
	if err != nil || sum != ref.checksum {
		t.Errorf("checksum %s (%v), want %s", sum, err, ref.checksum)
	}
}

func TestStepMatchesTheCAPIBitwise(t *testing.T) {
	ref := runReference(t)
	tr := referenceTrainer(t)
	defer tr.Close()
	var losses []string
	for s := uint64(0); s < steps; s++ {
		inputs, targets := batchRows(s, 0, rows)
		r, err := tr.Step(inputs, targets)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, bits(r))
	}
	checkReference(t, ref, losses, tr)
	if m, err := tr.Metrics(); err != nil || m.Step != steps {
		t.Errorf("metrics %+v (%v), want %d steps", m, err, steps)
	}
}

func TestDataLoaderMatchesTheCAPIBitwise(t *testing.T) {
	ref := runReference(t)
	tr := referenceTrainer(t)
	defer tr.Close()
	if err := tr.SetDataLoader(pipeforge.DataLoaderFunc(microBatch)); err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var losses []string
	for s := 0; s < steps; s++ {
		r, err := tr.StepFromLoader()
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, bits(r))
	}
	checkReference(t, ref, losses, tr)
}

var errShard = errors.New("shard 3 is unreadable")

// flakyLoader fails once at position 3 (with an error or a panic), then serves the reference data.
type flakyLoader struct {
	panics bool
	failed bool
	seeks  []int64
}

func (l *flakyLoader) Next(position int64) (pipeforge.Tensor, pipeforge.Tensor, error) {
	if position == 3 && !l.failed {
		l.failed = true
		if l.panics {
			var m map[string]int
			m["boom"] = 1 // a nil-map panic, recovered by the binding
		}
		return pipeforge.Tensor{}, pipeforge.Tensor{}, fmt.Errorf("reading: %w", errShard)
	}
	return microBatch(position)
}

func (l *flakyLoader) SeekTo(position int64) error {
	l.seeks = append(l.seeks, position)
	return nil
}

func TestFailingLoaderReturnsItsErrorAndTheStepCanBeRetried(t *testing.T) {
	ref := runReference(t)
	for _, panics := range []bool{false, true} {
		t.Run(fmt.Sprintf("panics=%v", panics), func(t *testing.T) {
			tr := referenceTrainer(t)
			defer tr.Close()
			loader := &flakyLoader{panics: panics}
			if err := tr.SetDataLoader(loader); err != nil {
				t.Fatal(err)
			}
			r, err := tr.StepFromLoader()
			if err != nil {
				t.Fatal(err)
			}
			losses := []string{bits(r)}
			_, err = tr.StepFromLoader()
			var pfErr *pipeforge.Error
			if !errors.As(err, &pfErr) || pfErr.Code != pipeforge.CallbackError {
				t.Fatalf("got %v, want a CallbackError", err)
			}
			if !strings.Contains(err.Error(), "micro-batch 1 of 2") {
				t.Errorf("%q does not name the micro-batch", err)
			}
			if panics {
				var p *pipeforge.LoaderPanic
				if !errors.As(err, &p) || !strings.Contains(err.Error(), "assignment to entry in nil map") {
					t.Errorf("got %v, want the recovered panic", err)
				}
			} else if !errors.Is(err, errShard) || !strings.Contains(err.Error(), "reading: shard 3 is unreadable") {
				t.Errorf("got %v, want it to wrap the loader's error", err)
			}
			if m, _ := tr.Metrics(); m.Step != 1 {
				t.Errorf("the failed step changed the trainer: %+v", m)
			}
			for s := 1; s < steps; s++ {
				r, err := tr.StepFromLoader()
				if err != nil {
					t.Fatal(err)
				}
				losses = append(losses, bits(r))
			}
			checkReference(t, ref, losses, tr)
			if len(loader.seeks) == 0 {
				t.Errorf("the loader was not told to seek back after the failure")
			}
		})
	}
}

func TestErrors(t *testing.T) {
	_, err := pipeforge.ModelFromJSON(`{"layers": [`)
	var pfErr *pipeforge.Error
	if !errors.As(err, &pfErr) || pfErr.Code != pipeforge.InvalidArgument || !strings.Contains(pfErr.Message, "malformed") {
		t.Errorf("bad JSON: got %v", err)
	}
	if !errors.Is(err, &pipeforge.Error{Code: pipeforge.InvalidArgument}) {
		t.Errorf("errors.Is does not match on the code: %v", err)
	}

	tr := referenceTrainer(t)
	inputs, targets := batchRows(0, 0, rows)
	if _, err := tr.Step(targets, inputs); !errors.Is(err, &pipeforge.Error{Code: pipeforge.InvalidArgument}) {
		t.Errorf("swapped tensors: got %v", err)
	}
	if _, err := tr.Step(pipeforge.Float32(make([]float32, 3), 2, 2), targets); err == nil {
		t.Errorf("a shape that does not match the data was accepted")
	}
	if _, err := tr.Parameter("nope.weight"); !errors.Is(err, &pipeforge.Error{Code: pipeforge.NotFound}) {
		t.Errorf("unknown parameter: got %v", err)
	}
	if _, err := tr.StepFromLoader(); !errors.Is(err, &pipeforge.Error{Code: pipeforge.FailedPrecondition}) {
		t.Errorf("no data loader: got %v", err)
	}
	if err := tr.LoadCheckpoint(filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Errorf("loading a missing checkpoint worked")
	}
	tr.Close()
	tr.Close() // idempotent
	if _, err := tr.Step(inputs, targets); !errors.Is(err, &pipeforge.Error{Code: pipeforge.FailedPrecondition}) {
		t.Errorf("closed trainer: got %v", err)
	}
	if _, err := pipeforge.NewTrainer(nil, pipeforge.TrainerOptions{}); err == nil {
		t.Errorf("a nil model was accepted")
	}
	m := referenceModel(t)
	if _, err := pipeforge.NewTrainer(m, pipeforge.TrainerOptions{Optimizer: "adam"}); !errors.Is(err, &pipeforge.Error{Code: pipeforge.InvalidArgument}) {
		t.Errorf("bad optimizer: got %v", err)
	}
	m.Close()
	if _, err := m.JSON(); err == nil {
		t.Errorf("a closed model answered")
	}
	if pipeforge.InvalidArgument.String() != "INVALID_ARGUMENT" {
		t.Errorf("code name %q", pipeforge.InvalidArgument.String())
	}
}

func TestParametersAndCheckpoints(t *testing.T) {
	tr := referenceTrainer(t)
	defer tr.Close()
	inputs, targets := batchRows(0, 0, rows)
	if _, err := tr.Step(inputs, targets); err != nil {
		t.Fatal(err)
	}
	w, err := tr.Parameter("fc0.weight")
	if err != nil || !reflect.DeepEqual(w.Shape, []int64{16, features}) || len(w.F32) != 16*features {
		t.Fatalf("fc0.weight: %v %v", w, err)
	}
	path := filepath.Join(t.TempDir(), "ckpt")
	if err := tr.SaveCheckpoint(path); err != nil {
		t.Fatal(err)
	}
	saved, _ := tr.Checksum()
	if err := tr.SetParameter("fc0.weight", make([]float32, 16*features)); err != nil {
		t.Fatal(err)
	}
	if sum, _ := tr.Checksum(); sum == saved {
		t.Errorf("SetParameter changed nothing")
	}
	if err := tr.LoadCheckpoint(path); err != nil {
		t.Fatal(err)
	}
	if sum, _ := tr.Checksum(); sum != saved {
		t.Errorf("checksum after load %s, want %s", sum, saved)
	}
	again, _ := tr.Parameter("fc0.weight")
	if !reflect.DeepEqual(again.F32, w.F32) {
		t.Errorf("fc0.weight differs after the round trip")
	}

	m := referenceModel(t)
	defer m.Close()
	names, err := m.ParameterNames()
	if err != nil || strings.Join(names, " ") != "fc0.weight fc0.bias fc1.weight fc1.bias head.weight head.bias" {
		t.Errorf("parameter names %v (%v)", names, err)
	}
	json, err := m.JSON()
	if err != nil {
		t.Fatal(err)
	}
	m2, err := pipeforge.ModelFromJSON(json)
	if err != nil {
		t.Fatal(err)
	}
	m2.Close()
}

// Hugging Face Transformers folders and token files (C API 0.17).
const llamaJSON = `{"preset": "llama", "vocab": 20, "seq_len": 8, "d_model": 16, "heads": 4, "kv_heads": 2,
	"layers": %d, "mlp_hidden": 24}`

// writeTokens writes a nanoGPT token file (uint16 little-endian, no header) of count tokens i % 20.
func writeTokens(t *testing.T, count int) string {
	bytes := make([]byte, 2*count)
	for i := 0; i < count; i++ {
		bytes[2*i] = byte(i % 20)
	}
	path := filepath.Join(t.TempDir(), "train.bin")
	if err := os.WriteFile(path, bytes, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func tokenData(path string, vocab int64) pipeforge.DataOptions {
	return pipeforge.DataOptions{Kind: "token_file", Path: path, Vocab: vocab, Rows: 2, SeqLen: 8, Seed: 1}
}

func TestALlamaTrainedOnATokenFileComesBackFromItsTransformersFolder(t *testing.T) {
	path := writeTokens(t, 200)
	if info, err := pipeforge.BuiltinDataInfo(tokenData(path, 20)); err != nil || info.VocabSize != 20 || info.SeqLen != 8 {
		t.Fatalf("info %+v (%v)", info, err)
	}
	model, err := pipeforge.ModelFromJSON(fmt.Sprintf(llamaJSON, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	trained, err := pipeforge.NewTrainer(model, pipeforge.TrainerOptions{MicroBatches: 2, Seed: 7, LR: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	defer trained.Close()
	if err := trained.SetBuiltinData(tokenData(path, 20)); err != nil {
		t.Fatal(err)
	}
	for s := 0; s < 2; s++ {
		if r, err := trained.StepFromLoader(); err != nil || math.IsNaN(r.Loss) {
			t.Fatalf("step %d: %+v (%v)", s, r, err)
		}
	}
	hf := filepath.Join(t.TempDir(), "hf")
	if err := trained.ExportHF(hf, "hf-llama"); err != nil {
		t.Fatal(err)
	}
	want, _ := trained.Checksum()
	names, _ := model.ParameterNames()

	restored, err := pipeforge.ModelFromHF(hf)
	if err != nil {
		t.Fatal(err)
	}
	defer restored.Close()
	if got, _ := restored.ParameterNames(); !reflect.DeepEqual(got, names) {
		t.Errorf("parameter names %v, want %v", got, names)
	}
	loaded, err := pipeforge.NewTrainer(restored, pipeforge.TrainerOptions{Seed: 99, Schedule: "1f1b", Ranks: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer loaded.Close()
	if sum, _ := loaded.Checksum(); sum == want {
		t.Fatalf("a trainer of another seed already had the weights")
	}
	if err := loaded.LoadHFWeights(hf); err != nil {
		t.Fatal(err)
	}
	if sum, _ := loaded.Checksum(); sum != want {
		t.Errorf("checksum after LoadHFWeights %s, want %s", sum, want)
	}
	for _, name := range names {
		a, _ := trained.Parameter(name)
		b, _ := loaded.Parameter(name)
		if !reflect.DeepEqual(a.F32, b.F32) {
			t.Errorf("%s differs after the round trip", name)
		}
	}
}

func TestTransformersFoldersAndTokenFilesThatDoNotFitAreRefused(t *testing.T) {
	small := filepath.Join(t.TempDir(), "small")
	oneBlock, err := pipeforge.ModelFromJSON(fmt.Sprintf(llamaJSON, 1))
	if err != nil {
		t.Fatal(err)
	}
	defer oneBlock.Close()
	exporter, err := pipeforge.NewTrainer(oneBlock, pipeforge.TrainerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer exporter.Close()
	if err := exporter.ExportHF(small, "hf-llama"); err != nil {
		t.Fatal(err)
	}
	if err := exporter.ExportHF(small, "hf-bert"); !errors.Is(err, &pipeforge.Error{Code: pipeforge.InvalidArgument}) ||
		!strings.Contains(err.Error(), "unknown names 'hf-bert'") {
		t.Errorf("hf-bert: got %v", err)
	}

	model, err := pipeforge.ModelFromJSON(fmt.Sprintf(llamaJSON, 2))
	if err != nil {
		t.Fatal(err)
	}
	defer model.Close()
	tr, err := pipeforge.NewTrainer(model, pipeforge.TrainerOptions{MicroBatches: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	before, _ := tr.Checksum()
	err = tr.LoadHFWeights(small)
	if !errors.Is(err, &pipeforge.Error{Code: pipeforge.InvalidArgument}) || !strings.Contains(err.Error(), "model.layers.1.") {
		t.Errorf("a folder of one block into two: got %v", err)
	}
	// Tokens i % 20 against a vocabulary of 5 (every window of 9 holds one >= 5).
	if err := tr.SetBuiltinData(tokenData(writeTokens(t, 200), 5)); err != nil {
		t.Fatal(err)
	}
	_, err = tr.StepFromLoader()
	if !errors.Is(err, &pipeforge.Error{Code: pipeforge.CallbackError}) ||
		!strings.Contains(err.Error(), "outside the model's vocabulary of 5") {
		t.Errorf("a token outside the vocabulary: got %v", err)
	}
	if sum, _ := tr.Checksum(); sum != before {
		t.Errorf("a refusal changed the parameters")
	}
	if _, err := pipeforge.BuiltinDataInfo(tokenData(small, 0)); err == nil || !strings.Contains(err.Error(), "options->vocab is 0") {
		t.Errorf("no vocabulary: got %v", err)
	}
	if _, err := pipeforge.ModelFromHF(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, &pipeforge.Error{Code: pipeforge.NotFound}) {
		t.Errorf("a missing folder: got %v", err)
	}
}

// CIFAR-10 images (C API 0.18).

// writeCifar10 writes CIFAR-10 records with these ids: a label byte (id % 10), 3072 pixel bytes
// ((id + k) % 256).
func writeCifar10(t *testing.T, path string, ids ...int) string {
	bytes := make([]byte, 0, 3073*len(ids))
	for _, id := range ids {
		bytes = append(bytes, byte(id%10))
		for k := 0; k < 3072; k++ {
			bytes = append(bytes, byte((id+k)%256))
		}
	}
	if err := os.WriteFile(path, bytes, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func cifar10MLP(t *testing.T) *pipeforge.Model {
	t.Helper()
	m, err := pipeforge.NewMLP(pipeforge.MLPConfig{InputDim: 3072, Hidden: []int64{8}, Classes: 10})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestACifar10FolderTrainsAnMLPAndDamageIsRefused(t *testing.T) {
	folder := t.TempDir()
	for n := 1; n <= 5; n++ {
		writeCifar10(t, filepath.Join(folder, fmt.Sprintf("data_batch_%d.bin", n)), 10*n, 10*n+1)
	}
	writeCifar10(t, filepath.Join(folder, "test_batch.bin"), 100, 101, 102)
	data := pipeforge.DataOptions{Kind: "cifar10", Path: folder, Rows: 2}
	if info, err := pipeforge.BuiltinDataInfo(data); err != nil || info.Features != 3072 || info.Classes != 10 {
		t.Fatalf("info %+v (%v)", info, err)
	}
	model := cifar10MLP(t)
	defer model.Close()
	tr, err := pipeforge.NewTrainer(model, pipeforge.TrainerOptions{MicroBatches: 2, Seed: 7, LR: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	heldOut := data
	heldOut.HeldOut = true
	if err := tr.SetBuiltinData(data); err != nil {
		t.Fatal(err)
	}
	if err := tr.SetBuiltinEvalData(heldOut); err != nil {
		t.Fatal(err)
	}
	if r, err := tr.StepFromLoader(); err != nil || math.IsNaN(r.Loss) {
		t.Fatalf("step: %+v (%v)", r, err)
	}
	// test_batch.bin: 2 images, then the remainder.
	if e, err := tr.Evaluate(2); err != nil || e.Samples != 3 || math.IsNaN(e.Loss) {
		t.Errorf("evaluate: %+v (%v)", e, err)
	}

	bad := writeCifar10(t, filepath.Join(folder, "bad.bin"), 1, 2)
	f, err := os.OpenFile(bad, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{10}, 3073); err != nil { // record 1's label
		t.Fatal(err)
	}
	f.Close()
	other := cifar10MLP(t)
	defer other.Close()
	one, err := pipeforge.NewTrainer(other, pipeforge.TrainerOptions{MicroBatches: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close()
	before, _ := one.Checksum()
	if err := one.SetBuiltinData(pipeforge.DataOptions{Kind: "cifar10", Path: bad, Rows: 2}); err != nil {
		t.Fatal(err)
	}
	_, err = one.StepFromLoader()
	if !errors.Is(err, &pipeforge.Error{Code: pipeforge.CallbackError}) ||
		!strings.Contains(err.Error(), "record 1 (counting from 0) has label 10") {
		t.Errorf("label 10: got %v", err)
	}
	if sum, _ := one.Checksum(); sum != before {
		t.Errorf("a refusal changed the parameters")
	}
	cut := filepath.Join(folder, "cut.bin")
	if err := os.WriteFile(cut, make([]byte, 3073+5), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = pipeforge.BuiltinDataInfo(pipeforge.DataOptions{Kind: "cifar10", Path: cut})
	if !errors.Is(err, &pipeforge.Error{Code: pipeforge.DataLoss}) || !strings.Contains(err.Error(), "cut.bin' holds 3078 bytes") {
		t.Errorf("a cut file: got %v", err)
	}
	if err := os.Remove(filepath.Join(folder, "test_batch.bin")); err != nil {
		t.Fatal(err)
	}
	_, err = pipeforge.BuiltinDataInfo(data)
	if !errors.Is(err, &pipeforge.Error{Code: pipeforge.NotFound}) || !strings.Contains(err.Error(), "test_batch.bin") {
		t.Errorf("a folder without test_batch.bin: got %v", err)
	}
}

func TestVersion(t *testing.T) {
	if err := pipeforge.CheckABI(); err != nil {
		t.Fatal(err)
	}
	if v := pipeforge.Version(); strings.Count(v, ".") != 2 {
		t.Errorf("version %q", v)
	}
}

// ---- schedules ----

func generate(t *testing.T, name string, opts pipeforge.ScheduleOptions) *pipeforge.Schedule {
	t.Helper()
	s, err := pipeforge.GenerateSchedule(name, opts)
	if err != nil {
		t.Fatalf("GenerateSchedule(%q): %v", name, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func simulate(t *testing.T, s *pipeforge.Schedule, costs pipeforge.CostModel) *pipeforge.Simulation {
	t.Helper()
	sim, err := s.Simulate(costs)
	if err != nil {
		t.Fatalf("Simulate: %v", err)
	}
	t.Cleanup(func() { sim.Close() })
	return sim
}

func TestScheduleOneFOneBBubbleRateAndPeakActivations(t *testing.T) {
	s := generate(t, "1f1b", pipeforge.ScheduleOptions{Stages: 4, MicroBatches: 8, Chunks: 1})
	for _, c := range []struct {
		get  func() (int, error)
		want int
	}{{s.NumRanks, 4}, {s.NumStages, 4}, {s.NumMicroBatches, 8}} {
		if n, err := c.get(); err != nil || n != c.want {
			t.Errorf("shape: got %d (%v), want %d", n, err, c.want)
		}
	}
	costs := pipeforge.DefaultCostModel()
	if want := (pipeforge.CostModel{TF: 1, TB: 1, TW: 1, TComm: 0, MB: 1, MW: 0}); !reflect.DeepEqual(costs, want) {
		t.Errorf("DefaultCostModel() = %+v, want %+v", costs, want)
	}
	sim := simulate(t, s, costs)
	sum := sim.Summary()
	if math.Abs(sum.BubbleRate-3.0/11.0) > 1e-12 || math.Abs(sum.SpanBubbleRate-3.0/11.0) > 1e-12 {
		t.Errorf("bubble rates %v %v, want 3/11 = (P-1)/(M+P-1)", sum.BubbleRate, sum.SpanBubbleRate)
	}
	if sum.Makespan != 33 || sum.Ideal != 24 || sum.MaxSpan != 33 || sum.NumRanks != 4 {
		t.Errorf("summary %+v", sum)
	}
	var peaks []int64
	for i, r := range sim.Ranks() {
		peaks = append(peaks, r.PeakActivations)
		if r.Busy != 24 || r.Busy+r.Idle != 33 || r.FirstStart != float64(i) || r.PeakActivationBytes != float64(r.PeakActivations) {
			t.Errorf("rank %d: %+v", i, r)
		}
	}
	if !reflect.DeepEqual(peaks, []int64{4, 3, 2, 1}) {
		t.Errorf("peak activations %v, want [4 3 2 1]", peaks)
	}
	if a, err := sim.ASCII(40); err != nil || !strings.Contains(a, "rank 3") {
		t.Errorf("ASCII: %q %v", a, err)
	}
	if svg, err := sim.SVG(); err != nil || !strings.Contains(svg, "<svg") {
		t.Errorf("SVG: %v", err)
	}
}

func TestScheduleTextRoundTrip(t *testing.T) {
	for _, name := range []string{"1f1b", "zb-v", "zb-h2"} {
		s := generate(t, name, pipeforge.ScheduleOptions{Stages: 4, MicroBatches: 8})
		text, err := s.Text()
		if err != nil {
			t.Fatal(err)
		}
		parsed, err := pipeforge.ParseSchedule(text)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if again, err := parsed.Text(); err != nil || again != text {
			t.Errorf("%s: the text does not round-trip (%v)", name, err)
		}
		if err := parsed.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if a, b := simulate(t, s, pipeforge.DefaultCostModel()), simulate(t, parsed, pipeforge.DefaultCostModel()); a.Summary() != b.Summary() {
			t.Errorf("%s: %+v != %+v", name, a.Summary(), b.Summary())
		}
		parsed.Close()
	}
}

func TestScheduleErrors(t *testing.T) {
	invalid := &pipeforge.Error{Code: pipeforge.InvalidArgument}
	_, err := pipeforge.GenerateSchedule("2f2b", pipeforge.ScheduleOptions{Stages: 4, MicroBatches: 8})
	var pfErr *pipeforge.Error
	if !errors.As(err, &pfErr) || pfErr.Code != pipeforge.InvalidArgument || !strings.Contains(pfErr.Message, "'2f2b'") ||
		!strings.Contains(pfErr.Message, "zb-h1") {
		t.Errorf("unknown schedule: got %v", err)
	}
	if _, err := pipeforge.GenerateSchedule("1f1b", pipeforge.ScheduleOptions{MicroBatches: 8}); !errors.Is(err, invalid) ||
		!strings.Contains(err.Error(), "stages") {
		t.Errorf("no stages: got %v", err)
	}
	if _, err := pipeforge.GenerateSchedule("1f1b", pipeforge.ScheduleOptions{Stages: 1 << 40, MicroBatches: 8}); !errors.Is(err, invalid) {
		t.Errorf("stages beyond int32: got %v", err)
	}
	if _, err := pipeforge.ParseSchedule("0F0 0QQ1"); !errors.Is(err, invalid) || !strings.Contains(err.Error(), "0QQ1") {
		t.Errorf("bad text: got %v", err)
	}
	s := generate(t, "gpipe", pipeforge.ScheduleOptions{Stages: 2, MicroBatches: 2})
	if _, err := s.Simulate(pipeforge.CostModel{TF: -1}); !errors.Is(err, invalid) || !strings.Contains(err.Error(), "t_f") {
		t.Errorf("negative t_f: got %v", err)
	}
	sim := simulate(t, s, pipeforge.DefaultCostModel())
	if _, err := sim.ASCII(3); !errors.Is(err, invalid) || !strings.Contains(err.Error(), "width") {
		t.Errorf("narrow ASCII: got %v", err)
	}
	s.Close()
	s.Close() // idempotent
	closed := &pipeforge.Error{Code: pipeforge.FailedPrecondition}
	if _, err := s.Text(); !errors.Is(err, closed) {
		t.Errorf("closed schedule: got %v", err)
	}
	if _, err := s.Simulate(pipeforge.DefaultCostModel()); !errors.Is(err, closed) {
		t.Errorf("closed schedule: got %v", err)
	}
	if _, err := s.NumRanks(); !errors.Is(err, closed) {
		t.Errorf("closed schedule: got %v", err)
	}
	if _, err := sim.ChromeTrace(); err != nil {
		t.Errorf("a simulation needs its schedule: %v", err)
	}
	sim.Close()
	if _, err := sim.ChromeTrace(); !errors.Is(err, closed) {
		t.Errorf("closed simulation: got %v", err)
	}
	if sim.Summary().NumRanks != 2 || len(sim.Ranks()) != 2 {
		t.Errorf("results after Close: %+v", sim.Summary())
	}
}

// Since 0.6: PyTorch's CSV, send/recv semantics, the cost-driven V schedules.
const deferredReceives = "0F0,0SEND_F0,0RECV_B0,0F1,0SEND_F1,0B0,0RECV_B1,0B1\n" +
	"1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1\n"

func TestSchedulePytorchCSVRoundTrip(t *testing.T) {
	s := generate(t, "zb-h1", pipeforge.ScheduleOptions{Stages: 4, MicroBatches: 8})
	defer s.Close()
	csv, err := s.PytorchCSV(false)
	if err != nil || !strings.Contains(csv, "3F0,3I0,3F1") || strings.Contains(csv, "SEND") {
		t.Fatalf("compute-only CSV: %q, %v", csv, err)
	}
	parsed, err := pipeforge.ParsePytorchCSV(csv)
	if err != nil {
		t.Fatal(err)
	}
	defer parsed.Close()
	if again, err := parsed.PytorchCSV(false); err != nil || again != csv {
		t.Errorf("the CSV does not round-trip (%v)", err)
	}
	if a, b := simulate(t, s, pipeforge.DefaultCostModel()), simulate(t, parsed, pipeforge.DefaultCostModel()); a.Summary().Makespan != b.Summary().Makespan {
		t.Errorf("%+v != %+v", a.Summary(), b.Summary())
	}
	invalid := &pipeforge.Error{Code: pipeforge.InvalidArgument}
	if _, err := pipeforge.ParsePytorchCSV("0F0,0QQ0\n"); !errors.Is(err, invalid) || !strings.Contains(err.Error(), "0QQ0") {
		t.Errorf("bad CSV: got %v", err)
	}
}

func TestScheduleDeferredReceivesArePostedOnly(t *testing.T) {
	if len(pipeforge.CommSemantics) != 2 {
		t.Errorf("CommSemantics: %v", pipeforge.CommSemantics)
	}
	s, err := pipeforge.ParsePytorchCSV(deferredReceives)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if csv, err := s.PytorchCSV(true); err != nil || csv != deferredReceives {
		t.Errorf("with comms: %q, %v", csv, err)
	}
	invalid := &pipeforge.Error{Code: pipeforge.InvalidArgument}
	if err := s.Validate(); !errors.Is(err, invalid) || !strings.Contains(err.Error(), "deadlock") {
		t.Errorf("rendezvous: got %v", err)
	}
	if err := s.ValidateComm("posted"); err != nil {
		t.Errorf("posted: %v", err)
	}
	if err := s.ValidateComm("buffered"); !errors.Is(err, invalid) || !strings.Contains(err.Error(), "'buffered'") {
		t.Errorf("unknown comm: got %v", err)
	}
	if _, err := s.Simulate(pipeforge.DefaultCostModel()); !errors.Is(err, invalid) {
		t.Errorf("rendezvous simulation: got %v", err)
	}
	costs := pipeforge.DefaultCostModel()
	costs.TComm = 0.5
	sim, err := s.SimulateComm(costs, "posted")
	if err != nil {
		t.Fatal(err)
	}
	defer sim.Close()
	// 0BW0 waits for 1SEND_B0 (4.5) + 0.5; 0BW1 for 1SEND_B1 (7.5) + 0.5 and ends at 10.
	if sim.Summary().Makespan != 10 {
		t.Errorf("posted makespan %v, want 10", sim.Summary().Makespan)
	}
	if _, err := s.SimulateComm(costs, "eager"); !errors.Is(err, invalid) || !strings.Contains(err.Error(), "'eager'") {
		t.Errorf("unknown comm: got %v", err)
	}
}

func TestScheduleVMinTakesMemLimit(t *testing.T) {
	peak := func(s *pipeforge.Schedule) float64 {
		p := 0.0
		for _, r := range simulate(t, s, pipeforge.DefaultCostModel()).Ranks() {
			p = math.Max(p, r.PeakActivationBytes)
		}
		return p
	}
	own := generate(t, "v-min", pipeforge.ScheduleOptions{Stages: 6, MicroBatches: 12})
	defer own.Close()
	capped := generate(t, "v-min", pipeforge.ScheduleOptions{Stages: 6, MicroBatches: 12, MemLimit: 1})
	defer capped.Close()
	if a, b := peak(own), peak(capped); a > 6 || b > 2 || a <= b {
		t.Errorf("peaks: own cap %v (<= 6), mem limit 1 %v (<= 2)", a, b)
	}
}

func TestScheduleLoweredSimulatesToTheSameMakespan(t *testing.T) {
	for _, name := range []string{"1f1b", "zb-h1", "zb-v"} {
		s := generate(t, name, pipeforge.ScheduleOptions{Stages: 4, MicroBatches: 8})
		lowered, err := s.Lower()
		if err != nil {
			t.Fatal(err)
		}
		if err := lowered.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if text, _ := lowered.Text(); !strings.Contains(text, "SEND_F") {
			t.Errorf("%s: no SEND_F in the lowered schedule", name)
		}
		for _, tComm := range []float64{0, 0.25} {
			costs := pipeforge.DefaultCostModel()
			costs.TComm = tComm
			a, b := simulate(t, s, costs).Summary().Makespan, simulate(t, lowered, costs).Summary().Makespan
			if math.Abs(a-b) > 1e-12 {
				t.Errorf("%s, t_comm %v: makespan %v lowered, %v not", name, tComm, b, a)
			}
		}
		lowered.Close()
	}
}

func TestSchedulePerStageCosts(t *testing.T) {
	s := generate(t, "gpipe", pipeforge.ScheduleOptions{Stages: 2, MicroBatches: 2})
	costs := pipeforge.DefaultCostModel()
	costs.StageTF = []float64{1, 3}
	ranks := simulate(t, s, costs).Ranks()
	if ranks[0].Busy != 2*(1+1+1) || ranks[1].Busy != 2*(3+1+1) {
		t.Errorf("busy %v %v", ranks[0].Busy, ranks[1].Busy)
	}
	costs.TW = 0
	costs.StageMB = []float64{2, 5}
	ranks = simulate(t, s, costs).Ranks()
	if ranks[1].Busy != 2*(3+1) || ranks[1].PeakActivationBytes != 10 {
		t.Errorf("rank 1: %+v", ranks[1])
	}
	costs.StageTB = []float64{1, 1, 1}
	if _, err := s.Simulate(costs); err == nil || !strings.Contains(err.Error(), "stage_t_b has 3") {
		t.Errorf("mismatched per-stage lengths: got %v", err)
	}
	costs.StageTB = []float64{}
	if _, err := s.Simulate(costs); err == nil || !strings.Contains(err.Error(), "has 0") {
		t.Errorf("an empty (non-nil) per-stage slice: got %v", err)
	}
}

func TestScheduleChromeTraceIsJSON(t *testing.T) {
	s := generate(t, "zb-h1", pipeforge.ScheduleOptions{Stages: 4, MicroBatches: 8})
	costs := pipeforge.DefaultCostModel()
	costs.TComm = 0.5
	sim := simulate(t, s, costs)
	s.Close() // a simulation does not need its schedule
	text, err := sim.ChromeTrace()
	if err != nil {
		t.Fatal(err)
	}
	var trace struct {
		TraceEvents []struct {
			Ph, Cat string
			Ts, Dur float64
			Tid     int
		} `json:"traceEvents"`
	}
	if err := json.Unmarshal([]byte(text), &trace); err != nil {
		t.Fatalf("the Chrome trace is not JSON: %v", err)
	}
	actions, end, tracks := 0, 0.0, map[int]bool{}
	for _, e := range trace.TraceEvents {
		if e.Ph == "X" && (e.Cat == "F" || e.Cat == "B" || e.Cat == "W") {
			actions++
			tracks[e.Tid] = true
			end = math.Max(end, e.Ts+e.Dur)
		}
	}
	if actions != 4*8*3 || len(tracks) != 4 || math.Abs(end-sim.Summary().Makespan) > 1e-6 {
		t.Errorf("%d actions on %d tracks ending at %v (makespan %v)", actions, len(tracks), end, sim.Summary().Makespan)
	}
}

// ---- pipelined training ----

func trainSteps(t *testing.T, tr *pipeforge.Trainer) []string {
	t.Helper()
	var losses []string
	for s := uint64(0); s < steps; s++ {
		inputs, targets := batchRows(s, 0, rows)
		r, err := tr.Step(inputs, targets)
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, bits(r))
	}
	return losses
}

func TestPipelinedStepsMatchTheCAPIBitwise(t *testing.T) {
	sequential := runReference(t)
	for _, c := range []struct {
		schedule       string
		stages, chunks int
	}{{"1f1b", 2, 1}, {"zb-v", 2, 1}, {"interleaved-1f1b", 2, 2}} {
		t.Run(c.schedule, func(t *testing.T) {
			ref := runReference(t, c.schedule, fmt.Sprint(c.stages), fmt.Sprint(c.chunks))
			if want := fmt.Sprintf("ranks %d bubble_rate_ok 1", c.stages); ref.pipeline != want {
				t.Errorf("the C API's pipelined run says %q, want %q", ref.pipeline, want)
			}
			// The runtime keeps a pipelined run bitwise equal to the sequential one.
			if !reflect.DeepEqual(ref.losses, sequential.losses) || ref.checksum != sequential.checksum {
				t.Errorf("pipelined C API run %v %s differs from the sequential %v %s", ref.losses, ref.checksum,
					sequential.losses, sequential.checksum)
			}
			opts := referenceOptions()
			opts.Schedule, opts.Stages, opts.Chunks = c.schedule, c.stages, c.chunks
			tr := trainerWith(t, opts)
			defer tr.Close()
			if n, err := tr.NumRanks(); err != nil || n != c.stages {
				t.Errorf("NumRanks %d (%v), want %d", n, err, c.stages)
			}
			checkReference(t, ref, trainSteps(t, tr), tr)
		})
	}
}

func TestPipelinedMeasurements(t *testing.T) {
	opts := referenceOptions()
	opts.Schedule, opts.Stages, opts.RecvTimeout = "1f1b", 2, 30*time.Second
	tr := trainerWith(t, opts)
	defer tr.Close()
	if _, err := tr.RankStats(); !errors.Is(err, &pipeforge.Error{Code: pipeforge.FailedPrecondition}) ||
		!strings.Contains(err.Error(), "no step") {
		t.Errorf("RankStats before a step: %v", err)
	}
	inputs, targets := batchRows(0, 0, rows)
	if _, err := tr.Step(inputs, targets); err != nil {
		t.Fatal(err)
	}
	ranks, err := tr.RankStats()
	if err != nil || len(ranks) != 2 {
		t.Fatalf("RankStats %+v (%v), want 2 ranks", ranks, err)
	}
	for i, r := range ranks {
		if r.Busy <= 0 || r.Idle < 0 || r.Finish < r.FirstStart || r.PeakActivations < 1 || r.PeakActivationBytes <= 0 {
			t.Errorf("rank %d: %+v", i, r)
		}
	}
	if rate, err := tr.BubbleRate(); err != nil || rate < 0 || rate >= 1 {
		t.Errorf("BubbleRate %v (%v), want in [0, 1)", rate, err)
	}
	trace, err := tr.TimelineToChromeTrace()
	var parsed map[string]interface{}
	if err != nil || json.Unmarshal([]byte(trace), &parsed) != nil || parsed["traceEvents"] == nil {
		t.Errorf("TimelineToChromeTrace: %v\n%.200s", err, trace)
	}
	if svg, err := tr.TimelineToSVG(); err != nil || !strings.Contains(svg, "<svg") {
		t.Errorf("TimelineToSVG: %v\n%.200s", err, svg)
	}
}

func TestPipelinedScheduleTextAndPartition(t *testing.T) {
	ref := runReference(t)
	opts := referenceOptions()
	// The reference MLP's 5 top-level layers (fc0 act0 fc1 act1 head) split 2 + 3, GPipe by hand.
	opts.ScheduleText = "0F0 0F1 0BW0 0BW1\n1F0 1F1 1BW0 1BW1\n"
	opts.LayersPerStage = []int{2, 3}
	tr := trainerWith(t, opts)
	defer tr.Close()
	checkReference(t, ref, trainSteps(t, tr), tr)
	ranks, err := tr.RankStats()
	if err != nil || len(ranks) != 2 || ranks[0].PeakActivations != 2 || ranks[1].PeakActivations != 2 {
		t.Errorf("RankStats %+v (%v), want 2 ranks holding 2 micro-batches each (GPipe)", ranks, err)
	}
}

func TestPipelineErrors(t *testing.T) {
	invalid := &pipeforge.Error{Code: pipeforge.InvalidArgument}
	m := referenceModel(t)
	defer m.Close()
	opts := referenceOptions()
	opts.Schedule, opts.Stages = "2f2b", 2
	_, err := pipeforge.NewTrainer(m, opts)
	if !errors.Is(err, invalid) || !strings.Contains(err.Error(), "2f2b") {
		t.Errorf("unknown schedule: %v", err)
	}
	opts.Schedule, opts.LayersPerStage = "1f1b", []int{6, 6}
	if _, err := pipeforge.NewTrainer(m, opts); !errors.Is(err, invalid) || !strings.Contains(err.Error(), "layers") {
		t.Errorf("too many layers: %v", err)
	}
	opts.LayersPerStage = []int{2, 1 << 40}
	if _, err := pipeforge.NewTrainer(m, opts); !errors.Is(err, invalid) || !strings.Contains(err.Error(), "int32") {
		t.Errorf("LayersPerStage out of range: %v", err)
	}
	tr := referenceTrainer(t)
	defer tr.Close()
	if n, err := tr.NumRanks(); err != nil || n != 1 {
		t.Errorf("NumRanks of the sequential trainer %d (%v)", n, err)
	}
	inputs, targets := batchRows(0, 0, rows)
	if _, err := tr.Step(inputs, targets); err != nil {
		t.Fatal(err)
	}
	precondition := &pipeforge.Error{Code: pipeforge.FailedPrecondition}
	if _, err := tr.RankStats(); !errors.Is(err, precondition) || !strings.Contains(err.Error(), "not pipelined") {
		t.Errorf("RankStats of the sequential trainer: %v", err)
	}
	if _, err := tr.BubbleRate(); !errors.Is(err, precondition) {
		t.Errorf("BubbleRate of the sequential trainer: %v", err)
	}
	if _, err := tr.TimelineToSVG(); !errors.Is(err, precondition) {
		t.Errorf("TimelineToSVG of the sequential trainer: %v", err)
	}
	tr.Close()
	if _, err := tr.NumRanks(); !errors.Is(err, precondition) {
		t.Errorf("NumRanks of a closed trainer: %v", err)
	}
}

// ---- activation memory ----

func TestActivationPoliciesKeepResultsBitwiseAndReportWhatMoved(t *testing.T) {
	// 4 ranks x 4 micro-batches: 1F1B's rank 0 holds 4 micro-batches, rank 3 one, so that every policy
	// has something to move (balance pairs rank 0 with rank 3).
	seqOpts := referenceOptions()
	seqOpts.MicroBatches = 4
	seq := trainerWith(t, seqOpts)
	sequential := reference{losses: trainSteps(t, seq)}
	sequential.checksum, _ = seq.Checksum()
	seq.Close()
	offloadDir := filepath.Join(t.TempDir(), "offload") // created by the runtime
	for _, c := range []struct {
		policy string
		budget float64
		dir    string
	}{
		{"none", 0, ""}, {"recompute", 0, ""}, {"offload-host", 0, ""}, {"offload-file", 0, offloadDir},
		{"balance", 0, ""}, {"selective", 1e12, ""}, // a budget nothing needs to move for
	} {
		t.Run(c.policy, func(t *testing.T) {
			opts := seqOpts
			opts.Schedule, opts.Stages = "1f1b", 4
			opts.LayersPerStage = []int{2, 1, 1, 1} // the even split: rank 0 holds the heaviest contexts
			opts.ActivationPolicy, opts.ActivationBudgetBytes, opts.OffloadDir = c.policy, c.budget, c.dir
			tr := trainerWith(t, opts)
			defer tr.Close()
			checkReference(t, sequential, trainSteps(t, tr), tr)
			ranks, err := tr.RankStats()
			if err != nil {
				t.Fatal(err)
			}
			r := ranks[0]
			moves := c.policy == "offload-host" || c.policy == "offload-file" || c.policy == "balance"
			if moves != (r.OffloadedBytes > 0) || r.OffloadedBytes < 0 {
				t.Errorf("rank 0 offloaded %v bytes", r.OffloadedBytes)
			}
			if (c.policy == "recompute") != (r.Recomputes > 0) || r.Recomputes < 0 {
				t.Errorf("rank 0 recomputed %d times", r.Recomputes)
			}
		})
	}
	if info, err := os.Stat(offloadDir); err != nil || !info.IsDir() {
		t.Errorf("OffloadDir %s was not created (%v): it did not reach the runtime", offloadDir, err)
	}
}

func TestActivationPolicyErrors(t *testing.T) {
	invalid := &pipeforge.Error{Code: pipeforge.InvalidArgument}
	m := referenceModel(t)
	defer m.Close()
	opts := referenceOptions()
	opts.Schedule, opts.Stages, opts.ActivationPolicy = "1f1b", 2, "offload-gpu"
	if _, err := pipeforge.NewTrainer(m, opts); !errors.Is(err, invalid) || !strings.Contains(err.Error(), "offload-gpu") ||
		!strings.Contains(err.Error(), "offload-host") {
		t.Errorf("unknown activation policy: %v", err)
	}
	opts.ActivationPolicy = "selective" // without a budget
	if _, err := pipeforge.NewTrainer(m, opts); !errors.Is(err, invalid) ||
		!strings.Contains(err.Error(), "activation_budget_bytes") {
		t.Errorf("selective without a budget: %v", err)
	}
	opts.Schedule, opts.Stages, opts.ActivationPolicy = "", 0, "recompute"
	if _, err := pipeforge.NewTrainer(m, opts); !errors.Is(err, invalid) || !strings.Contains(err.Error(), "no schedule") {
		t.Errorf("a policy for the sequential trainer: %v", err)
	}
}

// ---- devices ----

func TestDevicesCPUMatchesTheDefault(t *testing.T) {
	ref := runReference(t)
	for _, c := range []struct {
		name, schedule string
		stages         int
		devices        string
	}{
		{"sequential", "", 0, "cpu"}, {"pipelined", "1f1b", 2, "cpu"}, {"pipelined-per-rank", "1f1b", 2, "cpu,cpu"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := referenceOptions()
			opts.Schedule, opts.Stages, opts.Devices = c.schedule, c.stages, c.devices
			tr := trainerWith(t, opts)
			defer tr.Close()
			checkReference(t, ref, trainSteps(t, tr), tr)
		})
	}
}

func TestDevicesCUDATrainsOrSaysItIsNotAvailable(t *testing.T) {
	ref := runReference(t)
	for _, c := range []struct {
		name, schedule string
		stages         int
	}{{"sequential", "", 0}, {"pipelined", "1f1b", 2}} {
		t.Run(c.name, func(t *testing.T) {
			m := referenceModel(t)
			defer m.Close()
			opts := referenceOptions()
			opts.Schedule, opts.Stages, opts.Devices = c.schedule, c.stages, "cuda:0"
			tr, err := pipeforge.NewTrainer(m, opts)
			if err != nil { // no GPU visible to this process
				if !errors.Is(err, &pipeforge.Error{Code: pipeforge.InvalidArgument}) ||
					!strings.Contains(err.Error(), "cuda:0 is not available") {
					t.Errorf("cuda:0 without a GPU: %v", err)
				}
				return
			}
			defer tr.Close() // a GPU: it trains, close to the CPU's losses
			for s := uint64(0); s < steps; s++ {
				inputs, targets := batchRows(s, 0, rows)
				r, err := tr.Step(inputs, targets)
				if err != nil {
					t.Fatal(err)
				}
				var lossBits uint64
				fmt.Sscanf(strings.Fields(ref.losses[s])[0], "%x", &lossBits)
				want := math.Float64frombits(lossBits)
				if math.Abs(r.Loss-want) > 1e-4*math.Abs(want)+1e-6 {
					t.Errorf("step %d on cuda:0: loss %v, want about %v (the CPU's)", s, r.Loss, want)
				}
			}
		})
	}
}

func TestDevicesErrors(t *testing.T) {
	invalid := &pipeforge.Error{Code: pipeforge.InvalidArgument}
	m := referenceModel(t)
	defer m.Close()
	opts := referenceOptions()
	opts.Devices = "gpu0"
	if _, err := pipeforge.NewTrainer(m, opts); !errors.Is(err, invalid) || !strings.Contains(err.Error(), "gpu0") {
		t.Errorf("device gpu0: %v", err)
	}
	opts.Schedule, opts.Stages, opts.Devices = "1f1b", 2, "cpu,gpu0"
	if _, err := pipeforge.NewTrainer(m, opts); !errors.Is(err, invalid) || !strings.Contains(err.Error(), "gpu0") {
		t.Errorf("devices cpu,gpu0: %v", err)
	}
	opts.Schedule, opts.Stages, opts.Devices = "", 0, "cpu,cpu"
	if _, err := pipeforge.NewTrainer(m, opts); !errors.Is(err, invalid) || !strings.Contains(err.Error(), "one device") {
		t.Errorf("two devices for the sequential trainer: %v", err)
	}
}

// ---- processes (C API 0.3): the options reach the runtime; threads report process 0 of 1 ----

func TestProcessOptionsRoundTrip(t *testing.T) {
	ref := runReference(t)
	opts := referenceOptions()
	opts.Schedule, opts.Ranks, opts.Processes = "1f1b", 2, "threads"
	tr := trainerWith(t, opts)
	defer tr.Close()
	if n, err := tr.NumRanks(); err != nil || n != 2 {
		t.Errorf("NumRanks with Ranks 2: %d, %v", n, err)
	}
	if rank, size, err := tr.Process(); err != nil || rank != 0 || size != 1 {
		t.Errorf("Process: %d, %d, %v; want 0, 1 (threads)", rank, size, err)
	}
	checkReference(t, ref, trainSteps(t, tr), tr)
	ranks, err := tr.RankStats()
	if err != nil || len(ranks) != 2 || !ranks[0].Local || !ranks[1].Local {
		t.Errorf("RankStats: %+v, %v; want every rank Local", ranks, err)
	}
	for _, r := range simulate(t, generate(t, "1f1b", pipeforge.ScheduleOptions{Stages: 2, MicroBatches: 2}),
		pipeforge.DefaultCostModel()).Ranks() {
		if r.Local {
			t.Errorf("a simulated rank is Local: %+v", r)
		}
	}
	var closed pipeforge.Trainer
	if _, _, err := closed.Process(); !errors.Is(err, &pipeforge.Error{Code: pipeforge.FailedPrecondition}) {
		t.Errorf("Process on a closed trainer: %v", err)
	}

	// DataParallel without a schedule: one trainer computes D replicas on D x MicroBatches micro-batches.
	opts = referenceOptions()
	opts.DataParallel, opts.GradientReduction = 2, "deterministic"
	dp := trainerWith(t, opts)
	defer dp.Close()
	inputs, targets := batchRows(0, 0, rows)
	if r, err := dp.Step(inputs, targets); err != nil || r.Samples != rows {
		t.Errorf("data-parallel step: %+v, %v", r, err)
	}
}

func TestProcessOptionErrors(t *testing.T) {
	m := referenceModel(t)
	defer m.Close()
	for _, c := range []struct {
		name string
		set  func(*pipeforge.TrainerOptions)
		code pipeforge.Code
		text string
	}{
		{"mpi without mpirun", func(o *pipeforge.TrainerOptions) { o.Processes = "mpi" }, pipeforge.FailedPrecondition,
			"not launched by mpirun"},
		{"unknown processes", func(o *pipeforge.TrainerOptions) { o.Processes = "mpich" }, pipeforge.InvalidArgument,
			"'mpich'"},
		{"data parallel on threads", func(o *pipeforge.TrainerOptions) { o.Processes, o.DataParallel = "threads", 2 },
			pipeforge.InvalidArgument, "mpirun -np 4"},
		{"ranks and stages differ", func(o *pipeforge.TrainerOptions) { o.Ranks = 3 }, pipeforge.InvalidArgument,
			"options->stages is 2"},
		{"unknown reduction", func(o *pipeforge.TrainerOptions) { o.GradientReduction = "mean" },
			pipeforge.InvalidArgument, "gradient_reduction is 'mean'"},
		{"ranks beyond int32", func(o *pipeforge.TrainerOptions) { o.Ranks = 1 << 40 }, pipeforge.InvalidArgument,
			"int32"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := referenceOptions()
			opts.Schedule, opts.Stages = "1f1b", 2
			c.set(&opts)
			_, err := pipeforge.NewTrainer(m, opts)
			if !errors.Is(err, &pipeforge.Error{Code: c.code}) || !strings.Contains(err.Error(), c.text) {
				t.Errorf("got %v; want code %v containing %q", err, c.code, c.text)
			}
		})
	}
}

// ---- asynchronous schedules (C API 0.4): the options, Drain ----

func asyncOptions(schedule string) pipeforge.TrainerOptions {
	return pipeforge.TrainerOptions{MicroBatches: microBatches, Seed: 42, Optimizer: "sgd", LR: 0.05, Momentum: 0.9,
		Schedule: schedule, Ranks: 2}
}

func TestPipeDreamTrainsTwoStepsAndDrains(t *testing.T) {
	tr := trainerWith(t, asyncOptions("pipedream"))
	defer tr.Close()
	for s := 0; s < 2; s++ {
		inputs, targets := batchRows(uint64(s), 0, rows)
		r, err := tr.Step(inputs, targets)
		if err != nil || math.IsNaN(r.Loss) || math.IsInf(r.Loss, 0) {
			t.Fatalf("step %d: %+v, %v", s, r, err)
		}
	}
	inFlight, _ := tr.Checksum()
	if err := tr.Drain(); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	drained, _ := tr.Checksum()
	if drained == inFlight {
		t.Errorf("Drain applied no update")
	}
	if err := tr.Drain(); err != nil { // nothing left: a no-op
		t.Errorf("second Drain: %v", err)
	}
	if again, _ := tr.Checksum(); again != drained {
		t.Errorf("a second Drain changed the parameters")
	}
	seq := referenceTrainer(t)
	defer seq.Close()
	if err := seq.Drain(); err != nil {
		t.Errorf("Drain of the sequential trainer: %v", err)
	}
	var closed pipeforge.Trainer
	if err := closed.Drain(); !errors.Is(err, &pipeforge.Error{Code: pipeforge.FailedPrecondition}) {
		t.Errorf("Drain on a closed trainer: %v", err)
	}
	// Every method with its options set (zero = the default, -1 = none for PipeMare's two).
	for _, opts := range []pipeforge.TrainerOptions{asyncOptions("pipedream-2bw"), asyncOptions("spectrain"),
		asyncOptions("pipemare")} {
		switch opts.Schedule {
		case "spectrain":
			opts.SpectrainVersion = 2
		case "pipemare":
			opts.PipemareAnnealUpdates, opts.PipemareDecay = -1, -1
		}
		tr := trainerWith(t, opts)
		inputs, targets := batchRows(0, 0, rows)
		if _, err := tr.Step(inputs, targets); err != nil {
			t.Errorf("%s: %v", opts.Schedule, err)
		}
		if err := tr.Drain(); err != nil {
			t.Errorf("%s: Drain: %v", opts.Schedule, err)
		}
		tr.Close()
	}
}

func TestAsyncOptionErrors(t *testing.T) {
	m := referenceModel(t)
	defer m.Close()
	for _, c := range []struct {
		name string
		opts pipeforge.TrainerOptions
		text string
	}{
		{"vertical sync with spectrain", pipeforge.TrainerOptions{Schedule: "spectrain", VerticalSync: true},
			"vertical_sync applies to schedule pipedream only, not to 'spectrain'"},
		{"decay with pipedream", pipeforge.TrainerOptions{Schedule: "pipedream", PipemareDecay: 0.5}, "pipemare_decay"},
		{"decay out of range", pipeforge.TrainerOptions{Schedule: "pipemare", PipemareDecay: 1.5}, "pipemare_decay"},
		{"anneal below -1", pipeforge.TrainerOptions{Schedule: "pipemare", PipemareAnnealUpdates: -2},
			"PipemareAnnealUpdates is -2"},
		{"spectrain version 3", pipeforge.TrainerOptions{Schedule: "spectrain", SpectrainVersion: 3}, "spectrain_version"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := asyncOptions(c.opts.Schedule)
			opts.VerticalSync, opts.SpectrainVersion = c.opts.VerticalSync, c.opts.SpectrainVersion
			opts.PipemareAnnealUpdates, opts.PipemareDecay = c.opts.PipemareAnnealUpdates, c.opts.PipemareDecay
			_, err := pipeforge.NewTrainer(m, opts)
			if !errors.Is(err, &pipeforge.Error{Code: pipeforge.InvalidArgument}) || !strings.Contains(err.Error(), c.text) {
				t.Errorf("got %v; want InvalidArgument containing %q", err, c.text)
			}
		})
	}
}

// ---- local learning (C API 0.4): LocalHead, Drain ----

func TestPpllTrainsTwoStepsAndDrains(t *testing.T) {
	train := func(schedule, head string) string {
		tr := trainerWith(t, pipeforge.TrainerOptions{MicroBatches: microBatches, Seed: 42, Optimizer: "adamw",
			LR: 0.01, Schedule: schedule, Ranks: 2, LocalHead: head})
		defer tr.Close()
		for s := 0; s < 2; s++ {
			inputs, targets := batchRows(uint64(s), 0, rows)
			r, err := tr.Step(inputs, targets)
			if err != nil || math.IsNaN(r.Loss) || math.IsInf(r.Loss, 0) {
				t.Fatalf("%s %q step %d: %+v, %v", schedule, head, s, r, err)
			}
		}
		inFlight, _ := tr.Checksum()
		if err := tr.Drain(); err != nil {
			t.Fatalf("%s %q: Drain: %v", schedule, head, err)
		}
		drained, _ := tr.Checksum()
		if drained == inFlight {
			t.Errorf("%s %q: Drain applied no update", schedule, head)
		}
		return drained
	}
	automatic := train("ppll", "")
	if train("ppll", "auto") != automatic {
		t.Errorf(`LocalHead "auto" differs from ""`)
	}
	if train("ppll", "mlp") == automatic {
		t.Errorf(`LocalHead "mlp" changed nothing`)
	}
	if train("local-updates", "") == automatic {
		t.Errorf("local-updates trained like ppll")
	}
}

func TestLocalHeadErrors(t *testing.T) {
	m := referenceModel(t)
	defer m.Close()
	for _, c := range []struct {
		schedule, head, text string
	}{
		{"1f1b", "mlp", "local_head 'mlp' applies to the local-learning schedules (ppll, local-updates) only, not to '1f1b'"},
		{"ppll", "conv", "unknown head 'conv'"},
		{"", "linear", "no schedule"},
	} {
		t.Run(c.schedule+" "+c.head, func(t *testing.T) {
			_, err := pipeforge.NewTrainer(m, pipeforge.TrainerOptions{MicroBatches: microBatches, Schedule: c.schedule,
				Ranks: 2, LocalHead: c.head})
			if !errors.Is(err, &pipeforge.Error{Code: pipeforge.InvalidArgument}) || !strings.Contains(err.Error(), c.text) {
				t.Errorf("got %v; want InvalidArgument containing %q", err, c.text)
			}
		})
	}
}

func TestScheduleSelectiveAtTheMinimumBudgetLowersThePeak(t *testing.T) {
	s := generate(t, "1f1b", pipeforge.ScheduleOptions{Stages: 4, MicroBatches: 8})
	costs := pipeforge.DefaultCostModel()
	costs.MB, costs.MIn, costs.TransferBandwidth = 100, 10, 200
	if peak := simulate(t, s, costs).Ranks()[0].PeakActivationBytes; peak != 400 {
		t.Fatalf("rank 0's peak without a policy is %v, want 400", peak)
	}
	budget, err := s.MinActivationBudget(costs)
	if err != nil || budget <= 0 || budget >= 400 {
		t.Fatalf("MinActivationBudget %v (%v), want in (0, 400)", budget, err)
	}
	applied, err := s.ApplyActivationPolicy("selective", costs, budget)
	if err != nil {
		t.Fatal(err)
	}
	defer applied.Close()
	if err := applied.Validate(); err != nil {
		t.Error(err)
	}
	if text, _ := s.Text(); strings.Contains(text, "OFFLOAD") {
		t.Error("ApplyActivationPolicy changed the original schedule")
	}
	r := simulate(t, applied, costs).Ranks()[0]
	if r.PeakActivationBytes >= 400 || r.PeakActivationBytes > budget || r.OffloadedBytes <= 0 || r.Recomputes != 0 {
		t.Errorf("rank 0 under selective at budget %v: %+v", budget, r)
	}
	invalid := &pipeforge.Error{Code: pipeforge.InvalidArgument}
	if _, err := s.ApplyActivationPolicy("selective", costs, budget/2); !errors.Is(err, invalid) ||
		!strings.Contains(err.Error(), "smallest budget that works") {
		t.Errorf("a budget below the minimum: %v", err)
	}
	if _, err := s.ApplyActivationPolicy("swap", costs, 0); !errors.Is(err, invalid) ||
		!strings.Contains(err.Error(), "unknown activation policy 'swap'") {
		t.Errorf("an unknown policy: %v", err)
	}
	recomputed, err := s.ApplyActivationPolicy("recompute", costs, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer recomputed.Close()
	if r := simulate(t, recomputed, costs).Ranks()[0]; r.Recomputes != 8 || r.OffloadedBytes != 0 || r.PeakActivationBytes >= 400 {
		t.Errorf("rank 0 under recompute: %+v", r)
	}
	// MIn per stage (the sixth per-stage slice): equal to the scalar when equal, higher when larger.
	scalar := simulate(t, recomputed, costs).Ranks()[0].PeakActivationBytes
	perStage := costs
	perStage.MIn, perStage.StageMIn = 0, []float64{10, 10, 10, 10}
	if p := simulate(t, recomputed, perStage).Ranks()[0].PeakActivationBytes; p != scalar {
		t.Errorf("StageMIn like MIn: peak %v, want %v", p, scalar)
	}
	perStage.StageMIn = []float64{50, 10, 10, 10}
	if p := simulate(t, recomputed, perStage).Ranks()[0].PeakActivationBytes; p <= scalar {
		t.Errorf("a larger StageMIn: peak %v, want above %v", p, scalar)
	}
	perStage.StageMIn = []float64{1, 2, 3}
	if _, err := s.MinActivationBudget(perStage); !errors.Is(err, invalid) || !strings.Contains(err.Error(), "4 stages") {
		t.Errorf("StageMIn of the wrong length: %v", err)
	}
	s.Close()
	closed := &pipeforge.Error{Code: pipeforge.FailedPrecondition}
	if _, err := s.ApplyActivationPolicy("none", costs, 0); !errors.Is(err, closed) {
		t.Errorf("closed schedule: %v", err)
	}
	if _, err := s.MinActivationBudget(costs); !errors.Is(err, closed) {
		t.Errorf("closed schedule: %v", err)
	}
}

// ---- the training loop (C API 0.5) ----

func textData(heldOut bool) pipeforge.DataOptions {
	return pipeforge.DataOptions{Kind: "char_text", Rows: 2, SeqLen: 16, Seed: 3, HeldOutFraction: 0.1, HeldOut: heldOut}
}

// textTrainer is a tiny GPT on the licence texts, 1F1B over 2 ranks, cosine rate, both built-in loaders.
func textTrainer(t *testing.T) *pipeforge.Trainer {
	t.Helper()
	info, err := pipeforge.BuiltinDataInfo(textData(false))
	if err != nil {
		t.Fatal(err)
	}
	if info.VocabSize <= 40 || info.SeqLen != 16 {
		t.Fatalf("data info %+v", info)
	}
	m, err := pipeforge.NewGPT(pipeforge.GPTConfig{Vocab: info.VocabSize, SeqLen: info.SeqLen, DModel: 16, Heads: 2,
		Layers: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	tr, err := pipeforge.NewTrainer(m, pipeforge.TrainerOptions{MicroBatches: 2, Seed: 7, LR: 0.01, Schedule: "1f1b",
		Ranks: 2, LRSchedule: "cosine", WarmupSteps: 2, DecaySteps: 6, MinLR: 1e-4})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.SetBuiltinData(textData(false)); err != nil {
		t.Fatal(err)
	}
	if err := tr.SetBuiltinEvalData(textData(true)); err != nil {
		t.Fatal(err)
	}
	return tr
}

// ---- sequence-sliced 1F1B (C API 0.7) ----

// seqSlicedRun trains a tiny GPT on the licence texts for three steps over 2 ranks with schedule
// and SeqSlices slices: the losses and rank 0's peak activations (units held at once), or the
// error of NewTrainer or a step.
func seqSlicedRun(t *testing.T, schedule string, slices int) ([]float64, int64, error) {
	t.Helper()
	m := textGPT(t, 16, 2)
	defer m.Close()
	tr, err := pipeforge.NewTrainer(m, pipeforge.TrainerOptions{MicroBatches: 2, Seed: 7, LR: 0.01, Schedule: schedule,
		Ranks: 2, SeqSlices: slices})
	if err != nil {
		return nil, 0, err
	}
	defer tr.Close()
	if err := tr.SetBuiltinData(textData(false)); err != nil {
		t.Fatal(err)
	}
	var losses []float64
	for i := 0; i < 3; i++ {
		r, err := tr.StepFromLoader()
		if err != nil {
			return nil, 0, err
		}
		losses = append(losses, r.Loss)
	}
	stats, err := tr.RankStats()
	if err != nil {
		t.Fatal(err)
	}
	return losses, stats[0].PeakActivations, nil
}

func TestSeqSlicesTrainWithinToleranceOf1f1b(t *testing.T) {
	whole, wholePeak, err := seqSlicedRun(t, "1f1b", 0)
	if err != nil {
		t.Fatal(err)
	}
	sliced, slicedPeak, err := seqSlicedRun(t, "seq1f1b", 2)
	if err != nil {
		t.Fatal(err)
	}
	for i := range whole {
		if rel := math.Abs(sliced[i]-whole[i]) / math.Abs(whole[i]); !(rel < 1e-5) {
			t.Errorf("step %d: seq1f1b loss %v, 1f1b %v (relative difference %v)", i, sliced[i], whole[i], rel)
		}
	}
	// Rank 0 holds p + S - 1 = 3 half micro-batches instead of p = 2 micro-batches.
	if wholePeak != 2 || slicedPeak != 3 {
		t.Errorf("rank 0 peak activations: 1f1b %d, seq1f1b S = 2 %d (want 2, 3)", wholePeak, slicedPeak)
	}
	// One slice (SeqSlices 1, or 0 = 1) is 1f1b, bitwise.
	for _, slices := range []int{1, 0} {
		one, _, err := seqSlicedRun(t, "seq1f1b", slices)
		if err != nil || !reflect.DeepEqual(one, whole) {
			t.Errorf("seq1f1b, SeqSlices %d: %v, %v; 1f1b: %v", slices, one, err, whole)
		}
	}
	for _, c := range []struct {
		schedule string
		slices   int
		want     string
	}{
		{"seq1f1b", 3, "seq_slices 3 must divide the model's seq_len 16"},
		{"1f1b", 2, "1f1b does not slice sequences: seq_slices must be 1"},
		{"seq1f1b", -1, "seq_slices is -1"},
		{"seq1f1b", 1 << 40, "SeqSlices is 1099511627776, outside the int32 range"},
	} {
		_, _, err := seqSlicedRun(t, c.schedule, c.slices)
		var pfErr *pipeforge.Error
		if !errors.As(err, &pfErr) || pfErr.Code != pipeforge.InvalidArgument || !strings.Contains(pfErr.Message, c.want) {
			t.Errorf("%s, SeqSlices %d: got %v, want InvalidArgument containing %q", c.schedule, c.slices, err, c.want)
		}
	}
}

// A GPT of 2 heads for the licence texts' vocabulary and rows (the caller closes it).
func textGPT(t *testing.T, dModel, layers int64) *pipeforge.Model {
	t.Helper()
	info, err := pipeforge.BuiltinDataInfo(textData(false))
	if err != nil {
		t.Fatal(err)
	}
	m, err := pipeforge.NewGPT(pipeforge.GPTConfig{Vocab: info.VocabSize, SeqLen: info.SeqLen, DModel: dModel,
		Heads: 2, Layers: layers})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// gptTrainer is a GPT of 7 top-level layers on the licence texts with opts (micro-batches, seed and
// learning rate set here), closed when the test ends.
func gptTrainer(t *testing.T, opts pipeforge.TrainerOptions) *pipeforge.Trainer {
	t.Helper()
	m := textGPT(t, 32, 4)
	t.Cleanup(func() { m.Close() })
	opts.MicroBatches, opts.Seed, opts.LR = 4, 7, 0.01
	tr, err := pipeforge.NewTrainer(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	if err := tr.SetBuiltinData(textData(false)); err != nil {
		t.Fatal(err)
	}
	return tr
}

// The losses of n steps of tr from its loader.
func loaderLosses(t *testing.T, tr *pipeforge.Trainer, n int) []float64 {
	t.Helper()
	var losses []float64
	for i := 0; i < n; i++ {
		r, err := tr.StepFromLoader()
		if err != nil {
			t.Fatal(err)
		}
		losses = append(losses, r.Loss)
	}
	return losses
}

// Six steps of gptTrainer(opts); the losses and AdaptationsJSON.
func adaptRun(t *testing.T, opts pipeforge.TrainerOptions) ([]float64, string) {
	t.Helper()
	tr := gptTrainer(t, opts)
	losses := loaderLosses(t, tr, 6)
	moves, err := tr.AdaptationsJSON()
	if err != nil {
		t.Fatal(err)
	}
	return losses, moves
}

// Fail-slow adaptation (C API 0.9): 1f1b on 2 ranks with rank 1 at 4x moves layers off rank 1 and
// trains bitwise like the sequential trainer.
func TestAdaptMovesLayersOffASlowRankBitwise(t *testing.T) {
	sequential, none := adaptRun(t, pipeforge.TrainerOptions{})
	if none != "[]" {
		t.Errorf("sequential AdaptationsJSON = %s, want []", none)
	}
	adapted, text := adaptRun(t, pipeforge.TrainerOptions{Schedule: "1f1b", Ranks: 2, Adapt: true, SlowRank: 1,
		SlowFactor: 4})
	if !reflect.DeepEqual(adapted, sequential) {
		t.Errorf("adaptive losses %v, sequential %v", adapted, sequential)
	}
	var moves []struct {
		Step     int
		Slowdown []float64
		From, To []int
	}
	if err := json.Unmarshal([]byte(text), &moves); err != nil || len(moves) == 0 {
		t.Fatalf("AdaptationsJSON %q: %v (want a move)", text, err)
	}
	// Patience is 3 steps: never before step 3; a noisy early step may delay it.
	if moves[0].Step < 3 || !(moves[0].To[1] < moves[0].From[1]) {
		t.Errorf("first move %+v: want step >= 3 and fewer layers on rank 1", moves[0])
	}
}

// A packed MLP sweep in the bubbles (C API 0.14): Config["fill"], the losses unchanged,
// FillReportJSON ranking the sweep's models.
func TestASweepFillsTheBubblesWithoutChangingTheRun(t *testing.T) {
	spec := filepath.Join(t.TempDir(), "grid.json")
	if err := os.WriteFile(spec, []byte(`{"hidden": [4, 8], "samples": 200, "features": 6, "classes": 3}`), 0o644); err != nil {
		t.Fatal(err)
	}
	plain := loaderLosses(t, gptTrainer(t, pipeforge.TrainerOptions{Schedule: "1f1b", Ranks: 2}), 6)
	tr := gptTrainer(t, pipeforge.TrainerOptions{Schedule: "1f1b", Ranks: 2,
		Config: map[string]string{"fill": "sweep:" + spec}})
	if filled := loaderLosses(t, tr, 6); !reflect.DeepEqual(filled, plain) {
		t.Errorf("losses with the fill job %v, without %v", filled, plain)
	}
	text, err := tr.FillReportJSON()
	if err != nil {
		t.Fatal(err)
	}
	var report struct {
		Kind       string           `json:"kind"`
		ModelCount int              `json:"model_count"`
		StepsTaken int              `json:"steps_taken"`
		Models     []map[string]any `json:"models"`
	}
	if err := json.Unmarshal([]byte(text), &report); err != nil {
		t.Fatalf("FillReportJSON %q: %v", text, err)
	}
	if report.Kind != "sweep" || report.ModelCount != 2 || len(report.Models) != 2 || report.StepsTaken == 0 {
		t.Errorf("fill report %s: want a sweep of 2 models with steps taken", text)
	}
}

// Issue 43 item 3: Run can be watched and stopped. OnStep returning true ends the run after that
// step with its checkpoint; an interrupt (here a real SIGINT to this process) does the same and
// Run returns ErrInterrupted instead of the program ending; a panic in OnStep is returned.
func TestRunCanBeWatchedStoppedAndInterrupted(t *testing.T) {
	dir := t.TempDir()
	var seen []pipeforge.StepInfo
	stopped := textTrainer(t)
	defer stopped.Close()
	r, err := stopped.Run(pipeforge.RunOptions{Steps: 7, CheckpointEvery: 100, CheckpointDir: dir,
		OnStep: func(info pipeforge.StepInfo) bool { seen = append(seen, info); return info.Step == 3 }})
	if err != nil || !r.Stopped || r.Step != 3 || len(seen) != 3 || seen[2].StepsRun != 3 || !(seen[0].LR > 0) ||
		r.LastCheckpoint != filepath.Join(dir, "step-00000003.pfckpt") {
		t.Fatalf("stopped run: %+v, %v, seen %+v", r, err, seen)
	}
	interrupted := textTrainer(t)
	defer interrupted.Close()
	r, err = interrupted.Run(pipeforge.RunOptions{Steps: 7, OnStep: func(info pipeforge.StepInfo) bool {
		if info.Step == 2 {
			if err := syscall.Kill(syscall.Getpid(), syscall.SIGINT); err != nil {
				t.Error(err)
			}
			time.Sleep(50 * time.Millisecond) // delivered to Run's channel before the next step ends
		}
		return false
	}})
	if !errors.Is(err, pipeforge.ErrInterrupted) || r.Step > 3 || !r.Stopped {
		t.Fatalf("interrupted run: %+v, %v", r, err)
	}
	panicking := textTrainer(t)
	defer panicking.Close()
	r, err = panicking.Run(pipeforge.RunOptions{Steps: 5, OnStep: func(pipeforge.StepInfo) bool { panic("watcher broke") }})
	var p *pipeforge.StepPanic
	if !errors.As(err, &p) || r.Step != 1 {
		t.Fatalf("panicking OnStep: %+v, %v", r, err)
	}
}

func TestRunResumedFromItsCheckpointFolderEqualsOneRun(t *testing.T) {
	loop := func(steps int64, dir string) pipeforge.RunOptions {
		return pipeforge.RunOptions{Steps: steps, EvalEvery: 3, CheckpointEvery: 3, KeepCheckpoints: 2,
			CheckpointDir: filepath.Join(dir, "ck")}
	}
	whole, parts := t.TempDir(), t.TempDir()
	one := textTrainer(t)
	defer one.Close()
	r, err := one.Run(loop(7, whole))
	if err != nil {
		t.Fatal(err)
	}
	if r.Step != 7 || r.Evaluations != 3 || r.Checkpoints != 3 || r.Diverged ||
		r.LastCheckpoint != filepath.Join(whole, "ck", "step-00000007.pfckpt") || !(r.EvalAccuracy > 0) {
		t.Fatalf("run result %+v", r)
	}
	want, _ := one.Checksum()
	e, err := one.Evaluate(2)
	if err != nil || e.Loss != r.EvalLoss || e.Samples != 4 {
		t.Fatalf("evaluate: %+v, %v (last run evaluation %v)", e, err, r.EvalLoss)
	}
	if got, _ := one.Checksum(); got != want {
		t.Fatal("evaluation changed the parameters")
	}
	if p, err := one.Partition(); err != nil || !reflect.DeepEqual(p, []int{2, 3}) {
		t.Fatalf("partition %v, %v", p, err)
	}
	half := textTrainer(t)
	if _, err := half.Run(loop(3, parts)); err != nil {
		t.Fatal(err)
	}
	half.Close()
	rest := textTrainer(t)
	defer rest.Close()
	if err := rest.LoadCheckpoint(filepath.Join(parts, "ck")); err != nil {
		t.Fatal(err)
	}
	if _, err := rest.Run(loop(4, parts)); err != nil {
		t.Fatal(err)
	}
	if got, _ := rest.Checksum(); got != want {
		t.Fatalf("resumed checksum %s, one run %s", got, want)
	}
}

func TestEvaluationThroughThePipelineAndTheScheduledRate(t *testing.T) {
	var losses [2]float64
	for i, opts := range []pipeforge.TrainerOptions{
		{MicroBatches: microBatches, Seed: 42, LR: 0.01, WarmupSteps: 4},
		{MicroBatches: microBatches, Seed: 42, LR: 0.01, WarmupSteps: 4, Schedule: "zb-v", Ranks: 2},
	} {
		tr := trainerWith(t, opts)
		if err := tr.SetDataLoader(pipeforge.DataLoaderFunc(microBatch)); err != nil {
			t.Fatal(err)
		}
		first, err := tr.StepFromLoader()
		if err != nil || math.Abs(first.LR-0.0025) > 1e-9 {
			t.Fatalf("first step %+v, %v (want lr 0.01 / 4)", first, err)
		}
		if err := tr.SetEvalLoader(pipeforge.DataLoaderFunc(func(p int64) (pipeforge.Tensor, pipeforge.Tensor, error) {
			return microBatch(4 + p)
		})); err != nil {
			t.Fatal(err)
		}
		e, err := tr.Evaluate(2)
		if err != nil {
			t.Fatal(err)
		}
		losses[i] = e.Loss
		tr.Close()
	}
	if losses[0] != losses[1] {
		t.Fatalf("pipeline evaluation %v, sequential %v", losses[1], losses[0])
	}
	tr := referenceTrainer(t)
	defer tr.Close()
	missing := errors.New("held-out shard missing")
	tr.SetEvalLoader(pipeforge.DataLoaderFunc(func(int64) (pipeforge.Tensor, pipeforge.Tensor, error) {
		return pipeforge.Tensor{}, pipeforge.Tensor{}, missing
	}))
	_, err := tr.Evaluate(1)
	var pe *pipeforge.Error
	if !errors.As(err, &pe) || pe.Code != pipeforge.CallbackError || !errors.Is(err, missing) {
		t.Fatalf("evaluate with a failing loader: %v", err)
	}
	m := referenceModel(t)
	defer m.Close()
	x, y, _ := microBatch(0)
	counts, err := m.PartitionBalanced(x, y, 2)
	if err != nil || len(counts) != 2 || counts[0]+counts[1] != 5 {
		t.Fatalf("balanced partition %v, %v", counts, err)
	}
	// Linear 8->64 (576 values), relu, Linear 64->8 (520), relu, Linear 8->8 (72), relu, Linear
	// 8->4 (36): two stages of at most 628 values put the first Linear alone (even: 4 + 3).
	uneven, err := pipeforge.NewMLP(pipeforge.MLPConfig{InputDim: features, Hidden: []int64{64, 8, 8},
		Classes: classes, Activation: "relu"})
	if err != nil {
		t.Fatal(err)
	}
	defer uneven.Close()
	if byParams, err := uneven.PartitionByParameters(2); err != nil || len(byParams) != 2 || byParams[0] != 1 ||
		byParams[1] != 6 {
		t.Fatalf("partition by parameters %v, %v", byParams, err)
	}
	var bad *pipeforge.Error
	if _, err := uneven.PartitionByParameters(8); !errors.As(err, &bad) || bad.Code != pipeforge.InvalidArgument ||
		!strings.Contains(err.Error(), "num_stages is 8") {
		t.Fatalf("8 stages of 7 layers: %v", err)
	}
	if _, err := pipeforge.BuiltinDataInfo(pipeforge.DataOptions{Kind: "images"}); err == nil {
		t.Fatal("an unknown data kind was accepted")
	}
}

// ---- planning (C API 0.8) ----

const planCluster = `{"devices_per_node": 2, "device": {"kind": "cpu", "memory_gib": 1},
  "intra_node": {"bandwidth_gb_per_s": 10, "latency_us": 5}}`

func trainThreeSteps(t *testing.T, opts pipeforge.TrainerOptions) string {
	t.Helper()
	tr := trainerWith(t, opts)
	defer tr.Close()
	for s := uint64(0); s < steps; s++ {
		inputs, targets := batchRows(s, 0, rows)
		if _, err := tr.Step(inputs, targets); err != nil {
			t.Fatal(err)
		}
	}
	sum, err := tr.Checksum()
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

func TestPlanRanksCandidatesAndItsChoiceTrainsBitwise(t *testing.T) {
	m := referenceModel(t)
	defer m.Close()
	inputs, targets := batchRows(0, 0, rows)
	plan, err := pipeforge.NewPlan(m, inputs, targets, referenceOptions(), pipeforge.PlanOptions{
		ClusterJSON: planCluster, Schedules: []string{"1f1b", "zb-h1", "gpipe"}, Repeats: 1, CalibrationSteps: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer plan.Close()
	n, err := plan.NumCandidates()
	if err != nil || n <= 3 {
		t.Fatalf("%d candidates (%v), want more than 3", n, err)
	}
	if j, err := plan.CandidateJSON(0); err != nil || !strings.Contains(j, `"step_seconds"`) {
		t.Errorf("candidate 0: %q (%v)", j, err)
	}
	if svg, err := plan.SVG(); err != nil || !strings.Contains(svg, "Pareto front") {
		t.Errorf("the chart has no Pareto front (%v)", err)
	}
	compared := false
	for i := 0; i < n && !compared; i++ {
		opts := referenceOptions()
		if err := plan.Apply(i, &opts); err != nil {
			t.Fatal(err)
		}
		if opts.Schedule == "" || opts.DataParallel != 1 {
			continue
		}
		sequential := referenceOptions()
		sequential.MicroBatches = opts.MicroBatches
		if a, b := trainThreeSteps(t, opts), trainThreeSteps(t, sequential); a != b {
			t.Errorf("%s: checksum %s, sequential %s", opts.Schedule, a, b)
		}
		compared = true
	}
	if !compared {
		t.Error("no pipelined candidate on one replica")
	}
}

func TestPlanNamesABadClusterField(t *testing.T) {
	m := referenceModel(t)
	defer m.Close()
	inputs, targets := batchRows(0, 0, rows)
	_, err := pipeforge.NewPlan(m, inputs, targets, referenceOptions(), pipeforge.PlanOptions{
		ClusterJSON: strings.Replace(planCluster, `"cpu"`, `"tpu"`, 1), Repeats: 1, CalibrationSteps: -1})
	var e *pipeforge.Error
	if !errors.As(err, &e) || e.Code != pipeforge.InvalidArgument ||
		!strings.Contains(e.Message, "device.kind: unknown device kind 'tpu'") {
		t.Errorf("error %v, want InvalidArgument naming device.kind", err)
	}
}

// Options as key/value entries (C API 0.11): Config reaches the runtime, wins over the fields, and
// a bad key is an InvalidArgument naming it.
func TestConfigEntriesReachTheRuntime(t *testing.T) {
	opts := referenceOptions()
	opts.Schedule, opts.Stages = "1f1b", 2
	opts.Config = map[string]string{"layers_per_stage": "1,4"}
	tr := trainerWith(t, opts)
	if p, err := tr.Partition(); err != nil || !reflect.DeepEqual(p, []int{1, 4}) {
		t.Errorf("partition %v, %v", p, err)
	}
	tr.Close()
	opts.Config = map[string]string{"partiton": "even"}
	m := referenceModel(t)
	defer m.Close()
	if _, err := pipeforge.NewTrainer(m, opts); !errors.Is(err, &pipeforge.Error{Code: pipeforge.InvalidArgument}) ||
		!strings.Contains(err.Error(), "did you mean 'partition'") {
		t.Errorf("a misspelt key: %v", err)
	}
}

// Ridge regression by coordinate descent reaches the normal equations' solution, solved here.
func TestLinearModelReachesTheNormalEquations(t *testing.T) {
	x := []float32{1, 0, 0, 2, 1, 1, -1, 0.5, 2, 0, 0, -1}
	y := []float64{1.0, 2.0, 1.5, -0.5, 2.5, -1.0}
	const lambda = 0.1
	var a [2][2]float64
	var b [2]float64
	for i := 0; i < 6; i++ {
		for j := 0; j < 2; j++ {
			b[j] += float64(x[i*2+j]) * y[i] / 6
			for k := 0; k < 2; k++ {
				a[j][k] += float64(x[i*2+j]) * float64(x[i*2+k]) / 6
			}
		}
	}
	a[0][0] += lambda
	a[1][1] += lambda
	det := a[0][0]*a[1][1] - a[0][1]*a[1][0]
	want := []float64{(b[0]*a[1][1] - a[0][1]*b[1]) / det, (a[0][0]*b[1] - a[1][0]*b[0]) / det}
	model, err := pipeforge.TrainLinear(pipeforge.Float32(x, 6, 2), y,
		pipeforge.LinearOptions{Loss: "squared", Lambda: lambda, Tol: 1e-12, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	if !model.Converged || len(model.Weights) != 2 {
		t.Fatalf("model %+v", model)
	}
	for j := range want {
		if math.Abs(model.Weights[j]-want[j]) > 1e-6 {
			t.Errorf("w[%d] = %v, the normal equations give %v", j, model.Weights[j], want[j])
		}
	}
	path := filepath.Join(t.TempDir(), "classes.svm")
	if err := os.WriteFile(path, []byte("0 1:1\n1 1:-1 2:1\n0 2:-1\n1 1:-2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	svm, err := pipeforge.TrainLinearFile(path, pipeforge.LinearOptions{Loss: "hinge", Solver: "sequential"})
	if err != nil {
		t.Fatal(err)
	}
	if svm.NegativeLabel != 0 || svm.PositiveLabel != 1 || svm.Accuracy != 1 {
		t.Errorf("svm %+v", svm)
	}
	// An L1 weight above every |gradient| at w = 0 zeroes every weight: P = mean(y²)/2.
	sparse, err := pipeforge.TrainLinear(pipeforge.Float32(x, 6, 2), y,
		pipeforge.LinearOptions{Loss: "squared", Lambda: lambda, L1: 100, Tol: 1e-12})
	if err != nil {
		t.Fatal(err)
	}
	meanSquare := 0.0
	for _, v := range y {
		meanSquare += v * v / 12
	}
	if sparse.Weights[0] != 0 || sparse.Weights[1] != 0 || math.Abs(sparse.Objective-meanSquare) > 1e-12 {
		t.Errorf("L1 100: weights %v, objective %v (want 0, 0 and %v)", sparse.Weights, sparse.Objective, meanSquare)
	}
	_, err = pipeforge.TrainLinear(pipeforge.Float32(x, 6, 2), y, pipeforge.LinearOptions{Loss: "squared", Lambda: -1})
	var perr *pipeforge.Error
	if !errors.As(err, &perr) || perr.Code != pipeforge.InvalidArgument || !strings.Contains(perr.Message, "lambda must be > 0") {
		t.Errorf("a negative lambda: %v", err)
	}
}
