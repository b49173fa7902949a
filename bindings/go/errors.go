package pipeforge

import (
	"fmt"

	"github.com/pipeforge/pipeforge-go/internal/core"
)

// Code is a PipeForge error code (the C API's pf_code).
type Code int

// The error codes; the values are those of pf_code and never change.
const (
	OK                 Code = 0
	InvalidArgument    Code = 1
	FailedPrecondition Code = 2
	OutOfMemory        Code = 3
	NotFound           Code = 4
	IOError            Code = 5
	DataLoss           Code = 6
	CUDAError          Code = 7
	CUBLASError        Code = 8
	NCCLError          Code = 9
	MPIError           Code = 10
	CallbackError      Code = 11
	Timeout            Code = 12
	Cancelled          Code = 13
	Unimplemented      Code = 14
	Internal           Code = 15
)

// String is the code's name, e.g. "INVALID_ARGUMENT".
func (c Code) String() string { return core.CodeName(int(c)) }

// Error is an error reported by the runtime: its code and message. A data loader's own error (or
// panic) is available through errors.Unwrap / errors.Is / errors.As.
type Error struct {
	Code    Code
	Message string
	cause   error
}

func (e *Error) Error() string { return fmt.Sprintf("pipeforge: %s: %s", e.Code, e.Message) }

// Unwrap returns the data loader's error behind a CallbackError, if any.
func (e *Error) Unwrap() error { return e.cause }

// Is makes errors.Is(err, &pipeforge.Error{Code: pipeforge.NotFound}) match on the code.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.Message == "" && t.Code == e.Code
}

// call runs f with a fresh Status and returns the error it recorded, if any. Every core call goes
// through here: the status travels with the call (no thread-local state, which goroutines would
// break), and nothing panics.
func call(f func(status core.Status)) error {
	status := core.NewStatus()
	defer core.DeleteStatus(status)
	f(status)
	if status.Ok() {
		return nil
	}
	return &Error{Code: Code(status.Code()), Message: status.Message()}
}

// errClosed is returned by methods of a closed Model or Trainer.
func errClosed(what string) error {
	return &Error{Code: FailedPrecondition, Message: "the " + what + " is closed"}
}

// abiError is set when the libpipeforge.so this program loaded is not the one the package was
// built for; every constructor then returns it.
var abiError = call(core.CheckAbi)

// Version is the version of the loaded libpipeforge.so, e.g. "0.19.0".
func Version() string { return core.Version() }

// ABIVersion is the ABI version this package was built for; CheckABI compares it with the library's.
func ABIVersion() int { return core.HeaderAbiVersion() }

// CheckABI reports whether the loaded libpipeforge.so has the ABI this package was built for.
func CheckABI() error { return abiError }
