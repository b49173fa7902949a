// ActivationStore with CUDA tensors: the host tier goes through pinned memory on the store's copy
// stream (ordered by events) and gives back the same bytes and the same view sharing, on the
// caller's device; the file tier refuses CUDA tensors with kUnimplemented. GPU cases skip without
// a GPU.

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/devices/cuda/stream.h"
#include "runtime/backend/cuda_backend.h"
#include "runtime/memory/activation_store.h"

namespace pf::mem {
namespace {

#define REQUIRE_GPU()                                                                         \
  do {                                                                                        \
    const CudaAvailability avail = probe_cuda();                                              \
    if (avail.device_count < 1) GTEST_SKIP() << "needs a CUDA device: " << avail.reason;    \
  } while (0)

std::vector<float> values(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * static_cast<float>(i) - 3.0f + 1.0f / static_cast<float>(i + 3);
  return v;
}

// A context on cuda:0 with a tensor, two views of it and an i32 tensor.
struct GpuFixture {
  SavedContext a, b;
  Tensor big, ids;
  std::vector<float> big_host = values(4096, 0.37f);
  GpuFixture() {
    const Device d = Device::cuda(0);
    big = Tensor::from_vector({1024, 4}, big_host).to_device(d);
    ids = Tensor::from_ints({3}, {7, -1, 42}).to_device(d);
    a.save("x", big);
    a.save("rows", big.slice_rows(10, 20));
    a.child(0).save("flat", big.reshape({4096}));
    b.save("ids", ids);
  }
};

TEST(GpuActivationStore, HostTierRoundTripIsBitwiseThroughPinnedMemory) {
  REQUIRE_GPU();
  cuda::CudaStream compute(0);
  cuda::CurrentStreamScope scope(compute);
  GpuFixture f;
  ActivationStore store({Tier::kHost, "", "gpu"});
  for (int round = 0; round < 3; ++round) {  // spare pinned buffers are reused
    const size_t moved = store.offload(1, {&f.a, &f.b});
    EXPECT_EQ(moved, 4096 * 4 + 3 * 4u);
    EXPECT_FALSE(f.a.get("x").defined());
    EXPECT_EQ(store.stats().host_bytes, moved);
    store.prefetch(1);
    store.restore(1);
    EXPECT_FALSE(store.holds(1));
    EXPECT_EQ(f.a.get("x").device(), Device::cuda(0));
    EXPECT_EQ(f.a.get("x").to_vector(), f.big_host);
    EXPECT_EQ(f.a.get("rows").shape(), (Shape{10, 4}));
    EXPECT_EQ(f.a.get("rows").to_vector(), std::vector<float>(f.big_host.begin() + 40, f.big_host.begin() + 80));
    EXPECT_EQ(f.a.child(0).get("flat").to_vector(), f.big_host);
    EXPECT_EQ(f.a.get("x").storage(), f.a.get("rows").storage());
    EXPECT_EQ(f.a.get("x").storage(), f.a.child(0).get("flat").storage());
    const Tensor ids_host = f.b.get("ids").to_device(Device::cpu());
    EXPECT_EQ(ids_host.i32()[0], 7);
    EXPECT_EQ(ids_host.i32()[1], -1);
    EXPECT_EQ(ids_host.i32()[2], 42);
  }
  store.wait_all();
  const StoreStats s = store.stats();
  EXPECT_EQ(s.host_bytes, 0u);
  EXPECT_EQ(s.offloaded_bytes, 3 * (4096 * 4 + 3 * 4u));
  store.clear();
}

TEST(GpuActivationStore, ClearDropsOffloadedContextsWithoutRestore) {
  REQUIRE_GPU();
  cuda::CudaStream compute(0);
  cuda::CurrentStreamScope scope(compute);
  GpuFixture f;
  ActivationStore store({Tier::kHost, "", "gpu"});
  store.offload(1, {&f.a});
  store.offload(2, {&f.b});
  store.prefetch(2);
  store.clear();
  EXPECT_FALSE(store.holds(1));
  EXPECT_FALSE(store.holds(2));
  EXPECT_EQ(store.stats().host_bytes, 0u);
}

TEST(GpuActivationStore, FileTierRefusesCudaTensors) {
  REQUIRE_GPU();
  GpuFixture f;
  ActivationStore store({Tier::kFile, "", "gpu"});
  try {
    store.offload(1, {&f.a});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
    EXPECT_NE(std::string(e.what()).find("cuda:0"), std::string::npos) << e.what();
  }
  // Nothing was taken out of the context.
  EXPECT_TRUE(f.a.get("x").defined());
  EXPECT_FALSE(store.holds(1));
}

TEST(GpuActivationStore, CpuContextsStillWorkInTheSameBinary) {
  SavedContext c;
  c.save("x", Tensor::from_vector({3}, {1.5f, -2.0f, 8.0f}));
  ActivationStore store({Tier::kHost, "", "cpu"});
  store.offload(1, {&c});
  store.restore(1);
  EXPECT_EQ(c.get("x").to_vector(), (std::vector<float>{1.5f, -2.0f, 8.0f}));
  EXPECT_EQ(c.get("x").device(), Device::cpu());
}

}  // namespace
}  // namespace pf::mem
