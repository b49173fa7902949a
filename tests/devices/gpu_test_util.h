// Helpers for the GPU tests of the device runtime.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <vector>

#include "runtime/core/error.h"
#include "tests/util/catch_error.h"
#include "runtime/devices/cuda/cuda_status.h"
#include "runtime/backend/cuda_backend.h"

namespace pf::cuda::testing {

// Skips the current test unless at least `n` GPUs are visible.
#define PF_REQUIRE_GPUS(n)                                                                    \
  do {                                                                                        \
    ::pf::CudaAvailability pf_avail = ::pf::probe_cuda();                                     \
    if (pf_avail.device_count < (n)) {                                                        \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s), found " << pf_avail.device_count \
                   << (pf_avail.reason.empty() ? "" : ": ") << pf_avail.reason;               \
    }                                                                                         \
  } while (0)

// Holds back everything issued on a stream after it until release() (a host function that waits
// on a flag), so tests can observe "not yet done" deterministically. The destructor releases.
class StreamGate {
 public:
  explicit StreamGate(cudaStream_t stream) : state_(std::make_shared<State>()) {
    auto* arg = new std::shared_ptr<State>(state_);
    cudaError_t err = cudaLaunchHostFunc(stream, &StreamGate::wait, arg);
    if (err != cudaSuccess) {
      delete arg;
      check_cuda(err, "StreamGate: cudaLaunchHostFunc");
    }
  }
  ~StreamGate() { release(); }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  void release() {
    std::lock_guard<std::mutex> lock(state_->mutex);
    state_->open = true;
    state_->changed.notify_all();
  }

 private:
  struct State {
    std::mutex mutex;
    std::condition_variable changed;
    bool open = false;
  };
  static void CUDART_CB wait(void* arg) {
    std::unique_ptr<std::shared_ptr<State>> holder(static_cast<std::shared_ptr<State>*>(arg));
    State& s = **holder;
    std::unique_lock<std::mutex> lock(s.mutex);
    s.changed.wait(lock, [&] { return s.open; });
  }
  std::shared_ptr<State> state_;
};

// Deterministic test values (no two equal in a row), including negative ones.
inline std::vector<float> pattern(size_t n, int seed) {
  std::vector<float> v(n);
  uint32_t x = 2463534242u ^ static_cast<uint32_t>(seed * 7919 + 1);
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    v[i] = static_cast<float>(static_cast<int32_t>(x % 2000001u) - 1000000) / 1024.0f;
  }
  return v;
}

using ::pftest::catch_error;

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace pf::cuda::testing
