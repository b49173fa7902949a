"""Exceptions: one class per PipeForge error code, all subclasses of pipeforge.Error.

str(error) is the runtime's message; `code` is the pf_code value and `code_name` its name.
InvalidArgumentError is also a ValueError, NotFoundError a LookupError, IoError an OSError,
OutOfMemoryError a MemoryError, TimeoutError the built-in TimeoutError and UnimplementedError a
NotImplementedError, so code that catches the built-in kinds keeps working.
"""

import builtins
import re


class Error(Exception):
    """Base class of every error PipeForge raises."""

    code = -1
    code_name = "UNKNOWN"

    def __init__(self, message, code=None, code_name=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if code_name is not None:
            self.code_name = code_name


def _error(name, code, code_name, *bases, doc):
    cls = type(name, (Error,) + bases, {"code": code, "code_name": code_name, "__doc__": doc})
    cls.__module__ = "pipeforge"
    return cls


Error.__module__ = "pipeforge"
InvalidArgumentError = _error("InvalidArgumentError", 1, "INVALID_ARGUMENT", ValueError,
                              doc="A bad argument: malformed JSON, a wrong shape or dtype, a bad option.")
FailedPreconditionError = _error("FailedPreconditionError", 2, "FAILED_PRECONDITION",
                                 doc="The object is not in a state for the call (e.g. closed).")
OutOfMemoryError = _error("OutOfMemoryError", 3, "OUT_OF_MEMORY", MemoryError, doc="An allocation failed.")
NotFoundError = _error("NotFoundError", 4, "NOT_FOUND", LookupError, doc="No such parameter (or other name).")
IoError = _error("IoError", 5, "IO_ERROR", OSError, doc="Reading or writing a file failed.")
DataLossError = _error("DataLossError", 6, "DATA_LOSS", doc="A file is truncated or corrupted.")
CudaError = _error("CudaError", 7, "CUDA_ERROR", doc="A CUDA call failed.")
CublasError = _error("CublasError", 8, "CUBLAS_ERROR", doc="A cuBLAS call failed.")
NcclError = _error("NcclError", 9, "NCCL_ERROR", doc="An NCCL call failed.")
MpiError = _error("MpiError", 10, "MPI_ERROR", doc="An MPI call failed.")
CallbackError = _error("CallbackError", 11, "CALLBACK_ERROR",
                       doc="A callback (data loader) failed; __cause__ holds its exception when it raised one.")
TimeoutError = _error("TimeoutError", 12, "TIMEOUT", builtins.TimeoutError, doc="A wait timed out.")
CancelledError = _error("CancelledError", 13, "CANCELLED", doc="The operation was cancelled.")
UnimplementedError = _error("UnimplementedError", 14, "UNIMPLEMENTED", NotImplementedError,
                            doc="Not supported by this build (e.g. CUDA tensors on the CPU build).")
InternalError = _error("InternalError", 15, "INTERNAL", doc="A bug in PipeForge.")



class DivergedError(Error, ArithmeticError):
    """Trainer.run stopped at a diverged step: a NaN or infinity in its loss, gradient norm or a
    parameter after the update (no checkpoint was written for that step); `result` is the
    RunResult of the run up to it, `result.divergence` what diverged."""

    code_name = "DIVERGED"

    def __init__(self, message, result=None):
        super().__init__(message)
        self.result = result


DivergedError.__module__ = "pipeforge"

_BY_CODE = {cls.code: cls for cls in (
    InvalidArgumentError, FailedPreconditionError, OutOfMemoryError, NotFoundError, IoError, DataLossError,
    CudaError, CublasError, NcclError, MpiError, CallbackError, TimeoutError, CancelledError,
    UnimplementedError, InternalError)}

__all__ = ["DivergedError", "Error"] + sorted(cls.__name__ for cls in _BY_CODE.values())


_C_FUNCTION = re.compile(r"^pf_[a-z0-9_]+: ")


def python_message(message):
    """A runtime message as Python names things: without the C function it failed in
    ("pf_trainer_create: ") and with options->x written as x (Trainer's keyword argument)."""
    return _C_FUNCTION.sub("", message, count=1).replace("options->", "")


def from_status(code, message):
    """The exception for a runtime status (called by the extension module when a call fails);
    `native_message` keeps the runtime's own text."""
    cls = _BY_CODE.get(code)
    error = Error(python_message(message), code=code) if cls is None else cls(python_message(message))
    error.native_message = message
    return error
