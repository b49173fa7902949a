// CPU-runnable: the device registration hooks of //runtime/tensor, with a fake "CUDA" device whose
// memory is host memory. Without a registered copy hook every host-side Tensor operation on a
// device tensor must refuse (kInvalidArgument naming the device) instead of touching its memory;
// with one, they must go through it. This binary does not link the CUDA runtime.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "tests/util/catch_error.h"
#include "runtime/tensor/allocator.h"
#include "runtime/tensor/memory_tracker.h"
#include "runtime/tensor/tensor.h"

namespace pf {
namespace {

class FakeDeviceAllocator : public Allocator {
 public:
  void* allocate(size_t bytes) override {
    ++allocations;
    return std::malloc(bytes == 0 ? 1 : bytes);
  }
  void deallocate(void* data, size_t) override {
    ++frees;
    std::free(data);
  }
  int allocations = 0;
  int frees = 0;
};

FakeDeviceAllocator& fake_allocator() {
  static FakeDeviceAllocator* a = new FakeDeviceAllocator();
  return *a;
}
Allocator& fake_allocator_for(int) { return fake_allocator(); }

int g_copies = 0;
int g_zeroes = 0;
void fake_copy(void* dst, const Device&, const void* src, const Device&, size_t bytes) {
  ++g_copies;
  std::memcpy(dst, src, bytes);
}
void fake_zero(void* dst, const Device&, size_t bytes) {
  ++g_zeroes;
  std::memset(dst, 0, bytes);
}

using ::pftest::catch_error;

// Test order matters (the registry is process-wide): gtest runs tests of a file in order.
TEST(DeviceHooks, WithoutAnAllocatorCudaTensorsAreUnimplemented) {
  Error e = catch_error([] { Tensor::empty({2}, DType::kF32, Device::cuda(0)); });
  EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
  EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
}

TEST(DeviceHooks, WithoutCopyHooksHostOperationsRefuseAndNameTheDevice) {
  register_device_allocator(DeviceKind::kCuda, &fake_allocator_for);
  register_device_memory_ops(DeviceKind::kCuda, DeviceMemoryOps{});
  Tensor t = Tensor::empty({2, 3}, DType::kF32, Device::cuda(1));
  EXPECT_EQ(t.device(), Device::cuda(1));
  Tensor host = Tensor::from_vector({2, 3}, {1, 2, 3, 4, 5, 6});
  auto expect_refusal = [](auto f, const char* op) {
    Error e = catch_error(f);
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument) << op;
    const std::string m = e.what();
    EXPECT_NE(m.find("cuda:1"), std::string::npos) << m;
    EXPECT_NE(m.find(op), std::string::npos) << m;
  };
  expect_refusal([&] { t.fill(1.0f); }, "Tensor::fill");
  expect_refusal([&] { t.to_vector(); }, "Tensor::to_device");
  expect_refusal([&] { t.clone(); }, "Tensor::clone");
  expect_refusal([&] { t.copy_from(host); }, "Tensor::copy_from");
  expect_refusal([&] { host.copy_from(t); }, "Tensor::copy_from");
  expect_refusal([&] { host.to_device(Device::cuda(1)); }, "Tensor::to_device");
  expect_refusal([&] { t.to(DType::kBF16); }, "Tensor::to_device");
  expect_refusal([&] { Tensor::zeros({4}, DType::kF32, Device::cuda(1)); }, "Tensor::zeros");
}

TEST(DeviceHooks, HostOperationsGoThroughTheRegisteredHooks) {
  register_device_allocator(DeviceKind::kCuda, &fake_allocator_for);
  register_device_memory_ops(DeviceKind::kCuda, DeviceMemoryOps{&fake_copy, &fake_zero});
  g_copies = g_zeroes = 0;
  Tensor host = Tensor::from_vector({2, 3}, {1, 2, 3, 4, 5, -6.5f});
  Tensor dev = host.to_device(Device::cuda(0));
  EXPECT_EQ(dev.device(), Device::cuda(0));
  EXPECT_EQ(g_copies, 1);
  EXPECT_EQ(dev.to_vector(), host.to_vector());
  EXPECT_EQ(g_copies, 2);

  Tensor z = Tensor::zeros({3}, DType::kF32, Device::cuda(0));
  EXPECT_EQ(g_zeroes, 1);
  EXPECT_EQ(z.to_vector(), std::vector<float>({0, 0, 0}));

  z.fill(2.5f);
  EXPECT_EQ(z.to_vector(), std::vector<float>({2.5f, 2.5f, 2.5f}));

  Tensor c = dev.clone();
  EXPECT_EQ(c.device(), Device::cuda(0));
  EXPECT_NE(c.storage(), dev.storage());
  EXPECT_EQ(c.to_vector(), host.to_vector());

  Tensor b = dev.to(DType::kBF16);  // staged through the host
  EXPECT_EQ(b.device(), Device::cuda(0));
  EXPECT_EQ(b.dtype(), DType::kBF16);
  EXPECT_EQ(b.to_vector(), host.to(DType::kBF16).to_vector());

  Tensor back = Tensor::zeros({2, 3});
  back.copy_from(dev);
  EXPECT_EQ(back.to_vector(), host.to_vector());

  // Same-device to_device still copies.
  Tensor again = dev.to_device(Device::cuda(0));
  EXPECT_NE(again.storage(), dev.storage());
}

TEST(DeviceHooks, DeviceTensorsAreChargedToTheirDevicesTracker) {
  register_device_allocator(DeviceKind::kCuda, &fake_allocator_for);
  MemoryStats before = memory_tracker(Device::cuda(3)).stats();
  MemoryStats cpu_before = memory_tracker(Device::cpu()).stats();
  {
    MemoryCategoryScope scope(MemoryCategory::kActivations);
    Tensor t = Tensor::empty({256}, DType::kF32, Device::cuda(3));
    MemoryStats during = memory_tracker(Device::cuda(3)).stats();
    const int a = static_cast<int>(MemoryCategory::kActivations);
    EXPECT_EQ(during.current[a] - before.current[a], 1024);
    EXPECT_EQ(during.total_current - before.total_current, 1024);
    EXPECT_GE(during.peak[a], before.current[a] + 1024);
    EXPECT_EQ(memory_tracker(Device::cpu()).stats().total_current, cpu_before.total_current);
  }
  EXPECT_EQ(memory_tracker(Device::cuda(3)).stats().total_current, before.total_current);
}

TEST(DeviceHooks, TheCpuCannotBeReplaced) {
  EXPECT_THROW(register_device_allocator(DeviceKind::kCpu, &fake_allocator_for), Error);
  EXPECT_THROW(register_device_memory_ops(DeviceKind::kCpu, DeviceMemoryOps{}), Error);
}

}  // namespace
}  // namespace pf
