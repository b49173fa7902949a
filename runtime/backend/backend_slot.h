// Where a backend registers itself, and how the runtime gets it: the registered one, else its
// library loaded now (loader.h). One slot per backend interface (cuda_backend.cc, mpi_backend.cc).
#pragma once

#include <atomic>
#include <mutex>
#include <string>

#include "runtime/backend/loader.h"
#include "runtime/core/error.h"

namespace pf::backend {

template <typename Backend>
class BackendSlot {
 public:
  // `library`: where the backend comes from when none is registered; `revision`: the interface
  // revision of this runtime.
  BackendSlot(const BackendLibrary& library, int revision) : library_(library), revision_(revision) {}

  // From the backend's static initializer. A backend of another interface revision is refused.
  void offer(Backend* backend, int revision) {
    if (revision != revision_) {
      std::lock_guard<std::mutex> lock(mutex_);
      refusal_ = "it was built against interface revision " + std::to_string(revision) + " and this runtime has " +
                 std::to_string(revision_) + " (use the backend of the same build)";
      return;
    }
    backend_.store(backend);
  }

  // The backend, loading its library if none is registered. Throws `code`
  // "<what>: <why the library did not load or register><hint>".
  Backend& get(ErrorCode code, const std::string& what, const std::string& hint) {
    if (Backend* b = backend_.load()) return *b;
    std::string why = load_backend_library(library_);
    if (Backend* b = backend_.load()) return *b;
    if (why.empty()) {
      std::lock_guard<std::mutex> lock(mutex_);
      why = std::string(library_.file) + " loaded, but " +
            (refusal_.empty() ? std::string("it registered no backend") : "it was refused: " + refusal_);
    }
    fail(code, what, ": ", why, hint);
  }

 private:
  const BackendLibrary library_;
  const int revision_;
  std::atomic<Backend*> backend_{nullptr};
  std::mutex mutex_;
  std::string refusal_;
};

}  // namespace pf::backend
