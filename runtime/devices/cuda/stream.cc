#include "runtime/devices/cuda/stream.h"

#include <chrono>
#include <thread>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/devices/cuda/cuda_status.h"
#include "runtime/devices/cuda/device_scope.h"

namespace pf::cuda {
namespace {

thread_local StreamRef t_current_stream;

// Destructors must not throw. At process exit the CUDA runtime may already be unloading; that is
// not worth a message.
void log_release_error(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();
  if (err == cudaErrorCudartUnloading || err == cudaErrorContextIsDestroyed) return;
  log(LogLevel::kError, cuda_error_message(err, what));
}

}  // namespace

WaitResult wait_event(cudaEvent_t event, double timeout_seconds, const std::atomic<bool>* cancel,
                      const std::string& what) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto deadline = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(timeout_seconds < 0 ? 0 : timeout_seconds));
  const auto spin_end = start + std::chrono::microseconds(50);
  auto pause = std::chrono::microseconds(20);
  while (true) {
    cudaError_t err = cudaEventQuery(event);
    if (err == cudaSuccess) return WaitResult::kDone;
    if (err != cudaErrorNotReady) throw_cuda_error(err, what + ": waiting for an event");
    if (cancel != nullptr && cancel->load(std::memory_order_acquire)) return WaitResult::kCancelled;
    const auto now = Clock::now();
    if (now >= deadline) {
      // One last look, so that a zero timeout still reports work that is already done.
      err = cudaEventQuery(event);
      if (err == cudaSuccess) return WaitResult::kDone;
      if (err != cudaErrorNotReady) throw_cuda_error(err, what + ": waiting for an event");
      return WaitResult::kTimedOut;
    }
    if (now < spin_end) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(pause);
      if (pause < std::chrono::microseconds(1000)) pause *= 2;
    }
  }
}

// ---- CudaStream ---------------------------------------------------------------------------------

CudaStream::CudaStream(int device, int priority) : device_(device) {
  DeviceScope scope(device);
  check_cuda(cudaStreamCreateWithPriority(&stream_, cudaStreamNonBlocking, priority),
             "creating a stream on cuda:", device);
}

CudaStream::~CudaStream() { release(); }

CudaStream::CudaStream(CudaStream&& other) noexcept
    : device_(std::exchange(other.device_, -1)), stream_(std::exchange(other.stream_, nullptr)) {}

CudaStream& CudaStream::operator=(CudaStream&& other) noexcept {
  if (this != &other) {
    release();
    device_ = std::exchange(other.device_, -1);
    stream_ = std::exchange(other.stream_, nullptr);
  }
  return *this;
}

void CudaStream::release() noexcept {
  if (stream_ == nullptr) return;
  log_release_error(cudaStreamDestroy(stream_), "destroying a stream");
  stream_ = nullptr;
}

bool CudaStream::query() const {
  cudaError_t err = cudaStreamQuery(stream_);
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) return false;
  throw_cuda_error(err, "querying a stream on cuda:" + std::to_string(device_));
}

void CudaStream::synchronize(double timeout_seconds, const std::string& what) const {
  CudaEvent event(device_);
  event.record(stream_);
  event.synchronize(timeout_seconds, what);
}

// ---- CudaEvent ----------------------------------------------------------------------------------

CudaEvent::CudaEvent(int device) : device_(device) {
  DeviceScope scope(device);
  check_cuda(cudaEventCreateWithFlags(&event_, cudaEventDisableTiming), "creating an event on cuda:", device);
}

CudaEvent::~CudaEvent() { release(); }

CudaEvent::CudaEvent(CudaEvent&& other) noexcept
    : device_(std::exchange(other.device_, -1)), event_(std::exchange(other.event_, nullptr)) {}

CudaEvent& CudaEvent::operator=(CudaEvent&& other) noexcept {
  if (this != &other) {
    release();
    device_ = std::exchange(other.device_, -1);
    event_ = std::exchange(other.event_, nullptr);
  }
  return *this;
}

void CudaEvent::release() noexcept {
  if (event_ == nullptr) return;
  log_release_error(cudaEventDestroy(event_), "destroying an event");
  event_ = nullptr;
}

void CudaEvent::record(cudaStream_t stream) {
  PF_CHECK_STATE(event_ != nullptr, "CudaEvent::record on a moved-from event");
  DeviceScope scope(device_);  // the legacy default stream (nullptr) is the current device's
  check_cuda(cudaEventRecord(event_, stream), "recording an event on cuda:", device_);
}

void CudaEvent::make_stream_wait(cudaStream_t stream) const {
  PF_CHECK_STATE(event_ != nullptr, "CudaEvent::make_stream_wait on a moved-from event");
  check_cuda(cudaStreamWaitEvent(stream, event_, 0), "making a stream wait for an event of cuda:", device_);
}

bool CudaEvent::query() const {
  PF_CHECK_STATE(event_ != nullptr, "CudaEvent::query on a moved-from event");
  cudaError_t err = cudaEventQuery(event_);
  if (err == cudaSuccess) return true;
  if (err == cudaErrorNotReady) return false;
  throw_cuda_error(err, "querying an event on cuda:" + std::to_string(device_));
}

WaitResult CudaEvent::wait(double timeout_seconds, const std::atomic<bool>* cancel,
                           const std::string& what) const {
  PF_CHECK_STATE(event_ != nullptr, "CudaEvent::wait on a moved-from event");
  return wait_event(event_, timeout_seconds, cancel, what);
}

void CudaEvent::synchronize(double timeout_seconds, const std::string& what) const {
  if (wait(timeout_seconds, nullptr, what) == WaitResult::kTimedOut) {
    fail(ErrorCode::kTimeout, what, ": timed out after ", timeout_seconds, " s waiting for cuda:", device_);
  }
}

// ---- the current stream -------------------------------------------------------------------------

StreamRef current_stream() { return t_current_stream; }

cudaStream_t current_stream_for(int device) {
  return t_current_stream.device == device ? t_current_stream.stream : nullptr;
}

CurrentStreamScope::CurrentStreamScope(const CudaStream& stream)
    : CurrentStreamScope(stream.device(), stream.get()) {}

CurrentStreamScope::CurrentStreamScope(int device, cudaStream_t stream) : previous_(t_current_stream) {
  t_current_stream = StreamRef{device, stream};
}

CurrentStreamScope::~CurrentStreamScope() { t_current_stream = previous_; }

}  // namespace pf::cuda
