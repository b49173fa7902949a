// Command train_char_gpt trains a small GPT as a character-level language model on the licence
// texts every Debian machine has (/usr/share/common-licenses), through the Go binding. The same
// model, data and settings as the C sample (samples/train_char_gpt.c), so it prints the same losses
// and parameter checksum.
//
//	bazel run //samples/go:train_char_gpt -- [--steps N] [--text-dir DIR] [--checkpoint FILE]
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/pipeforge/pipeforge-go"
)

const (
	rows, seqLen, microBatches = 8, 64, 4
)

// mix is SplitMix64: the window of (position, row) is a pure function of both.
func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// textLoader serves micro-batch position: rows windows of seqLen+1 characters at pseudo-random
// offsets.
type textLoader struct {
	tokens []int32
}

func (l textLoader) Next(position int64) (pipeforge.Tensor, pipeforge.Tensor, error) {
	inputs := make([]int32, rows*seqLen)
	targets := make([]int32, rows*seqLen)
	for r := 0; r < rows; r++ {
		start := mix(uint64(position)*1000003+uint64(r)) % uint64(len(l.tokens)-seqLen-1)
		copy(inputs[r*seqLen:], l.tokens[start:start+seqLen])
		copy(targets[r*seqLen:], l.tokens[start+1:start+1+seqLen])
	}
	return pipeforge.Int32(inputs, rows, seqLen), pipeforge.Int32(targets, rows, seqLen), nil
}

// readTexts returns every regular file in dir (sorted by name, links skipped), concatenated.
func readTexts(dir string) ([]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.Type().IsRegular() && e.Name()[0] != '.' {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	var text []byte
	for _, name := range names {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			continue
		}
		text = append(text, data...)
	}
	return text, nil
}

func run() error {
	steps := flag.Int("steps", 300, "training steps")
	textDir := flag.String("text-dir", "/usr/share/common-licenses", "folder of text files")
	checkpoint := flag.String("checkpoint", "", "save the trained state here")
	flag.Parse()
	if *steps < 1 {
		return fmt.Errorf("--steps must be >= 1")
	}
	// `bazel run` starts us in the runfiles: relative paths are the caller's.
	if wd := os.Getenv("BUILD_WORKING_DIRECTORY"); wd != "" {
		if err := os.Chdir(wd); err != nil {
			return err
		}
	}

	text, err := readTexts(*textDir)
	if err != nil {
		return fmt.Errorf("cannot open text folder %q: %w", *textDir, err)
	}
	if len(text) < 2*seqLen {
		return fmt.Errorf("no usable text in %q", *textDir)
	}
	// The vocabulary: the sorted distinct bytes.
	var seen [256]bool
	for _, b := range text {
		seen[b] = true
	}
	var idOf [256]int32
	vocab := int32(0)
	for b := range seen {
		if seen[b] {
			idOf[b] = vocab
			vocab++
		}
	}
	tokens := make([]int32, len(text))
	for i, b := range text {
		tokens[i] = idOf[b]
	}

	model, err := pipeforge.NewGPT(pipeforge.GPTConfig{Vocab: int64(vocab), SeqLen: seqLen, DModel: 64, Heads: 4, Layers: 2})
	if err != nil {
		return err
	}
	defer model.Close()
	numParameters, err := model.NumParameterElements()
	if err != nil {
		return err
	}
	trainer, err := pipeforge.NewTrainer(model, pipeforge.TrainerOptions{MicroBatches: microBatches, Seed: 1,
		Optimizer: "adamw", LR: 3e-3, ClipNorm: 1})
	if err != nil {
		return err
	}
	defer trainer.Close()
	if err := trainer.SetDataLoader(textLoader{tokens}); err != nil {
		return err
	}

	fmt.Printf("PipeForge %s: character GPT (%d parameters, vocabulary %d) on %s, %d characters\n",
		pipeforge.Version(), numParameters, vocab, *textDir, len(tokens))
	fmt.Printf("%d steps of %d micro-batches x %d sequences x %d characters\n", *steps, microBatches, rows, seqLen)
	var first, loss float64
	for step := 1; step <= *steps; step++ {
		result, err := trainer.StepFromLoader()
		if err != nil {
			return err
		}
		loss = result.Loss
		if step == 1 {
			first = loss
		}
		if step == 1 || step%25 == 0 || step == *steps {
			speed := 0.0
			if result.Seconds > 0 {
				speed = float64(result.Tokens) / result.Seconds
			}
			fmt.Printf("step %4d  loss %.4f  %7.0f tok/s\n", step, loss, speed)
		}
	}
	if *checkpoint != "" {
		if err := trainer.SaveCheckpoint(*checkpoint); err != nil {
			return err
		}
	}
	sum, err := trainer.Checksum()
	if err != nil {
		return err
	}
	fmt.Printf("loss %.4f -> %.4f; parameter checksum %s\n", first, loss, sum)
	if !(loss < first) {
		return fmt.Errorf("the loss did not fall")
	}
	return nil
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "train_char_gpt:", err)
		os.Exit(1)
	}
}
