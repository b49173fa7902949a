// pf_trainer_*: the sequential trainer, its data loader, parameters, checkpoints and metrics.
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "c_api/guard.h"
#include "c_api/handles.h"
#include "c_api/struct_io.h"
#include "c_api/tensor_view.h"
#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/parameter_checksum.h"
#include "runtime/schedules/timeline.h"
#include "runtime/tensor/device.h"
#include "runtime/tensor/memory_tracker.h"

namespace {

using pf::capi::guard;
using pf::capi::guard_void;
using pf::capi::require;

// Version-1 sizes: an older caller's struct must hold at least these fields (0.2 appended the
// activation-memory fields to pf_trainer_options; an older caller gets their defaults).
constexpr size_t kTrainerOptionsV1Size = offsetof(pf_trainer_options, activation_policy);
constexpr size_t kStepResultV1Size = sizeof(pf_step_result);
constexpr size_t kMetricsV1Size = sizeof(pf_metrics);
constexpr size_t kMemoryStatsV1Size = sizeof(pf_memory_stats);
constexpr size_t kDataLoaderV1Size = sizeof(pf_data_loader);
static_assert(kTrainerOptionsV1Size == 104 && kStepResultV1Size == 48 && kMetricsV1Size == 56 &&
                  kMemoryStatsV1Size == 120 && kDataLoaderV1Size == 40,
              "a v1 struct layout changed");
static_assert(pf::kNumMemoryCategories == 6, "pf_memory_stats needs a field pair for a new category");

pf_trainer_options default_options() {
  const pf::TrainerOptions d;
  pf_trainer_options o{};
  o.struct_size = sizeof(pf_trainer_options);
  o.micro_batches = d.micro_batches;
  o.seed = d.seed;
  o.blas_threads = d.blas_threads;
  o.optimizer = d.optimizer.kind == pf::OptimizerConfig::Kind::kSgd ? PF_OPTIMIZER_SGD : PF_OPTIMIZER_ADAMW;
  o.lr = d.optimizer.lr;
  o.momentum = d.optimizer.momentum;
  o.weight_decay = d.optimizer.weight_decay;
  o.beta1 = d.optimizer.beta1;
  o.beta2 = d.optimizer.beta2;
  o.eps = d.optimizer.eps;
  o.clip_norm = d.optimizer.clip_norm;
  const pf::exec::PipelineOptions p;
  o.stages = 1;
  o.chunks = 1;
  o.recv_timeout_seconds = p.recv_timeout_seconds;
  return o;
}

// The pipeline options of a C options struct whose schedule or schedule_text is set.
pf::exec::PipelineOptions convert_pipeline(const pf_trainer_options& o, const pf::TrainerOptions& base) {
  pf::exec::PipelineOptions p;
  p.base = base;
  if (o.schedule_text != nullptr) {
    PF_CHECK_ARG(o.schedule == nullptr, "options->schedule and options->schedule_text are both set; set one");
    p.schedule_text = o.schedule_text;
  } else {
    p.schedule = o.schedule;
  }
  p.ranks = o.stages;
  p.chunks = o.chunks;
  if (o.layers_per_stage != nullptr) {
    p.layers_per_stage.assign(o.layers_per_stage, o.layers_per_stage + o.num_layers_per_stage);
  } else {
    PF_CHECK_ARG(o.num_layers_per_stage == 0, "options->num_layers_per_stage is ", o.num_layers_per_stage,
                 " but options->layers_per_stage is NULL");
  }
  p.recv_timeout_seconds = o.recv_timeout_seconds;
  if (o.activation_policy != nullptr) p.activation_policy = o.activation_policy;
  pf::sched::parse_activation_policy(p.activation_policy);  // an unknown name lists the known ones
  p.activation_budget_bytes = o.activation_budget_bytes;
  if (o.offload_dir != nullptr) p.offload_dir = o.offload_dir;
  if (o.devices != nullptr) p.devices = pf::parse_device_list(o.devices);  // one entry: every rank
  p.validate();
  return p;
}

pf::TrainerOptions convert(const pf_trainer_options& o) {
  pf::TrainerOptions t;
  t.micro_batches = o.micro_batches;
  t.seed = o.seed;
  t.blas_threads = o.blas_threads;
  switch (o.optimizer) {
    case PF_OPTIMIZER_SGD: t.optimizer.kind = pf::OptimizerConfig::Kind::kSgd; break;
    case PF_OPTIMIZER_ADAMW: t.optimizer.kind = pf::OptimizerConfig::Kind::kAdamW; break;
    default:
      pf::fail(pf::ErrorCode::kInvalidArgument, "options->optimizer is ", o.optimizer,
               ", not a pf_optimizer_kind (PF_OPTIMIZER_SGD or PF_OPTIMIZER_ADAMW)");
  }
  t.optimizer.lr = o.lr;
  t.optimizer.momentum = o.momentum;
  t.optimizer.weight_decay = o.weight_decay;
  t.optimizer.beta1 = o.beta1;
  t.optimizer.beta2 = o.beta2;
  t.optimizer.eps = o.eps;
  t.optimizer.clip_norm = o.clip_norm;
  return t;
}

pf_step_result convert(const pf::StepResult& r) {
  pf_step_result out{};
  out.loss = r.loss;
  out.grad_norm = r.grad_norm;
  out.samples = r.samples;
  out.tokens = r.tokens;
  out.seconds = r.seconds;
  return out;
}

pf::Parameter& find_parameter(const pf_trainer& trainer, const char* name) {
  const std::string key = pf::capi::require_string(name, "name");
  pf::Parameter* p = trainer.trainer->model().find_parameter(key);
  if (p == nullptr) pf::fail(pf::ErrorCode::kNotFound, "the model has no parameter named '", key, "'");
  return *p;
}

void check_count(const pf::Parameter& p, size_t count) {
  PF_CHECK_ARG(count == static_cast<size_t>(p.value.numel()), "count is ", count, " but parameter '", p.name,
               "' ", pf::shape_to_string(p.value.shape()), " has ", p.value.numel(), " elements");
}

}  // namespace

extern "C" {

void pf_trainer_options_init(pf_trainer_options* options) {
  if (options != nullptr) *options = default_options();
}

pf_status* pf_trainer_create(pf_model* model, const pf_trainer_options* options, pf_trainer** out) {
  return guard(__func__, [&] {
    require(model, "model");
    require(out, "out");
    const pf_trainer_options o =
        options == nullptr
            ? default_options()
            : pf::capi::read_struct(*options, kTrainerOptionsV1Size, "options", "pf_trainer_options",
                                    default_options());
    const pf::TrainerOptions converted = convert(o);
    // The handle holds one reference; any other belongs to a live trainer, which owns the
    // parameters (a second trainer would re-initialise and then share them).
    PF_CHECK_STATE(model->model.use_count() == 1,
                   "the model is already used by another trainer; destroy that trainer or create a new model");
    auto trainer = std::make_unique<pf_trainer>();
    trainer->micro_batches = converted.micro_batches;
    if (o.schedule != nullptr || o.schedule_text != nullptr) {
      auto pipeline = std::make_unique<pf::exec::PipelineTrainer>(model->model, convert_pipeline(o, converted));
      trainer->pipeline = pipeline.get();
      trainer->trainer = std::move(pipeline);
    } else {
      PF_CHECK_ARG(o.activation_policy == nullptr || std::string(o.activation_policy) == "none",
                   "options->activation_policy is '", o.activation_policy,
                   "' but no schedule is set: activation policies apply to pipelined training (set "
                   "options->schedule or options->schedule_text)");
      if (o.devices != nullptr) {
        const std::vector<pf::Device> devices = pf::parse_device_list(o.devices);
        PF_CHECK_ARG(devices.size() == 1, "options->devices is '", o.devices,
                     "': the sequential trainer (no schedule) runs on one device");
        trainer->trainer = std::make_unique<pf::SequentialTrainer>(model->model, converted, devices.front());
      } else {
        trainer->trainer = std::make_unique<pf::SequentialTrainer>(model->model, converted);
      }
    }
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
    std::unique_ptr<pf::capi::LoaderSource> source;
    if (loader != nullptr) {
      const pf_data_loader copy =
          pf::capi::read_struct(*loader, kDataLoaderV1Size, "loader", "pf_data_loader", pf_data_loader{});
      PF_CHECK_ARG(copy.next != nullptr, "loader->next is NULL");
      source = std::make_unique<pf::capi::LoaderSource>(copy);
    }
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
    trainer->loader->begin_step(t.metrics().data_position, trainer->micro_batches);
    pf::StepResult result;
    {
      pf::MemoryCategoryScope scope(pf::MemoryCategory::kActivations);  // charges the copied batches
      result = t.step(*trainer->loader);
    }
    if (out != nullptr) pf::capi::write_struct(out, convert(result));
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

pf_status* pf_trainer_get_parameter(const pf_trainer* trainer, const char* name, float* buffer, size_t count) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    const pf::Parameter& p = find_parameter(*trainer, name);
    require(buffer, "buffer");
    check_count(p, count);
    std::memcpy(buffer, p.value.f32(), p.value.nbytes());
  });
}

pf_status* pf_trainer_set_parameter(pf_trainer* trainer, const char* name, const float* values, size_t count) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    pf::Parameter& p = find_parameter(*trainer, name);
    require(values, "values");
    check_count(p, count);
    std::memcpy(p.value.f32(), values, p.value.nbytes());
  });
}

pf_status* pf_trainer_parameter_shape(const pf_trainer* trainer, const char* name, int64_t* shape, size_t max_dims,
                                      size_t* ndim) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    const pf::Parameter& p = find_parameter(*trainer, name);
    require(ndim, "ndim");
    const pf::Shape& dims = p.value.shape();
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
    const std::string hex = pf::parameter_checksum(trainer->trainer->model().parameters());
    std::memcpy(out_hex, hex.c_str(), hex.size() + 1);
  });
}

pf_status* pf_trainer_save_checkpoint(const pf_trainer* trainer, const char* path) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    pf::save_checkpoint(*trainer->trainer, pf::capi::require_string(path, "path"));
  });
}

pf_status* pf_trainer_load_checkpoint(pf_trainer* trainer, const char* path) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    pf::load_checkpoint(*trainer->trainer, pf::capi::require_string(path, "path"));
  });
}

pf_status* pf_trainer_memory_stats(const pf_trainer* trainer, pf_memory_stats* out) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    require(out, "out");
    pf::capi::check_out_struct(*out, kMemoryStatsV1Size, "out", "pf_memory_stats");
    const pf::MemoryStats s = pf::memory_tracker(pf::Device::cpu()).stats();
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

pf_status* pf_trainer_num_ranks(const pf_trainer* trainer, int32_t* out) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    *require(out, "out") = trainer->pipeline ? trainer->pipeline->schedule().num_ranks() : 1;
  });
}

namespace {

const pf::exec::PipelineStats& last_pipeline_stats(const pf_trainer& trainer) {
  PF_CHECK_STATE(trainer.pipeline != nullptr,
                 "the trainer is not pipelined (create it with options->schedule or options->schedule_text)");
  const pf::exec::PipelineStats& stats = trainer.pipeline->last_stats();
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
    const auto& actions = trainer->pipeline->last_timeline().ranks[rank];
    pf_rank_stats value{};
    value.busy = r.busy_us;
    value.idle = r.idle_us;
    value.first_start = actions.empty() ? 0.0 : actions.front().start;
    value.finish = r.finish_us;
    value.peak_activations = r.peak_live_micro_batches;
    value.peak_activation_bytes = static_cast<double>(r.peak_activation_bytes);
    value.offloaded_bytes = static_cast<double>(r.offloaded_bytes);
    value.recomputes = r.recomputes;
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
    trainer->trace = pf::sched::to_chrome_trace(trainer->pipeline->last_timeline());
    *out = trainer->trace.c_str();
  });
}

pf_status* pf_trainer_timeline_to_svg(pf_trainer* trainer, const char** out) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    require(out, "out");
    last_pipeline_stats(*trainer);
    trainer->svg = pf::sched::to_svg(trainer->pipeline->last_timeline());
    *out = trainer->svg.c_str();
  });
}

void pf_trainer_destroy(pf_trainer* trainer) {
  guard_void(__func__, [&] { delete trainer; });
}

}  // extern "C"
