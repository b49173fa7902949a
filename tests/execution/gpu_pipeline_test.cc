// The pipeline executor on CUDA devices (PipelineOptions::devices, docs/EXECUTION.md "Running on
// GPUs").
//
// CPU-runnable: bad `devices` are refused at construction with kInvalidArgument naming the rank
// (wrong count, negative ordinal, CPU mixed with CUDA, an ordinal that does not exist, and, on a
// machine without a GPU, any CUDA device, naming it); explicit CPU devices are the CPU path bitwise.
//
// GPU (skip without one): 1f1b and zb-v with 2 and 4 ranks on device 0 (and on distinct devices with
// >= 2 GPUs) train a tiny MLP / GPT for 3 steps; the losses and parameters stay within
// kLossTol / kParamTol of the same pipeline on the CPU (the GPU kernels are fp32 but sum in another
// order than OpenBLAS). offload-host (pinned memory, copy stream) and recompute give bitwise the same
// results as no policy on the GPU.

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/backend/cuda_backend.h"
#include "runtime/comm/gpu_transport.h"
#include "runtime/execution/pipeline_trainer.h"
#include "tests/execution/test_util.h"

namespace pf::exec {
namespace {

using testing::data_for;

// |gpu - cpu| <= tol * max(1, |cpu|) for the loss of every step; per parameter element
// |gpu - cpu| <= kParamAbsTol + kParamRelTol * |cpu| after the last step (SGD with momentum).
constexpr double kLossTol = 1e-4;
constexpr double kParamAbsTol = 1e-4;
constexpr double kParamRelTol = 1e-3;

int gpu_count() { return probe_cuda().device_count; }

#define REQUIRE_GPUS(n)                                                                          \
  do {                                                                                           \
    const CudaAvailability avail = probe_cuda();                                                 \
    if (avail.device_count < (n))                                                                \
      GTEST_SKIP() << "needs " << (n) << " CUDA device(s), found " << avail.device_count         \
                   << (avail.reason.empty() ? "" : ": ") << avail.reason;                        \
  } while (0)

PipelineOptions options(const std::string& schedule, int ranks, int m = 4) {
  PipelineOptions o;
  o.schedule = schedule;
  o.ranks = ranks;
  o.base.micro_batches = m;
  o.base.seed = 5;
  o.base.optimizer.kind = OptimizerConfig::Kind::kSgd;
  o.base.optimizer.lr = 0.1f;
  o.base.optimizer.momentum = 0.9f;
  o.recv_timeout_seconds = 120;
  return o;
}

Error construction_error(const PipelineOptions& o) {
  try {
    PipelineTrainer t(testing::tiny_mlp(), o);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "construction did not fail";
  return Error(ErrorCode::kOk, "");
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// ---- CPU-runnable ----

TEST(GpuPipelineOptions, WrongDeviceCountNamesTheRank) {
  PipelineOptions o = options("1f1b", 3);
  o.devices = {Device::cpu(), Device::cpu()};  // one entry would mean every rank
  Error e = construction_error(o);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "rank 2 has no device")) << e.what();
  o = options("1f1b", 2);
  o.devices = {Device::cuda(0), Device::cuda(0), Device::cuda(0)};
  e = construction_error(o);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "there is no rank 2")) << e.what();
}

// One entry puts every rank on that device.
TEST(GpuPipelineOptions, OneDeviceMeansEveryRank) {
  PipelineOptions o = options("1f1b", 3);
  o.devices = {Device::cpu()};
  PipelineTrainer t(testing::tiny_mlp(), o);
  for (int r = 0; r < 3; ++r) EXPECT_EQ(t.parts().devices.device(r), Device::cpu());
  EXPECT_EQ(t.options().devices.size(), 3u);
  o.devices = {Device::cuda(0)};
  if (probe_cuda().device_count == 0) {
    EXPECT_TRUE(contains(construction_error(o).what(), "devices[0] (rank 0): cuda:0 is not available"));
  }
}

TEST(GpuPipelineOptions, NegativeOrdinalAndMixedDevicesNameTheRank) {
  PipelineOptions o = options("1f1b", 2);
  o.devices = {Device::cuda(0), Device::cuda(-1)};
  Error e = construction_error(o);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "devices[1] (rank 1)")) << e.what();
  o.devices = {Device::cuda(0), Device::cpu()};
  e = construction_error(o);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "devices[1] (rank 1) is cpu:0")) << e.what();
}

TEST(GpuPipelineOptions, UnknownOrdinalNamesTheRankAndDevice) {
  PipelineOptions o = options("1f1b", 2);
  o.devices = {Device::cuda(0), Device::cuda(97)};
  const Error e = construction_error(o);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  if (gpu_count() == 0) {
    // Without a GPU the first CUDA rank already fails, naming its device.
    EXPECT_TRUE(contains(e.what(), "devices[0] (rank 0): cuda:0 is not available")) << e.what();
  } else {
    EXPECT_TRUE(contains(e.what(), "devices[1] (rank 1): cuda:97 does not exist")) << e.what();
  }
}

TEST(GpuPipelineOptions, CudaDeviceWithoutGpuIsAClearError) {
  if (gpu_count() > 0) GTEST_SKIP() << "a GPU is visible";
  PipelineOptions o = options("zb-v", 2);
  o.devices = {Device::cuda(0), Device::cuda(0)};
  const Error e = construction_error(o);
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(contains(e.what(), "cuda:0")) << e.what();
  EXPECT_TRUE(contains(e.what(), "no CUDA device is visible")) << e.what();
}

TEST(GpuPipelineOptions, ExplicitCpuDevicesAreTheCpuPathBitwise) {
  PipelineOptions a = options("1f1b", 2);
  PipelineOptions b = a;
  b.devices = {Device::cpu(), Device::cpu()};
  PipelineTrainer ta(testing::tiny_mlp(), a), tb(testing::tiny_mlp(), b);
  EXPECT_FALSE(tb.plan().placement == RankPlacement::kGpu);
  EXPECT_EQ(tb.parts().group.gpu_transport(), nullptr);
  EXPECT_EQ(tb.parts().devices.device(1), Device::cpu());
  for (int step = 0; step < 2; ++step) {
    const Batch batch = data_for(ta.model(), 4, step);
    const StepResult ra = ta.step(batch);
    const StepResult rb = tb.step(batch);
    EXPECT_EQ(ra.loss, rb.loss);
    EXPECT_EQ(ra.grad_norm, rb.grad_norm);
  }
  std::string diff;
  EXPECT_TRUE(testing::parameters_bitwise_equal(ta.model(), tb.model(), &diff)) << diff;
}

// ---- GPU ----

struct TrainRun {
  std::vector<double> losses;
  std::vector<std::vector<float>> params;  // host copies, model order
  PipelineStats stats;
};

TrainRun train(bool gpt, const PipelineOptions& o, int steps = 3) {
  PipelineTrainer t(gpt ? testing::tiny_gpt(6) : testing::tiny_mlp(), o);
  TrainRun run;
  for (int step = 0; step < steps; ++step) run.losses.push_back(t.step(data_for(t.model(), o.base.micro_batches, step)).loss);
  for (Parameter* p : t.model().parameters()) {
    if (!o.devices.empty()) {
      EXPECT_EQ(p->value.device().kind, DeviceKind::kCuda) << p->name;
    }
    run.params.push_back(p->value.to_vector());  // host copy (the copy hook for CUDA tensors)
  }
  run.stats = t.last_stats();
  return run;
}

// "" when within tolerance.
std::string compare_close(const TrainRun& gpu, const TrainRun& cpu) {
  for (size_t i = 0; i < cpu.losses.size(); ++i)
    if (std::fabs(gpu.losses[i] - cpu.losses[i]) > kLossTol * std::max(1.0, std::fabs(cpu.losses[i])))
      return "loss of step " + std::to_string(i) + ": gpu " + std::to_string(gpu.losses[i]) + ", cpu " +
             std::to_string(cpu.losses[i]);
  if (gpu.params.size() != cpu.params.size()) return "parameter count";
  for (size_t p = 0; p < cpu.params.size(); ++p) {
    if (gpu.params[p].size() != cpu.params[p].size()) return "parameter " + std::to_string(p) + " size";
    for (size_t i = 0; i < cpu.params[p].size(); ++i) {
      const double a = gpu.params[p][i], b = cpu.params[p][i];
      if (!(std::fabs(a - b) <= kParamAbsTol + kParamRelTol * std::fabs(b)))
        return "parameter " + std::to_string(p) + " element " + std::to_string(i) + ": gpu " + std::to_string(a) +
               ", cpu " + std::to_string(b);
    }
  }
  return "";
}

std::string compare_bitwise(const TrainRun& a, const TrainRun& b) {
  for (size_t i = 0; i < a.losses.size(); ++i)
    if (a.losses[i] != b.losses[i]) return "loss of step " + std::to_string(i);
  for (size_t p = 0; p < a.params.size(); ++p)
    if (a.params[p].size() != b.params[p].size() ||
        std::memcmp(a.params[p].data(), b.params[p].data(), a.params[p].size() * sizeof(float)) != 0)
      return "parameter " + std::to_string(p);
  return "";
}

struct Case {
  const char* schedule;
  int ranks;
  bool gpt;
};

std::string name_of(const Case& c) {
  return std::string(c.schedule) + " p=" + std::to_string(c.ranks) + (c.gpt ? " gpt" : " mlp");
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {{"1f1b", 2, false}, {"1f1b", 4, false}, {"zb-v", 2, false},
                                        {"zb-v", 4, false}, {"1f1b", 2, true},  {"1f1b", 4, true},
                                        {"zb-v", 2, true}};
  return all;
}

TEST(GpuPipeline, RanksSharingDevice0MatchTheCpuPipeline) {
  REQUIRE_GPUS(1);
  for (const Case& c : cases()) {
    SCOPED_TRACE(name_of(c));
    PipelineOptions o = options(c.schedule, c.ranks);
    const TrainRun cpu = train(c.gpt, o);
    o.devices.assign(static_cast<size_t>(c.ranks), Device::cuda(0));
    const TrainRun gpu = train(c.gpt, o);
    EXPECT_EQ(compare_close(gpu, cpu), "");
  }
}

TEST(GpuPipeline, RanksOnDistinctDevicesMatchTheCpuPipeline) {
  REQUIRE_GPUS(2);
  const int n = gpu_count();
  for (const Case& c : cases()) {
    SCOPED_TRACE(name_of(c));
    PipelineOptions o = options(c.schedule, c.ranks);
    const TrainRun cpu = train(c.gpt, o);
    for (int r = 0; r < c.ranks; ++r) o.devices.push_back(Device::cuda(r % n));  // NCCL between neighbours
    const TrainRun gpu = train(c.gpt, o);
    EXPECT_EQ(compare_close(gpu, cpu), "");
  }
}

TEST(GpuPipeline, TransportUsesNcclOnlyBetweenDistinctDevices) {
  REQUIRE_GPUS(1);
  PipelineOptions o = options("1f1b", 4);
  o.devices.assign(4, Device::cuda(0));
  PipelineTrainer same(testing::tiny_mlp(), o);
  ASSERT_NE(same.parts().group.gpu_transport(), nullptr);
  EXPECT_TRUE(same.plan().placement == RankPlacement::kGpu);
  EXPECT_EQ(same.parts().group.gpu_transport()->nccl_pair_count(), 0);
  EXPECT_FALSE(same.parts().group.gpu_transport()->uses_nccl(0, 1));
  if (gpu_count() >= 2) {
    o.devices = {Device::cuda(0), Device::cuda(0), Device::cuda(1), Device::cuda(1)};
    PipelineTrainer split(testing::tiny_mlp(), o);
    EXPECT_EQ(split.parts().group.gpu_transport()->nccl_pair_count(), 1);  // ranks 1 <-> 2 only
    EXPECT_TRUE(split.parts().group.gpu_transport()->uses_nccl(1, 2));
    EXPECT_FALSE(split.parts().group.gpu_transport()->uses_nccl(2, 3));
    split.step(data_for(split.model(), 4, 0));
    EXPECT_EQ(split.parts().group.gpu_transport()->pending_messages(), 0u);
  }
}

TEST(GpuPipeline, OffloadHostAndRecomputeAreBitwiseOnTheGpu) {
  REQUIRE_GPUS(1);
  for (const Case& c : {Case{"1f1b", 4, false}, Case{"zb-v", 2, false}, Case{"1f1b", 2, true}}) {
    SCOPED_TRACE(name_of(c));
    PipelineOptions o = options(c.schedule, c.ranks, 8);
    o.devices.assign(static_cast<size_t>(c.ranks), Device::cuda(0));
    const TrainRun none = train(c.gpt, o);
    o.activation_policy = "offload-host";
    const TrainRun host = train(c.gpt, o);
    EXPECT_EQ(compare_bitwise(host, none), "");
    EXPECT_GT(host.stats.offloaded_bytes, 0u);
    size_t host_peak = 0;
    for (const auto& r : host.stats.ranks) host_peak = std::max(host_peak, r.host_peak_bytes);
    EXPECT_GT(host_peak, 0u);
    o.activation_policy = "recompute";
    EXPECT_EQ(compare_bitwise(train(c.gpt, o), none), "");
  }
}

TEST(GpuPipeline, FileTierAndBalanceAreUnimplementedOnGpus) {
  REQUIRE_GPUS(1);
  PipelineOptions o = options("1f1b", 2);
  o.devices = {Device::cuda(0), Device::cuda(0)};
  o.activation_policy = "offload-file";
  Error e = construction_error(o);
  EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
  EXPECT_TRUE(contains(e.what(), "offload-file")) << e.what();
  o.activation_policy = "balance";
  e = construction_error(o);
  EXPECT_EQ(e.code(), ErrorCode::kUnimplemented);
}

TEST(GpuPipeline, AFailingStepLeavesTheTrainerUsable) {
  REQUIRE_GPUS(1);
  testing::ProbeLayer *p0 = nullptr, *p1 = nullptr;
  PipelineOptions o = options("1f1b", 2);
  o.devices = {Device::cuda(0), Device::cuda(0)};
  PipelineTrainer t(testing::probe_model(&p0, &p1), o);
  const Batch batch = testing::teacher_batch(8, 8, 4, 3);
  p1->fail_backward = true;
  try {
    t.step(batch);
    ADD_FAILURE() << "the step did not fail";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kCallbackError) << e.what();
  }
  EXPECT_EQ(t.metrics().step, 0);
  p1->fail_backward = false;
  const StepResult r = t.step(batch);
  EXPECT_TRUE(std::isfinite(r.loss));
  EXPECT_EQ(t.metrics().step, 1);
}

}  // namespace
}  // namespace pf::exec
