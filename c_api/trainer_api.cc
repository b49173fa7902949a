// pf_trainer_*: the sequential and pipelined trainers (threads or one process per rank), their
// data loader, parameters, checkpoints and metrics.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "c_api/guard.h"
#include "c_api/handles.h"
#include "c_api/trainer_config.h"
#include "runtime/run/make_trainer.h"
#include "c_api/process_launch.h"
#include "c_api/struct_io.h"
#include "c_api/tensor_view.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/parameter_checksum.h"
#include "runtime/checkpoint/sharded_checkpoint.h"
#include "runtime/execution/weight_versions.h"
#include "runtime/run/checkpoint_series.h"
#include "runtime/schedules/text_format.h"
#include "runtime/schedules/timeline.h"
#include "runtime/tensor/allocator.h"
#include "runtime/tensor/cpu_allocator.h"
#include "runtime/tensor/device.h"
#include "runtime/tensor/memory_tracker.h"
#include "runtime/train/local_heads.h"

namespace {

using pf::capi::guard;
using pf::capi::guard_void;
using pf::capi::require;

constexpr size_t kStepResultV1Size = offsetof(pf_step_result, lr);
constexpr size_t kMetricsV1Size = sizeof(pf_metrics);
constexpr size_t kMemoryStatsV1Size = sizeof(pf_memory_stats);
static_assert(kStepResultV1Size == 48 && kMetricsV1Size == 56 && kMemoryStatsV1Size == 120 &&
                  pf::capi::kDataLoaderV1Size == 40,
              "a v1 struct layout changed");
static_assert(pf::kNumMemoryCategories == 6, "pf_memory_stats needs a field pair for a new category");

pf_step_result convert(const pf::StepResult& r) {
  pf_step_result out{};
  out.loss = r.loss;
  out.grad_norm = r.grad_norm;
  out.samples = r.samples;
  out.tokens = r.tokens;
  out.seconds = r.seconds;
  out.lr = r.lr;
  out.bubble_rate = r.bubble_rate;
  return out;
}

pf::Parameter& find_parameter(const pf_trainer& trainer, const char* name) {
  const std::string key = pf::capi::require_string(name, "name");
  pf::Parameter* p = trainer.trainer->model().find_parameter(key);
  if (p == nullptr) pf::fail(pf::ErrorCode::kNotFound, "the model has no parameter named '", key, "'");
  return *p;
}

void check_count(const pf::Parameter& p, size_t count) {
  const int64_t n = pf::shape_numel(p.shape);
  PF_CHECK_ARG(count == static_cast<size_t>(n), "count is ", count, " but parameter '", p.name, "' ",
               pf::shape_to_string(p.shape), " has ", n, " elements");
}

// With one process per rank, only the process of the parameter's stage holds its values.
void check_local(const pf_trainer& trainer, const pf::Parameter& p) {
  if (!trainer.per_rank_processes) return;
  const pf::exec::ParameterOwnership& ownership = trainer.pipeline()->parts().ownership;
  const int owner = ownership.owner(&p);
  PF_CHECK_STATE(ownership.is_local_rank(owner), "parameter '", p.name, "' is held by pipeline rank ",
                 owner, ", another process (this one, launch rank ", trainer.launch_rank, " of ",
                 trainer.launch_size, ", runs pipeline rank ", trainer.pipeline()->process_groups().pipeline->rank(),
                 "): read or write it in that process; pf_trainer_parameter_checksum covers every parameter");
  PF_CHECK_STATE(p.allocated(), "parameter '", p.name, "' has no values in this process");
}

// Parameters hold f32 values on the trainer's device; the caller's buffer is host memory.
void check_f32(const pf::Parameter& p) {
  PF_CHECK_STATE(p.value.dtype() == pf::DType::kF32, "parameter '", p.name, "' holds ",
                 pf::dtype_name(p.value.dtype()), " values, not f32");
}


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

void pf_trainer_options_init(pf_trainer_options* options) {
  if (options != nullptr) *options = pf::capi::default_trainer_options();
}

pf_status* pf_trainer_create(pf_model* model, const pf_trainer_options* options, pf_trainer** out) {
  return guard(__func__, [&] {
    require(model, "model");
    require(out, "out");
    const pf_trainer_options o = pf::capi::read_options_struct(options);
    pf::TrainingConfig config = pf::capi::read_training_config(&o);
    // The handle holds one reference; any other belongs to a live trainer, which owns the
    // parameters (a second trainer would re-initialise and then share them).
    PF_CHECK_STATE(model->model.use_count() == 1,
                   "the model is already used by another trainer; destroy that trainer or create a new model");
    auto trainer = std::make_unique<pf_trainer>();
    trainer->step_micro_batches = config.base.step_micro_batches();
    const pf::capi::ProcessLaunch launch =
        pf::capi::launch_processes(o.processes, config.pipelined(), config.base.replicas,
                                   [&] { return pf::capi::schedule_ranks(o); });
    trainer->per_rank_processes = launch.per_rank;
    trainer->launch_rank = launch.launch_rank;
    trainer->launch_size = launch.launch_size;
    if (launch.per_rank) {
      config.world = launch.pipeline;
      config.data_parallel_world = launch.data_parallel;
    } else {
      // A trainer with one process per rank releases the tensors of other processes' parameters;
      // any other trainer needs every parameter (a no-op unless an earlier trainer released some).
      for (pf::Parameter* p : model->model->parameters()) pf::allocate_parameter(*p);
    }
    pf::TrainerInputs inputs;
    inputs.names = pf::capi::c_option_name;
    trainer->trainer = pf::make_trainer(model->model, config, inputs);
    *out = trainer.release();
  });
}

pf_status* pf_trainer_step(pf_trainer* trainer, const pf_tensor_view* inputs, const pf_tensor_view* targets,
                           pf_step_result* out) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    require(inputs, "inputs");
    require(targets, "targets");
    if (out != nullptr) pf::capi::check_out_struct(*out, kStepResultV1Size, "out", "pf_step_result");
    pf::Batch batch;
    {
      pf::MemoryCategoryScope scope(pf::MemoryCategory::kActivations);
      batch.inputs = pf::capi::tensor_from_view(*inputs, "inputs");
      batch.targets = pf::capi::tensor_from_view(*targets, "targets");
    }
    const pf::StepResult result = trainer->trainer->step(batch);
    if (out != nullptr) pf::capi::write_struct(out, convert(result));
  });
}

pf_status* pf_trainer_set_data_loader(pf_trainer* trainer, const pf_data_loader* loader) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    std::unique_ptr<pf::capi::LoaderSource> source = pf::capi::adopt_loader(loader);
    // The old loader's destroy runs here, after the new one is in place.
    trainer->loader.swap(source);
  });
}

pf_status* pf_trainer_step_from_loader(pf_trainer* trainer, pf_step_result* out) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    if (out != nullptr) pf::capi::check_out_struct(*out, kStepResultV1Size, "out", "pf_step_result");
    PF_CHECK_STATE(trainer->loader != nullptr, "the trainer has no data loader: call pf_trainer_set_data_loader");
    pf::Trainer& t = *trainer->trainer;
    trainer->loader->begin_step(t.metrics().data_position, trainer->step_micro_batches);
    pf::StepResult result;
    {
      pf::MemoryCategoryScope scope(pf::MemoryCategory::kActivations);  // charges the copied batches
      result = t.step(*trainer->loader);
    }
    if (out != nullptr) pf::capi::write_struct(out, convert(result));
  });
}

pf_status* pf_trainer_drain(pf_trainer* trainer) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    // Synchronous schedules and the sequential trainer have nothing in flight after a step.
    if (trainer->pipeline() != nullptr) trainer->pipeline()->drain();
  });
}

pf_status* pf_trainer_get_metrics(const pf_trainer* trainer, pf_metrics* out) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    require(out, "out");
    pf::capi::check_out_struct(*out, kMetricsV1Size, "out", "pf_metrics");
    const pf::TrainerMetrics& m = trainer->trainer->metrics();
    pf_metrics value{};
    value.step = m.step;
    value.last_loss = m.last_loss;
    value.last_grad_norm = m.last_grad_norm;
    value.tokens_per_second = m.tokens_per_second;
    value.total_tokens = m.total_tokens;
    value.data_position = m.data_position;
    pf::capi::write_struct(out, value);
  });
}

// Both copies go through copy_bytes (what Tensor::to_device and copy_from use): memcpy on the CPU,
// the device runtime's copy hook for a parameter on a GPU, which never lets host code touch device
// memory.
pf_status* pf_trainer_get_parameter(const pf_trainer* trainer, const char* name, float* buffer, size_t count) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    const pf::Parameter& p = find_parameter(*trainer, name);
    check_local(*trainer, p);
    require(buffer, "buffer");
    check_count(p, count);
    check_f32(p);
    pf::copy_bytes(buffer, pf::Device::cpu(), p.value.data<char>(), p.value.device(), p.value.nbytes(),
                   "pf_trainer_get_parameter");
  });
}

pf_status* pf_trainer_set_parameter(pf_trainer* trainer, const char* name, const float* values, size_t count) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    pf::Parameter& p = find_parameter(*trainer, name);
    check_local(*trainer, p);
    require(values, "values");
    check_count(p, count);
    check_f32(p);
    pf::copy_bytes(p.value.data<char>(), p.value.device(), values, pf::Device::cpu(), p.value.nbytes(),
                   "pf_trainer_set_parameter");
  });
}

pf_status* pf_trainer_parameter_shape(const pf_trainer* trainer, const char* name, int64_t* shape, size_t max_dims,
                                      size_t* ndim) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    const pf::Parameter& p = find_parameter(*trainer, name);
    require(ndim, "ndim");
    const pf::Shape& dims = p.shape;  // also for a parameter another process holds
    if (max_dims > 0) {
      require(shape, "shape");
      PF_CHECK_ARG(max_dims >= dims.size(), "max_dims is ", max_dims, " but parameter '", p.name, "' has rank ",
                   dims.size());
      std::copy(dims.begin(), dims.end(), shape);
    }
    *ndim = dims.size();
  });
}

pf_status* pf_trainer_parameter_checksum(const pf_trainer* trainer, char out_hex[65]) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    require(out_hex, "out_hex");
    // A pipeline's own checksum: with one process per rank it gathers every parameter from its owner.
    const std::string hex = trainer->pipeline() != nullptr ? trainer->pipeline()->parameter_checksum()
                                                         : pf::parameter_checksum(trainer->trainer->model().parameters());
    std::memcpy(out_hex, hex.c_str(), hex.size() + 1);
  });
}

pf_status* pf_trainer_save_checkpoint(const pf_trainer* trainer, const char* path) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    const std::string file = pf::capi::require_string(path, "path");
    // With one process per rank: a folder of shards, written by every process (collective).
    pf::save_trainer_checkpoint(*trainer->trainer, file);
  });
}

pf_status* pf_trainer_load_checkpoint(pf_trainer* trainer, const char* path) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    const std::string file = pf::capi::require_string(path, "path");
    // A folder of periodic checkpoints (pf_trainer_run's checkpoint_dir) means its newest.
    pf::load_trainer_checkpoint(*trainer->trainer, pf::resolve_checkpoint(file));
  });
}

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

void pf_trainer_destroy(pf_trainer* trainer) {
  if (trainer == nullptr) return;
  guard_void(__func__, [&] {
    delete trainer;
    pf::cpu_allocator().release_cache();  // the freed tensors' blocks go back to the system
  });
}

}  // extern "C"
