#include "runtime/devices/cuda/device_copy.h"

#include "runtime/core/error.h"
#include "runtime/devices/cuda/cuda_status.h"
#include "runtime/devices/cuda/device_scope.h"
#include "runtime/devices/cuda/stream.h"

namespace pf::cuda {
namespace {

void check_copy_args(const Tensor& dst, const Tensor& src, const char* what) {
  PF_CHECK_ARG(dst.defined() && src.defined(), what, ": undefined tensor");
  PF_CHECK_ARG(dst.shape() == src.shape() && dst.dtype() == src.dtype(), what, ": copy from ",
               shape_to_string(src.shape()), " ", dtype_name(src.dtype()), " into ", shape_to_string(dst.shape()),
               " ", dtype_name(dst.dtype()));
}

// The device whose context runs a copy: the source's when it is on a GPU, else the destination's.
int copy_device(const Device& dst, const Device& src) {
  return src.kind == DeviceKind::kCuda ? src.ordinal : dst.ordinal;
}

std::string describe(const Device& dst, const Device& src, size_t bytes) {
  return "copying " + std::to_string(bytes) + " bytes from " + src.to_string() + " to " + dst.to_string();
}

void enqueue_copy(void* dst, const Device& dst_device, const void* src, const Device& src_device, size_t bytes,
                  cudaStream_t stream, int stream_device) {
  if (bytes == 0) return;
  DeviceScope scope(stream_device);
  // cudaMemcpyDefault: unified addressing tells host, device and peer memory apart.
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream), describe(dst_device, src_device, bytes));
}

}  // namespace

void copy_tensor_async(const Tensor& dst, const Tensor& src, cudaStream_t stream) {
  check_copy_args(dst, src, "copy_tensor_async");
  PF_CHECK_ARG(dst.device().kind == DeviceKind::kCuda || src.device().kind == DeviceKind::kCuda,
               "copy_tensor_async: neither tensor is on a CUDA device (", src.device().to_string(), " -> ",
               dst.device().to_string(), ")");
  enqueue_copy(dst.data<char>(), dst.device(), src.data<char>(), src.device(), src.nbytes(), stream,
               copy_device(dst.device(), src.device()));
}

Tensor to_device_async(const Tensor& src, const Device& device, cudaStream_t stream) {
  PF_CHECK_ARG(src.defined(), "to_device_async: undefined tensor");
  Tensor out = Tensor::empty(src.shape(), src.dtype(), device);
  copy_tensor_async(out, src, stream);
  return out;
}

void copy_to_host_async(const Tensor& src, void* host, size_t host_bytes, cudaStream_t stream) {
  PF_CHECK_ARG(src.defined() && src.device().kind == DeviceKind::kCuda,
               "copy_to_host_async: the source must be a CUDA tensor");
  PF_CHECK_ARG(host_bytes >= src.nbytes(), "copy_to_host_async: host buffer of ", host_bytes,
               " bytes is smaller than the tensor (", src.nbytes(), " bytes)");
  enqueue_copy(host, Device::cpu(), src.data<char>(), src.device(), src.nbytes(), stream, src.device().ordinal);
}

void copy_from_host_async(const Tensor& dst, const void* host, size_t host_bytes, cudaStream_t stream) {
  PF_CHECK_ARG(dst.defined() && dst.device().kind == DeviceKind::kCuda,
               "copy_from_host_async: the destination must be a CUDA tensor");
  PF_CHECK_ARG(host_bytes >= dst.nbytes(), "copy_from_host_async: host buffer of ", host_bytes,
               " bytes is smaller than the tensor (", dst.nbytes(), " bytes)");
  enqueue_copy(dst.data<char>(), dst.device(), host, Device::cpu(), dst.nbytes(), stream, dst.device().ordinal);
}

void copy_bytes_hook(void* dst, const Device& dst_device, const void* src, const Device& src_device,
                     size_t bytes) {
  // The thread's current stream when it belongs to one of the devices, else the legacy default
  // stream of the device that runs the copy.
  StreamRef current = current_stream();
  int device = copy_device(dst_device, src_device);
  cudaStream_t stream = nullptr;
  if (current.device >= 0 && ((dst_device.kind == DeviceKind::kCuda && dst_device.ordinal == current.device) ||
                              (src_device.kind == DeviceKind::kCuda && src_device.ordinal == current.device))) {
    device = current.device;
    stream = current.stream;
  }
  enqueue_copy(dst, dst_device, src, src_device, bytes, stream, device);
  const bool host_involved = dst_device.kind == DeviceKind::kCpu || src_device.kind == DeviceKind::kCpu;
  if (host_involved || dst_device != src_device) {
    DeviceScope scope(device);
    check_cuda(cudaStreamSynchronize(stream), "waiting for the copy: ", describe(dst_device, src_device, bytes));
  }
}

void zero_bytes_hook(void* dst, const Device& device, size_t bytes) {
  PF_CHECK_ARG(device.kind == DeviceKind::kCuda, "zero_bytes_hook: ", device.to_string(), " is not a CUDA device");
  if (bytes == 0) return;
  DeviceScope scope(device.ordinal);
  check_cuda(cudaMemsetAsync(dst, 0, bytes, current_stream_for(device.ordinal)), "zeroing ", bytes, " bytes on ",
             device.to_string());
}

}  // namespace pf::cuda
