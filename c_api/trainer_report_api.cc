// pf_trainer_* that report on a trainer: memory per category, where its process stands, and the
// last step's per-rank statistics, bubble rate and timeline (Chrome trace, SVG).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstring>
#include <string>
#include <vector>

#include "c_api/guard.h"
#include "c_api/handles.h"
#include "c_api/struct_io.h"
#include "runtime/checkpoint/parameter_checksum.h"
#include "runtime/checkpoint/sharded_checkpoint.h"
#include "runtime/run/checkpoint_series.h"
#include "runtime/schedules/timeline.h"
#include "runtime/tensor/allocator.h"
#include "runtime/tensor/device.h"
#include "runtime/tensor/memory_tracker.h"

namespace {

using pf::capi::guard;
using pf::capi::require;

constexpr size_t kMemoryStatsV1Size = sizeof(pf_memory_stats);
static_assert(kMemoryStatsV1Size == 120, "the v1 pf_memory_stats layout changed");
static_assert(pf::kNumMemoryCategories == 6, "pf_memory_stats needs a field pair for a new category");

// The devices whose accounting pf_trainer_memory_stats reports (each once, in first-use order).
std::vector<pf::Device> trainer_devices(const pf_trainer& trainer) {
  std::vector<pf::Device> devices;
  auto add = [&](const pf::Device& d) {
    if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
  };
  if (trainer.pipeline() != nullptr) {
    for (int r = 0; r < trainer.pipeline()->schedule().num_ranks(); ++r)
      if (trainer.pipeline()->parts().ownership.is_local_rank(r)) add(trainer.pipeline()->parts().devices.device(r));
  } else {
    add(trainer.trainer->model().device());
  }
  return devices;
}

}  // namespace

extern "C" {

pf_status* pf_trainer_memory_stats(const pf_trainer* trainer, pf_memory_stats* out) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    require(out, "out");
    pf::capi::check_out_struct(*out, kMemoryStatsV1Size, "out", "pf_memory_stats");
    pf::MemoryStats s;
    for (const pf::Device& device : trainer_devices(*trainer)) {
      const pf::MemoryStats d = pf::memory_tracker(device).stats();
      for (int c = 0; c < pf::kNumMemoryCategories; ++c) {
        s.current[c] += d.current[c];
        s.peak[c] += d.peak[c];
      }
      s.total_current += d.total_current;
      s.total_peak += d.total_peak;
    }
    auto at = [&](const std::array<int64_t, pf::kNumMemoryCategories>& a, pf::MemoryCategory c) {
      return a[static_cast<int>(c)];
    };
    pf_memory_stats v{};
    v.parameters_current = at(s.current, pf::MemoryCategory::kParameters);
    v.parameters_peak = at(s.peak, pf::MemoryCategory::kParameters);
    v.gradients_current = at(s.current, pf::MemoryCategory::kGradients);
    v.gradients_peak = at(s.peak, pf::MemoryCategory::kGradients);
    v.optimizer_state_current = at(s.current, pf::MemoryCategory::kOptimizerState);
    v.optimizer_state_peak = at(s.peak, pf::MemoryCategory::kOptimizerState);
    v.activations_current = at(s.current, pf::MemoryCategory::kActivations);
    v.activations_peak = at(s.peak, pf::MemoryCategory::kActivations);
    v.communication_current = at(s.current, pf::MemoryCategory::kCommunication);
    v.communication_peak = at(s.peak, pf::MemoryCategory::kCommunication);
    v.workspace_current = at(s.current, pf::MemoryCategory::kWorkspace);
    v.workspace_peak = at(s.peak, pf::MemoryCategory::kWorkspace);
    v.total_current = s.total_current;
    v.total_peak = s.total_peak;
    pf::capi::write_struct(out, v);
  });
}

pf_status* pf_trainer_process(const pf_trainer* trainer, int32_t* rank, int32_t* size) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    require(rank, "rank");
    require(size, "size");
    *rank = trainer->launch_rank;
    *size = trainer->launch_size;
  });
}

pf_status* pf_trainer_num_ranks(const pf_trainer* trainer, int32_t* out) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    *require(out, "out") = trainer->pipeline() ? trainer->pipeline()->schedule().num_ranks() : 1;
  });
}

namespace {

const pf::exec::PipelineStats& last_pipeline_stats(const pf_trainer& trainer) {
  PF_CHECK_STATE(trainer.pipeline() != nullptr,
                 "the trainer is not pipelined (create it with options->schedule or options->schedule_text)");
  const pf::exec::PipelineStats& stats = trainer.pipeline()->last_stats();
  PF_CHECK_STATE(!stats.ranks.empty(), "no step has run yet");
  return stats;
}

}  // namespace

pf_status* pf_trainer_get_rank_stats(const pf_trainer* trainer, int32_t rank, pf_rank_stats* out) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    require(out, "out");
    pf::capi::check_out_struct(*out, offsetof(pf_rank_stats, offloaded_bytes), "out", "pf_rank_stats");  // 0.1 size
    const pf::exec::PipelineStats& stats = last_pipeline_stats(*trainer);
    const int32_t ranks = static_cast<int32_t>(stats.ranks.size());
    PF_CHECK_ARG(rank >= 0 && rank < ranks, "rank ", rank, " is outside [0, ", ranks, ")");
    const pf::exec::RankStats& r = stats.ranks[rank];
    const auto& actions = trainer->pipeline()->last_timeline().ranks[rank];
    pf_rank_stats value{};
    value.busy = r.busy_us;
    value.idle = r.idle_us;
    value.first_start = actions.empty() ? 0.0 : actions.front().start;
    value.finish = r.finish_us;
    value.peak_activations = r.peak_live_micro_batches;
    value.peak_activation_bytes = static_cast<double>(r.peak_activation_bytes);
    value.offloaded_bytes = static_cast<double>(r.offloaded_bytes);
    value.recomputes = r.recomputes;
    value.local = trainer->pipeline()->parts().ownership.is_local_rank(rank) ? 1 : 0;
    pf::capi::write_struct(out, value);
  });
}

pf_status* pf_trainer_get_bubble_rate(const pf_trainer* trainer, double* out) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    require(out, "out");
    *out = last_pipeline_stats(*trainer).bubble_rate;
  });
}

pf_status* pf_trainer_timeline_to_chrome_trace(pf_trainer* trainer, const char** out) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    require(out, "out");
    last_pipeline_stats(*trainer);
    trainer->trace = pf::sched::to_chrome_trace(trainer->pipeline()->last_timeline());
    *out = trainer->trace.c_str();
  });
}

pf_status* pf_trainer_timeline_to_svg(pf_trainer* trainer, const char** out) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    require(out, "out");
    last_pipeline_stats(*trainer);
    trainer->svg = pf::sched::to_svg(trainer->pipeline()->last_timeline());
    *out = trainer->svg.c_str();
  });
}

}  // extern "C"
