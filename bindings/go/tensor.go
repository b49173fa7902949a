package pipeforge

import (
	"fmt"

	"github.com/pipeforge/pipeforge-go/internal/core"
)

// Tensor is host data for the runtime: float32 or int32 values with a row-major shape. Exactly one
// of F32 and I32 is set.
type Tensor struct {
	F32   []float32
	I32   []int32
	Shape []int64
}

// Float32 makes a float32 tensor (no copy: the slice is the tensor's).
func Float32(data []float32, shape ...int64) Tensor { return Tensor{F32: data, Shape: shape} }

// Int32 makes an int32 tensor (no copy).
func Int32(data []int32, shape ...int64) Tensor { return Tensor{I32: data, Shape: shape} }

// toCore copies t into a new core tensor (the caller deletes it). cgo forbids C from keeping Go
// memory after a call returns, so the copy is what lets a data loader's batch outlive the call.
func (t Tensor) toCore() (core.Tensor, error) {
	if t.F32 != nil && t.I32 != nil {
		return nil, &Error{Code: InvalidArgument, Message: "the tensor has both F32 and I32 data"}
	}
	var out core.Tensor
	err := call(func(s core.Status) {
		if t.I32 != nil {
			out = core.TensorFromInts(t.I32, t.Shape, s)
		} else {
			out = core.TensorFromFloats(t.F32, t.Shape, s)
		}
	})
	if err != nil {
		core.DeleteTensor(out)
		return nil, err
	}
	return out, nil
}

func (t Tensor) String() string {
	if t.I32 != nil {
		return fmt.Sprintf("int32%v", t.Shape)
	}
	return fmt.Sprintf("float32%v", t.Shape)
}
