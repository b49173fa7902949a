package pipeforge

import (
	"fmt"

	"github.com/pipeforge/pipeforge-go/internal/core"
)

// DataLoader serves micro-batches to Trainer.StepFromLoader, on the goroutine that calls it.
// position counts micro-batches: 0, 1, 2, ... across steps. The tensors are copied before Next
// returns. A loader that also implements Seeker is told when the next position will not follow the
// previous one (after a failed step or a checkpoint load); one that does not must serve whatever
// position it is asked for.
type DataLoader interface {
	Next(position int64) (inputs, targets Tensor, err error)
}

// Seeker is the optional seek half of a DataLoader.
type Seeker interface {
	SeekTo(position int64) error
}

// DataLoaderFunc adapts a function to DataLoader.
type DataLoaderFunc func(position int64) (inputs, targets Tensor, err error)

// Next calls f.
func (f DataLoaderFunc) Next(position int64) (Tensor, Tensor, error) { return f(position) }

// LoaderPanic is the error behind a CallbackError when the data loader panicked.
type LoaderPanic struct {
	Value interface{}
}

func (p *LoaderPanic) Error() string { return fmt.Sprintf("data loader panicked: %v", p.Value) }

// loaderBridge is what the native data loader calls (through a SWIG director). It never lets a
// panic unwind into C: it recovers, keeps the error for StepFromLoader and returns its text.
type loaderBridge struct {
	loader  DataLoader
	lastErr error
}

func (b *loaderBridge) failed(err error) string {
	b.lastErr = err
	if msg := err.Error(); msg != "" {
		return msg
	}
	return "the data loader failed"
}

// Next is called by the runtime: fills batch with micro-batch position.
func (b *loaderBridge) Next(position int64, batch core.MicroBatch) (message string) {
	defer func() {
		if r := recover(); r != nil {
			message = b.failed(&LoaderPanic{Value: r})
		}
	}()
	inputs, targets, err := b.loader.Next(position)
	if err != nil {
		return b.failed(err)
	}
	in, err := inputs.toCore()
	if err != nil {
		return b.failed(fmt.Errorf("inputs: %w", err))
	}
	defer core.DeleteTensor(in)
	tg, err := targets.toCore()
	if err != nil {
		return b.failed(fmt.Errorf("targets: %w", err))
	}
	defer core.DeleteTensor(tg)
	batch.SetInputs(in) // the batch shares the copied data
	batch.SetTargets(tg)
	return ""
}

// SeekTo is called by the runtime before a Next whose position does not follow the previous one.
func (b *loaderBridge) SeekTo(position int64) (message string) {
	defer func() {
		if r := recover(); r != nil {
			message = b.failed(&LoaderPanic{Value: r})
		}
	}()
	if s, ok := b.loader.(Seeker); ok {
		if err := s.SeekTo(position); err != nil {
			return b.failed(err)
		}
	}
	return ""
}
