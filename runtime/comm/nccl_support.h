// What the NCCL transports (nccl_transport.h, nccl_process_transport.h) share besides the message
// header (nccl_wire.h): header slots in device memory, deadlines, dropping a tensor as if on another
// stream, and NCCL groups that always end.
#pragma once

#include <nccl.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <string>
#include <utility>

#include "runtime/comm/nccl_wire.h"
#include "runtime/devices/cuda/cuda_status.h"
#include "runtime/devices/cuda/stream.h"
#include "runtime/tensor/tensor.h"

namespace pf::comm::nccl_support {

// Transport-internal device memory for message headers (nccl_wire::kHeaderBytes per slot): plain
// cudaMalloc, not the caching allocator, cleared at creation.
class DeviceBuffer {
 public:
  DeviceBuffer(int device, size_t bytes);
  ~DeviceBuffer();  // logs a failing cudaFree, never throws
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  char* slot(int i) const { return static_cast<char*>(data_) + static_cast<size_t>(i) * nccl_wire::kHeaderBytes; }

 private:
  void* data_ = nullptr;
};

using Clock = std::chrono::steady_clock;
Clock::time_point deadline_after(double seconds);  // negative: now
double seconds_left(Clock::time_point deadline);   // >= 0

// Drops `t` as if the last work on it were issued on `stream`: the caching allocator then reuses
// its block only after that stream has passed everything issued so far (caching_allocator.h).
void drop_on_stream(Tensor& t, const cuda::CudaStream& stream);

// Runs enqueue() between ncclGroupStart and ncclGroupEnd; ncclGroupEnd runs even when enqueue
// fails, and the first error is thrown. `accept` is a further result that is not an error
// (ncclInProgress for a non-blocking communicator, whose state the caller then polls); the result
// of ncclGroupEnd is returned.
template <typename F>
ncclResult_t nccl_group(const std::string& what, F enqueue, ncclResult_t accept = ncclSuccess) {
  cuda::check_nccl(ncclGroupStart(), what, ": ncclGroupStart");
  ncclResult_t first = ncclSuccess;
  try {
    first = enqueue();
  } catch (...) {
    (void)ncclGroupEnd();
    throw;
  }
  const ncclResult_t end = ncclGroupEnd();
  if (first != accept) cuda::check_nccl(first, what);
  if (end != accept) cuda::check_nccl(end, what, ": ncclGroupEnd");
  return end;
}

// The end of a receive whose payload (`t`) was issued on `stream` of `device`: the message asked
// for (`got == want`) is returned once its payload has arrived (`wait(done, &t)`, which throws on a
// timeout or cancel); another is handed to `keep(got, t, done)` for a later receive, and an
// undefined Tensor is returned.
template <typename Wait, typename Keep>
Tensor finish_receive(int device, const cuda::CudaStream& stream, const MessageKey& got, const MessageKey& want,
                      Tensor t, Wait wait, Keep keep) {
  auto done = std::make_unique<cuda::CudaEvent>(device);
  done->record(stream);
  if (got == want) {
    wait(*done, &t);
    return t;
  }
  keep(got, std::move(t), std::move(done));
  return Tensor();
}

}  // namespace pf::comm::nccl_support
