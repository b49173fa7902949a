// pf_trainer_get_parameter / set_parameter and pf_trainer_memory_stats on a trainer whose model is
// on a device, tested on the CPU: a stand-in "cuda" device is registered whose memory the host
// cannot touch (its addresses are PROT_NONE pages; only its copy hook reaches the bytes, kept
// elsewhere), so a host memcpy through a device pointer crashes this test instead of passing. The
// model is moved there with Model::to_device, as SequentialTrainer allows ("the trainer computes on
// the model's device"). With a real GPU, RealGpu does the same on cuda:0 (skipped without one).
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "c_api/handles.h"
#include "runtime/backend/cuda_backend.h"
#include "runtime/tensor/allocator.h"
#include "runtime/tensor/memory_tracker.h"
#include "tests/c_api/test_util.h"

namespace {

using pftest::Checksum;
using pftest::MakeRows;
using pftest::Views;

// ---- the stand-in device ------------------------------------------------------------------------

constexpr size_t kArenaBytes = size_t{64} << 20;
char* g_device = nullptr;   // what tensors see: PROT_NONE
char* g_backing = nullptr;  // where the bytes are
size_t g_next = 0;
std::atomic<int> g_copies{0};

char* backing(const void* device_pointer) {
  const char* p = static_cast<const char*>(device_pointer);
  EXPECT_TRUE(p >= g_device && p < g_device + kArenaBytes) << "not a stand-in device pointer";
  return g_backing + (p - g_device);
}

class StandInAllocator final : public pf::Allocator {
 public:
  void* allocate(size_t bytes) override {
    const size_t at = g_next;
    g_next += (bytes + 63) / 64 * 64;
    if (g_next > kArenaBytes) throw std::bad_alloc();
    return g_device + at;
  }
  void deallocate(void*, size_t) override {}
};

pf::Allocator& StandIn(int) {
  static StandInAllocator allocator;
  return allocator;
}

void Copy(void* dst, const pf::Device& dst_device, const void* src, const pf::Device& src_device, size_t bytes) {
  g_copies += 1;
  char* to = dst_device.kind == pf::DeviceKind::kCpu ? static_cast<char*>(dst) : backing(dst);
  const char* from = src_device.kind == pf::DeviceKind::kCpu ? static_cast<const char*>(src) : backing(src);
  std::memcpy(to, from, bytes);
}

void Zero(void* dst, const pf::Device&, size_t bytes) { std::memset(backing(dst), 0, bytes); }

void InstallStandInDevice() {
  if (g_device != nullptr) return;
  void* reserved = mmap(nullptr, kArenaBytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(reserved, MAP_FAILED);
  void* bytes = mmap(nullptr, kArenaBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(bytes, MAP_FAILED);
  g_device = static_cast<char*>(reserved);
  g_backing = static_cast<char*>(bytes);
  pf::register_device_allocator(pf::DeviceKind::kCuda, &StandIn);
  pf::register_device_memory_ops(pf::DeviceKind::kCuda, pf::DeviceMemoryOps{&Copy, &Zero});
}

// ---- helpers ------------------------------------------------------------------------------------

std::vector<float> Get(const pf_trainer* trainer, const char* name, size_t n) {
  std::vector<float> values(n, -1.0f);
  EXPECT_PF_OK(pf_trainer_get_parameter(trainer, name, values.data(), values.size()));
  return values;
}

int64_t Parameters(const pf_memory_stats& s) { return s.parameters_current; }

pf_memory_stats MemoryStats(const pf_trainer* trainer) {
  pf_memory_stats s;
  std::memset(&s, 0, sizeof(s));
  s.struct_size = sizeof(s);
  EXPECT_PF_OK(pf_trainer_memory_stats(trainer, &s));
  return s;
}

int64_t TrackerParameters(const pf::Device& device) {
  return pf::memory_tracker(device).stats().current[static_cast<int>(pf::MemoryCategory::kParameters)];
}

TEST(DeviceAccess, ParametersOnADeviceAreCopiedThroughTheHost) {
  // A real GPU gets RealGpu instead: the stand-in would replace its runtime's hooks.
  if (pf::probe_cuda().device_count > 0) GTEST_SKIP() << "a CUDA device is present: see RealGpu";
  InstallStandInDevice();
  pf_model* model = pftest::MakeMlp();
  pf_trainer_options options = pftest::Options(2);
  pf_trainer* trainer = nullptr;
  ASSERT_PF_OK(pf_trainer_create(model, &options, &trainer));
  const pftest::Rows rows = MakeRows(0, 8);
  Views views(rows);
  ASSERT_PF_OK(pf_trainer_step(trainer, &views.inputs, &views.targets, nullptr));
  const size_t n = static_cast<size_t>(pftest::kFeatures * 16);  // fc0.weight [8, 16] or [16, 8]
  const std::vector<float> on_host = Get(trainer, "fc0.weight", n);
  const std::string checksum = Checksum(trainer);

  const pf::Device device = pf::Device::cuda(0);
  const int64_t device_before = TrackerParameters(device);
  model->model->to_device(device);
  pf::Parameter* p = model->model->find_parameter("fc0.weight");
  ASSERT_NE(p, nullptr);
  ASSERT_EQ(p->value.device(), device);

  // Reading goes through the device's copy hook and gives the same values.
  const int copies_before = g_copies;
  EXPECT_EQ(Get(trainer, "fc0.weight", n), on_host);
  EXPECT_GT(g_copies, copies_before);
  EXPECT_EQ(Checksum(trainer), checksum);

  // Writing lands in device memory (read back behind the C API, through the hook).
  std::vector<float> doubled = on_host;
  for (float& v : doubled) v *= 2.0f;
  ASSERT_PF_OK(pf_trainer_set_parameter(trainer, "fc0.weight", doubled.data(), doubled.size()));
  EXPECT_EQ(p->value.to_device(pf::Device::cpu()).to_vector(), doubled);
  EXPECT_EQ(Get(trainer, "fc0.weight", n), doubled);
  EXPECT_NE(Checksum(trainer), checksum);

  // The count is still checked before anything is copied.
  std::vector<float> short_buffer(n - 1, 3.0f);
  EXPECT_PF_ERROR(pf_trainer_get_parameter(trainer, "fc0.weight", short_buffer.data(), short_buffer.size()),
                  PF_INVALID_ARGUMENT, "count");
  EXPECT_EQ(short_buffer, std::vector<float>(n - 1, 3.0f));

  // Memory statistics are the device's, where the parameters are now, not the CPU's.
  const pf_memory_stats stats = MemoryStats(trainer);
  EXPECT_GT(Parameters(stats), 0);
  EXPECT_EQ(Parameters(stats), TrackerParameters(device));
  EXPECT_GT(TrackerParameters(device), device_before);
  EXPECT_EQ(stats.total_current, pf::memory_tracker(device).stats().total_current);

  pf_trainer_destroy(trainer);
  pf_model_destroy(model);
}

// A CPU trainer still reports the CPU's accounting.
TEST(DeviceAccess, CpuTrainerReportsTheCpu) {
  pf_model* model = pftest::MakeMlp();
  pf_trainer* trainer = nullptr;
  ASSERT_PF_OK(pf_trainer_create(model, nullptr, &trainer));
  const pf_memory_stats stats = MemoryStats(trainer);
  EXPECT_GT(Parameters(stats), 0);
  EXPECT_EQ(Parameters(stats), TrackerParameters(pf::Device::cpu()));
  pf_trainer_destroy(trainer);
  pf_model_destroy(model);
}

// On a real GPU (skipped without one): the same round trip for the sequential trainer on cuda:0 and
// a pipeline with both ranks there, and memory statistics from cuda:0's accounting.
TEST(DeviceAccess, RealGpu) {
  if (pf::probe_cuda().device_count == 0) GTEST_SKIP() << "no CUDA device";
  for (const char* schedule : {static_cast<const char*>(nullptr), "1f1b"}) {
    pf_model* model = pftest::MakeMlp();
    pf_trainer_options options = pftest::Options(2);
    options.devices = "cuda:0";
    options.schedule = schedule;
    options.ranks = schedule ? 2 : 0;
    pf_trainer* trainer = nullptr;
    ASSERT_PF_OK(pf_trainer_create(model, &options, &trainer));
    const pftest::Rows rows = MakeRows(0, 8);
    Views views(rows);
    ASSERT_PF_OK(pf_trainer_step(trainer, &views.inputs, &views.targets, nullptr));
    const size_t n = static_cast<size_t>(pftest::kFeatures * 16);
    std::vector<float> values = Get(trainer, "fc0.weight", n);
    for (float& v : values) v += 1.0f;
    ASSERT_PF_OK(pf_trainer_set_parameter(trainer, "fc0.weight", values.data(), values.size()));
    EXPECT_EQ(Get(trainer, "fc0.weight", n), values);
    const pf_memory_stats stats = MemoryStats(trainer);
    EXPECT_GT(Parameters(stats), 0);
    EXPECT_EQ(Parameters(stats), TrackerParameters(pf::Device::cuda(0)));
    pf_trainer_destroy(trainer);
    pf_model_destroy(model);
  }
}

}  // namespace
