// The device runtime side of the CUDA backend (cuda_backend.h): probing, scopes, streams, events,
// pinned memory, copies and transports on //runtime/devices/cuda and //runtime/comm's GPU
// transports; and the static initializer that registers the backend (and, through
// register_cuda_runtime, the CUDA allocator and copy hooks) when this library is loaded or linked.
#include <cuda_runtime_api.h>

#include "runtime/backend/cuda/cuda_runtime_backend.h"
#include "runtime/comm/gpu_transport.h"
#include "runtime/comm/nccl_process_transport.h"
#include "runtime/devices/cuda/cuda_status.h"
#include "runtime/devices/cuda/device_scope.h"
#include "runtime/devices/cuda/pinned_host.h"
#include "runtime/devices/cuda/runtime.h"
#include "runtime/devices/cuda/stream.h"

namespace pf::cuda {
namespace {

class Scope final : public BackendScope {
 public:
  explicit Scope(int ordinal) : scope_(ordinal) {}

 private:
  DeviceScope scope_;
};

class Stream final : public DeviceStream {
 public:
  explicit Stream(int ordinal) : stream_(ordinal) {}
  int device() const override { return stream_.device(); }
  void synchronize(double timeout_seconds, const std::string& what) const override {
    stream_.synchronize(timeout_seconds, what);
  }
  const CudaStream& get() const { return stream_; }

 private:
  CudaStream stream_;
};

const CudaStream& native(const DeviceStream& stream) { return static_cast<const Stream&>(stream).get(); }

class CurrentStream final : public BackendScope {
 public:
  explicit CurrentStream(const DeviceStream& stream) : scope_(native(stream)) {}

 private:
  CurrentStreamScope scope_;
};

class Event final : public DeviceEvent {
 public:
  explicit Event(int ordinal) : event_(ordinal) {}
  void record(const DeviceStream* stream) override { event_.record(on(stream)); }
  void make_wait(const DeviceStream* stream) const override { event_.make_stream_wait(on(stream)); }
  bool query() const override { return event_.query(); }
  void synchronize(double timeout_seconds, const std::string& what) const override {
    event_.synchronize(timeout_seconds, what);
  }

 private:
  cudaStream_t on(const DeviceStream* stream) const {
    return stream ? native(*stream).get() : current_stream_for(event_.device());
  }
  CudaEvent event_;
};

class Pinned final : public PinnedBuffer {
 public:
  explicit Pinned(size_t bytes) : buffer_(bytes) {}
  char* data() const override { return buffer_.as<char>(); }
  size_t size() const override { return buffer_.size(); }

 private:
  PinnedHostBuffer buffer_;
};

}  // namespace

CudaAvailability CudaRuntimeBackend::probe() {
  CudaAvailability out;
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    out.reason = cudaGetErrorString(err);
    cudaGetLastError();  // clear the sticky error
    return out;
  }
  out.device_count = count;
  if (count == 0) out.reason = "no CUDA device";
  return out;
}

std::unique_ptr<BackendScope> CudaRuntimeBackend::device_scope(int ordinal) { return std::make_unique<Scope>(ordinal); }

std::unique_ptr<BackendScope> CudaRuntimeBackend::stream_scope(const DeviceStream& stream) {
  return std::make_unique<CurrentStream>(stream);
}

std::unique_ptr<DeviceStream> CudaRuntimeBackend::new_stream(int ordinal) { return std::make_unique<Stream>(ordinal); }

std::unique_ptr<DeviceEvent> CudaRuntimeBackend::new_event(int ordinal) { return std::make_unique<Event>(ordinal); }

std::unique_ptr<PinnedBuffer> CudaRuntimeBackend::new_pinned_buffer(size_t bytes) {
  return std::make_unique<Pinned>(bytes);
}

void CudaRuntimeBackend::copy_async(void* dst, const void* src, size_t bytes, const DeviceStream& stream,
                                    const std::string& what) {
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, native(stream).get()), what);
}

std::unique_ptr<comm::GpuTransportGroup> CudaRuntimeBackend::new_gpu_transport(
    std::vector<int> devices, const std::vector<std::pair<int, int>>& nccl_pairs,
    const comm::InProcessTransport::Options& local, int max_pending_sends) {
  comm::GpuTransport::Options options;
  options.local = local;
  options.max_pending_sends = max_pending_sends;
  return std::make_unique<comm::GpuTransport>(std::move(devices), nccl_pairs, options);
}

std::unique_ptr<comm::GpuTransportGroup> CudaRuntimeBackend::new_process_gpu_transport(
    std::shared_ptr<comm::World> world, int device, const std::vector<std::pair<int, int>>& talking,
    int max_pending_sends, double init_timeout_seconds) {
  comm::NcclProcessTransport::Options options;
  options.max_pending_sends = max_pending_sends;
  options.init_timeout_seconds = init_timeout_seconds;
  return std::make_unique<comm::NcclProcessTransport>(std::move(world), device, talking, options);
}

namespace {

// Registration stores pointers only: no CUDA call, safe on machines without a GPU or driver.
const bool registered_at_load = [] {
  static CudaRuntimeBackend backend;
  register_cuda_runtime();
  register_cuda_backend(&backend, kCudaBackendInterfaceRevision);
  return true;
}();

}  // namespace
}  // namespace pf::cuda
