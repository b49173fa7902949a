// Streams, events and the calling thread's current stream.
//
// * CudaStream: an owned non-blocking stream (cudaStreamNonBlocking: it never synchronizes with the
//   legacy default stream) on one device.
// * CudaEvent: an owned event (timing disabled) on one device: record on a stream, make another
//   stream wait for it (any device), query, and wait on the host with a timeout. Host waits poll
//   cudaEventQuery (never cudaEventSynchronize), so they honour a timeout (kTimeout) and a cancel
//   flag and never hang the calling thread forever.
// * The current stream: each host thread has at most one (set with CurrentStreamScope). Device
//   work of the thread is issued on it — kernels, the Tensor copy hook, and the caching
//   allocator's reuse rule (caching_allocator.h) all use it. With none set, work goes to the legacy
//   default stream of the device.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <string>

namespace pf::cuda {

enum class WaitResult { kDone, kTimedOut, kCancelled };

// Polls `event` (spins briefly, then sleeps with growing pauses up to 1 ms) until it has
// completed, `timeout_seconds` have passed, or `*cancel` (may be null) is true. A CUDA error while
// querying is thrown (kCudaError), naming `what`.
WaitResult wait_event(cudaEvent_t event, double timeout_seconds, const std::atomic<bool>* cancel,
                      const std::string& what);

class CudaStream {
 public:
  // A non-blocking stream on `device` (priority as in cudaStreamCreateWithPriority; 0 = default).
  explicit CudaStream(int device, int priority = 0);
  ~CudaStream();  // cudaStreamDestroy: returns at once, CUDA releases it when its work is done
  CudaStream(CudaStream&& other) noexcept;
  CudaStream& operator=(CudaStream&& other) noexcept;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  cudaStream_t get() const { return stream_; }
  int device() const { return device_; }
  // True when all work issued so far has completed.
  bool query() const;
  // Waits for all work issued so far; kTimeout naming `what` after `timeout_seconds`.
  void synchronize(double timeout_seconds, const std::string& what) const;

 private:
  void release() noexcept;
  int device_ = -1;
  cudaStream_t stream_ = nullptr;
};

class CudaEvent {
 public:
  explicit CudaEvent(int device);
  ~CudaEvent();
  CudaEvent(CudaEvent&& other) noexcept;
  CudaEvent& operator=(CudaEvent&& other) noexcept;
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  cudaEvent_t get() const { return event_; }
  int device() const { return device_; }
  // Captures the work issued so far on `stream` (a stream of this event's device; nullptr = the
  // device's legacy default stream).
  void record(cudaStream_t stream);
  void record(const CudaStream& stream) { record(stream.get()); }
  // Work issued on `stream` (any device) after this call waits until the recorded work is done.
  void make_stream_wait(cudaStream_t stream) const;
  // True when the recorded work has completed (also true when never recorded).
  bool query() const;
  // Host wait with a timeout: kTimeout "<what>: timed out after N s" when it passes.
  void synchronize(double timeout_seconds, const std::string& what) const;
  // Host wait that also stops when *cancel becomes true (see wait_event).
  WaitResult wait(double timeout_seconds, const std::atomic<bool>* cancel, const std::string& what) const;

 private:
  void release() noexcept;
  int device_ = -1;
  cudaEvent_t event_ = nullptr;
};

// The calling thread's current stream. device == -1: none set (the legacy default stream).
struct StreamRef {
  int device = -1;
  cudaStream_t stream = nullptr;
};
StreamRef current_stream();
// The thread's current stream when it belongs to `device`, otherwise nullptr (the legacy default
// stream of `device`).
cudaStream_t current_stream_for(int device);

// Sets the thread's current stream for a scope and restores the previous one (scopes nest). Does
// not change the current device: open a DeviceScope as well.
class CurrentStreamScope {
 public:
  explicit CurrentStreamScope(const CudaStream& stream);
  CurrentStreamScope(int device, cudaStream_t stream);
  ~CurrentStreamScope();
  CurrentStreamScope(const CurrentStreamScope&) = delete;
  CurrentStreamScope& operator=(const CurrentStreamScope&) = delete;

 private:
  StreamRef previous_;
};

}  // namespace pf::cuda
