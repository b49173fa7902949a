// Loads a backend library (libpipeforge_<name>.so.<abi>) into the process on first use, the way
// ONNX Runtime loads its execution providers: the core library needs no CUDA to be installed, and
// the CUDA backend comes in only when a CUDA device is asked for (docs/BACKENDS.md).
//
// Where from, the first that loads:
//   1. $PIPEFORGE_<NAME>_BACKEND (a path; when set, nothing else is tried);
//   2. next to the object holding this code: libpipeforge.so.<abi>'s folder, or the executable's
//      (links followed); when the file is there, its outcome is final;
//   3. the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache, the run path).
// Before loading, the object holding this code is made global (RTLD_GLOBAL), so the backend's
// references into the runtime (it links none of it itself) bind to this one copy.
#pragma once

#include <string>

namespace pf::backend {

// A backend library: `name` as in $PIPEFORGE_<NAME>_BACKEND, its file (whose SONAME carries the ABI
// version, like libpipeforge.so.<abi>), and whether it is loaded with RTLD_GLOBAL.
struct BackendLibrary {
  const char* name;
  const char* file;
  bool global;
};
constexpr BackendLibrary kCudaBackend{"cuda", "libpipeforge_cuda.so.1", false};
// RTLD_GLOBAL: Open MPI's own plugins look for libmpi's symbols globally.
constexpr BackendLibrary kMpiBackend{"mpi", "libpipeforge_mpi.so.1", true};

// dlopen()s the backend library once per process (later calls return the first outcome).
// Returns "" on success, else every attempt's error, e.g. "libpipeforge_cuda.so.1 could not be
// loaded: /usr/lib/libpipeforge_cuda.so.1: libcudart.so.13: cannot open shared object file ...".
// Thread-safe.
std::string load_backend_library(const BackendLibrary& library);

// The folder of the shared object (or executable) this code is linked into, with a trailing '/'.
std::string runtime_folder();

}  // namespace pf::backend
