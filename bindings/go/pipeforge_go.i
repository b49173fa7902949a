// Go: the SWIG layer is the internal package pipeforge/internal/core; the public package pipeforge
// (the hand-written *.go files here) wraps it with functions that return `error`, Close() methods
// and a DataLoader interface.
//
// Go has no exceptions and a panic must never unwind through C, so every fallible core call takes
// a Status (the Go package passes one and turns it into an error), and the Go side of the data
// loader recovers panics itself and returns their text.
%module(directors="1") core

%{
#include "bindings/pipeforge_core.h"
%}

// Go names: step_from_loader -> StepFromLoader, grad_norm -> GetGradNorm().
%rename("%(camelcase)s", %$isfunction) "";
%rename("%(camelcase)s", %$isvariable) "";

// ---- slices: borrowed for the duration of the call (cgo's rule), never kept -------------------
%define PF_GO_SLICE(SIGNATURE, GO_SLICE)
%typemap(gotype) SIGNATURE #GO_SLICE
%typemap(in) SIGNATURE %{
  $1 = static_cast<decltype($1)>($input.array);
  $2 = static_cast<size_t>($input.len);
%}
%enddef

PF_GO_SLICE((const float* data, size_t count), []float32)
PF_GO_SLICE((const int32_t* data, size_t count), []int32)
PF_GO_SLICE((const int64_t* shape, size_t ndim), []int64)
PF_GO_SLICE((const int64_t* values, size_t count), []int64)
PF_GO_SLICE((const double* values, size_t count), []float64)
PF_GO_SLICE((float* out, size_t count), []float32)
PF_GO_SLICE((int32_t* out, size_t count), []int32)

// Seek(int64) would read as io.Seeker to go vet.
%rename(SeekTo) pipeforge::LoaderCallback::seek;

// Shapes come back through ndim()/dim(i) (a returned std::vector would need a Go allocation).
%ignore pipeforge::Tensor::shape;
%ignore pipeforge::Trainer::parameter_shape;
%ignore pipeforge::Tensor::defined;
%ignore pipeforge::Trainer::partition;             // partition_into
%ignore pipeforge::Model::partition_balanced;      // partition_balanced_into
%ignore pipeforge::Model::partition_by_parameters; // partition_by_parameters_into

%include "bindings/pipeforge.i"
