// CPU-runnable: status conversion needs no GPU (the libraries' string look-ups work without one),
// and on machines without a GPU every entry point of the device runtime must fail with a pf::Error.
#include <gtest/gtest.h>

#include <string>

#include "runtime/core/error.h"
#include "tests/util/catch_error.h"
#include "runtime/devices/cuda/caching_allocator.h"
#include "runtime/devices/cuda/cuda_status.h"
#include "runtime/devices/cuda/device_scope.h"
#include "runtime/comm/nccl_transport.h"
#include "runtime/devices/cuda/pinned_host.h"
#include "runtime/devices/cuda/stream.h"
#include "runtime/backend/cuda_backend.h"
#include "runtime/tensor/tensor.h"

namespace pf::cuda {
namespace {

using ::pftest::catch_error;

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(CudaStatus, SuccessDoesNotThrow) {
  EXPECT_NO_THROW(check_cuda(cudaSuccess, "nothing"));
  EXPECT_NO_THROW(check_cublas(CUBLAS_STATUS_SUCCESS, "nothing"));
  EXPECT_NO_THROW(check_nccl(ncclSuccess, "nothing"));
}

TEST(CudaStatus, OutOfMemoryMapsToOutOfMemoryWithContextAndLibraryMessage) {
  Error e = catch_error([] { check_cuda(cudaErrorMemoryAllocation, "allocating ", 4096, " bytes on cuda:", 1); });
  EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory);
  const std::string m = e.what();
  EXPECT_TRUE(contains(m, "allocating 4096 bytes on cuda:1: ")) << m;
  EXPECT_TRUE(contains(m, "cudaErrorMemoryAllocation")) << m;
  EXPECT_TRUE(contains(m, cudaGetErrorString(cudaErrorMemoryAllocation))) << m;
}

TEST(CudaStatus, OtherCudaErrorsAreCudaErrors) {
  Error e = catch_error([] { check_cuda(cudaErrorInvalidValue, "copying a tensor"); });
  EXPECT_EQ(e.code(), ErrorCode::kCudaError);
  EXPECT_EQ(std::string(e.what()),
            std::string("copying a tensor: CUDA error cudaErrorInvalidValue (") +
                cudaGetErrorString(cudaErrorInvalidValue) + ")");
  EXPECT_EQ(cuda_error_code(cudaErrorNoDevice), ErrorCode::kCudaError);
  EXPECT_EQ(cuda_error_message(cudaErrorNoDevice, ""),
            std::string("CUDA error cudaErrorNoDevice (") + cudaGetErrorString(cudaErrorNoDevice) + ")");
}

TEST(CudaStatus, CublasStatusesCarryTheirNames) {
  Error e = catch_error([] { check_cublas(CUBLAS_STATUS_NOT_INITIALIZED, "sgemm on cuda:0"); });
  EXPECT_EQ(e.code(), ErrorCode::kCublasError);
  EXPECT_TRUE(contains(e.what(), "sgemm on cuda:0: cuBLAS error CUBLAS_STATUS_NOT_INITIALIZED (")) << e.what();
  EXPECT_TRUE(contains(e.what(), cublasGetStatusString(CUBLAS_STATUS_NOT_INITIALIZED))) << e.what();
  Error oom = catch_error([] { check_cublas(CUBLAS_STATUS_ALLOC_FAILED, "workspace"); });
  EXPECT_EQ(oom.code(), ErrorCode::kOutOfMemory);
  EXPECT_TRUE(contains(oom.what(), "CUBLAS_STATUS_ALLOC_FAILED")) << oom.what();
}

TEST(CudaStatus, NcclResultsCarryTheirNames) {
  Error e = catch_error([] { check_nccl(ncclInvalidArgument, "rank ", 2, ": sending"); });
  EXPECT_EQ(e.code(), ErrorCode::kNcclError);
  EXPECT_TRUE(contains(e.what(), "rank 2: sending: NCCL error ncclInvalidArgument (")) << e.what();
  EXPECT_TRUE(contains(e.what(), ncclGetErrorString(ncclInvalidArgument))) << e.what();
  EXPECT_TRUE(contains(nccl_error_message(ncclRemoteError, ""), "ncclRemoteError")) << nccl_error_message(ncclRemoteError, "");
}

struct Probe {
  int* formatted;
};
std::ostream& operator<<(std::ostream& out, const Probe& p) {
  ++*p.formatted;
  return out << "probe";
}

TEST(CudaStatus, ContextIsOnlyFormattedOnFailure) {
  int formatted = 0;
  EXPECT_NO_THROW(check_cuda(cudaSuccess, Probe{&formatted}));
  EXPECT_NO_THROW(check_nccl(ncclSuccess, Probe{&formatted}));
  EXPECT_EQ(formatted, 0);
  Error e = catch_error([&] { check_cuda(cudaErrorInvalidValue, "a ", Probe{&formatted}); });
  EXPECT_EQ(formatted, 1);
  EXPECT_TRUE(contains(e.what(), "a probe: CUDA error")) << e.what();
}

TEST(CudaStatus, RoundingOfTheCachingAllocator) {
  EXPECT_EQ(CachingAllocator::round_size(0), 512u);
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(1 << 20), static_cast<size_t>(1 << 20));
}

// ---- machines without a GPU: clean errors, no crash ------------------------------------------------

class WithoutGpu : public ::testing::Test {
 protected:
  void SetUp() override {
    if (probe_cuda().device_count > 0) GTEST_SKIP() << "this machine has a GPU; these tests are for machines without";
  }
};

TEST_F(WithoutGpu, DeviceCountIsZeroAndScopesRefuse) {
  EXPECT_EQ(device_count(), 0);
  Error e = catch_error([] { DeviceScope scope(0); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "cuda:0")) << e.what();
}

TEST_F(WithoutGpu, CudaTensorsCannotBeAllocated) {
  Error e = catch_error([] { Tensor::empty({4}, DType::kF32, Device::cuda(0)); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "cuda:0")) << e.what();
}

TEST_F(WithoutGpu, PinnedMemoryFailsWithACudaError) {
  Error e = catch_error([] { PinnedHostBuffer buffer(1024); });
  EXPECT_TRUE(e.code() == ErrorCode::kCudaError || e.code() == ErrorCode::kOutOfMemory) << e.what();
  EXPECT_TRUE(contains(e.what(), "1024 bytes")) << e.what();
  PinnedHostBuffer empty(0);  // no CUDA call
  EXPECT_TRUE(empty.empty());
  EXPECT_FALSE(is_pinned_host_memory(&e));
}

TEST_F(WithoutGpu, StreamsAndTransportsRefuse) {
  EXPECT_EQ(catch_error([] { CudaStream s(0); }).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(catch_error([] { CudaEvent e(0); }).code(), ErrorCode::kInvalidArgument);
  Error t = catch_error([] { comm::NcclTransport transport({0, 1}); });
  EXPECT_EQ(t.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(t.what(), "cuda:0")) << t.what();
}

}  // namespace
}  // namespace pf::cuda
