// The calling thread's current CUDA device, set for a scope. CUDA keeps the current device per host
// thread, so every pipeline stage worker opens a DeviceScope for its own GPU before it allocates or
// launches anything; library code that touches a specific device (the caching allocator, the
// transport, copies) opens one too, so it never depends on what the caller had set.
#pragma once

namespace pf::cuda {

// The thread's current device (cudaGetDevice); throws kCudaError.
int current_device();
// Number of devices visible to the process; 0 (never an error) without a driver or GPU.
int device_count();
// Throws kInvalidArgument naming `what` when `device` is not an ordinal of a visible device.
void check_device_ordinal(int device, const char* what);

class DeviceScope {
 public:
  // Makes `device` current for this thread (cudaSetDevice only when it differs); throws
  // kInvalidArgument for an ordinal that does not exist and kCudaError when CUDA fails.
  explicit DeviceScope(int device);
  // Restores the previous device; never throws (a failure is logged).
  ~DeviceScope();
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_;
  int device_;
};

}  // namespace pf::cuda
