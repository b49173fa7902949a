// pf_trainer_*: the sequential and pipelined trainers (threads or one process per rank), their
// data loader, parameters, checkpoints and metrics.
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "c_api/adaptation.h"
#include "c_api/guard.h"
#include "c_api/handles.h"
#include "c_api/trainer_options.h"
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

// Version-1 sizes: an older caller's struct must hold at least these fields (0.2 appended the
// activation-memory and device fields to pf_trainer_options, 0.3 the process fields, 0.4 the
// asynchronous-schedule fields, then local_head; 0.5 the learning-rate schedule, 0.7 seq_slices,
// 0.9 adaptation; an older caller gets their defaults).
constexpr size_t kTrainerOptionsV1Size = offsetof(pf_trainer_options, activation_policy);
constexpr size_t kTrainerOptionsV2Size = offsetof(pf_trainer_options, processes);
constexpr size_t kTrainerOptionsV3Size = offsetof(pf_trainer_options, pipemare_anneal_updates);
static_assert(kTrainerOptionsV2Size == 136, "the 0.2 pf_trainer_options layout changed");
// The 0.4 fields start at the 0.3 sizeof, not in its trailing padding (c_api/struct_io.h).
static_assert(kTrainerOptionsV3Size == 160 && offsetof(pf_trainer_options, ranks) + sizeof(int32_t) <= 160,
              "the 0.3 pf_trainer_options layout changed");
// local_head was appended after vertical_sync within 0.4: at the sizeof of the struct that ends
// there (184, after 4 bytes of padding), so that struct size is a field boundary too.
constexpr size_t kTrainerOptionsAsyncSize = offsetof(pf_trainer_options, local_head);
static_assert(offsetof(pf_trainer_options, vertical_sync) == 176 && kTrainerOptionsAsyncSize == 184 &&
                  offsetof(pf_trainer_options, local_head) + sizeof(const char*) == 192,
              "the 0.4 pf_trainer_options layout changed");
// 0.5 appended the learning-rate schedule at the 0.4 sizeof (192).
static_assert(offsetof(pf_trainer_options, lr_schedule) == 192 && offsetof(pf_trainer_options, min_lr) == 216,
              "the 0.5 pf_trainer_options layout changed");
// 0.7 appended seq_slices at the 0.5 (and 0.6) sizeof, 224: an older caller's struct ends before it
// and means 1.
constexpr size_t kTrainerOptionsV5Size = offsetof(pf_trainer_options, seq_slices);
static_assert(kTrainerOptionsV5Size == 224 && offsetof(pf_trainer_options, adapt_threshold) == 232,
              "the 0.7 pf_trainer_options layout changed");
// 0.9 appended fail-slow adaptation and its test knobs at the 0.7 sizeof, 232 (after its padding).
static_assert(offsetof(pf_trainer_options, adapt) == 240 && offsetof(pf_trainer_options, slow_factor) == 248 &&
                  offsetof(pf_trainer_options, slow_rank) == 256 && sizeof(pf_trainer_options) == 264,
              "the 0.9 pf_trainer_options layout changed");
constexpr size_t kStepResultV1Size = offsetof(pf_step_result, lr);
constexpr size_t kMetricsV1Size = sizeof(pf_metrics);
constexpr size_t kMemoryStatsV1Size = sizeof(pf_memory_stats);
static_assert(kTrainerOptionsV1Size == 104 && kStepResultV1Size == 48 && kMetricsV1Size == 56 &&
                  kMemoryStatsV1Size == 120 && pf::capi::kDataLoaderV1Size == 40,
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
  o.processes = PF_PROCESSES_AUTO;
  o.data_parallel = d.replicas;
  o.ranks = 0;  // = stages
  const pf::exec::AsyncOptions a;
  o.pipemare_anneal_updates = a.pipemare_anneal_updates;
  o.pipemare_decay = a.pipemare_decay;
  o.spectrain_version = a.spectrain_version;
  o.vertical_sync = a.vertical_sync ? 1 : 0;
  o.local_head = nullptr;  // = "auto"
  o.lr_schedule = nullptr;  // = "constant"
  o.seq_slices = p.seq_slices;
  const pf::plan::FailSlowOptions f;
  o.adapt = 0;
  o.adapt_threshold = f.threshold;
  o.adapt_patience = f.patience;
  o.slow_rank = p.slow_rank;
  o.slow_factor = p.slow_factor;
  return o;
}

// The asynchronous-schedule options (0.4): 0 in a field is its default; -1 turns pipemare's
// annealing and discrepancy average off (the runtime's 0). Which schedule may set which is checked
// by PipelineOptions::validate (AsyncOptions::validate).
pf::exec::AsyncOptions convert_async(const pf_trainer_options& o) {
  pf::exec::AsyncOptions a;
  PF_CHECK_ARG(o.vertical_sync == 0 || o.vertical_sync == 1, "options->vertical_sync is ", o.vertical_sync,
               ": expected 0 (off, the default) or 1");
  a.vertical_sync = o.vertical_sync == 1;
  PF_CHECK_ARG(o.spectrain_version >= 0, "options->spectrain_version is ", o.spectrain_version,
               ": expected 1 (the paper, the default), 2, or 0 for the default");
  if (o.spectrain_version != 0) a.spectrain_version = o.spectrain_version;
  PF_CHECK_ARG(o.pipemare_anneal_updates >= -1, "options->pipemare_anneal_updates is ", o.pipemare_anneal_updates,
               ": expected K > 0 updates, 0 for the default (", a.pipemare_anneal_updates, ") or -1 for none");
  if (o.pipemare_anneal_updates == -1) {
    a.pipemare_anneal_updates = 0;
  } else if (o.pipemare_anneal_updates != 0) {
    a.pipemare_anneal_updates = o.pipemare_anneal_updates;
  }
  PF_CHECK_ARG(o.pipemare_decay == -1.0f || o.pipemare_decay == 0.0f ||
                   (o.pipemare_decay > 0.0f && o.pipemare_decay < 1.0f),
               "options->pipemare_decay is ", o.pipemare_decay, ": expected g in (0, 1), 0 for the default (",
               a.pipemare_decay, ") or -1 for no average (g = 0)");
  if (o.pipemare_decay == -1.0f) {
    a.pipemare_decay = 0.0f;
  } else if (o.pipemare_decay != 0.0f) {
    a.pipemare_decay = o.pipemare_decay;
  }
  return a;
}

// The sequential trainer: an option of an asynchronous schedule is refused naming its schedule.
void check_no_async_options(const pf_trainer_options& o) {
  const pf::exec::AsyncOptions a = convert_async(o), d;
  auto refuse = [](bool set, const char* field, const char* schedule) {
    PF_CHECK_ARG(!set, "options->", field, " applies to schedule ", schedule,
                 " only, but no schedule is set (set options->schedule)");
  };
  refuse(a.vertical_sync != d.vertical_sync, "vertical_sync", "pipedream");
  refuse(a.spectrain_version != d.spectrain_version, "spectrain_version", "spectrain");
  refuse(a.pipemare_anneal_updates != d.pipemare_anneal_updates, "pipemare_anneal_updates", "pipemare");
  refuse(a.pipemare_decay != d.pipemare_decay, "pipemare_decay", "pipemare");
}

// The kind of the local-learning heads (0.4): NULL is "auto". Unknown kinds and a kind for
// another schedule are refused by PipelineOptions::validate and PipelineTrainer.
std::string local_head_option(const pf_trainer_options& o) {
  return o.local_head != nullptr ? std::string(o.local_head) : std::string("auto");
}

// The sequential trainer: a local_head other than "auto" is refused naming the schedules it needs.
void check_no_local_head(const pf_trainer_options& o) {
  const std::string kind = local_head_option(o);
  pf::check_local_head_kind(kind);  // an unknown kind lists the known ones
  PF_CHECK_ARG(kind == "auto", "options->local_head is '", kind,
               "': it applies to the local-learning schedules (ppll, local-updates) only, but no schedule is set "
               "(set options->schedule)");
}

// Sequence slices per micro-batch (0.7): 0 is the default, 1. Which schedules, models and
// placements may slice is checked by PipelineOptions::validate and PipelineTrainer.
int seq_slices_option(const pf_trainer_options& o) {
  PF_CHECK_ARG(o.seq_slices >= 0, "options->seq_slices is ", o.seq_slices,
               ": expected S >= 1 sequence slices per micro-batch (0 = the default, 1)");
  return o.seq_slices == 0 ? 1 : o.seq_slices;
}

// The sequential trainer does not slice sequences: seq_slices > 1 is refused naming the schedule it needs.
void check_no_seq_slices(const pf_trainer_options& o) {
  const int slices = seq_slices_option(o);
  PF_CHECK_ARG(slices == 1, "options->seq_slices is ", slices,
               ": sequence slices apply to pipelined training with a schedule that slices sequences, but no "
               "schedule is set (set options->schedule to \"seq1f1b\")");
}

// Pipeline ranks P for a schedule name: options->ranks, or options->stages (its older name).
int pipeline_ranks_option(const pf_trainer_options& o) {
  PF_CHECK_ARG(o.ranks >= 0, "options->ranks is ", o.ranks, ": the pipeline ranks must be >= 1 (0 = use options->stages)");
  if (o.ranks == 0) return o.stages;
  PF_CHECK_ARG(o.stages == 1 || o.stages == o.ranks, "options->ranks is ", o.ranks, " but options->stages is ",
               o.stages, ": both are the pipeline ranks P (stages is the older name); set one");
  return o.ranks;
}

// P of the schedule the options describe (parses a schedule text).
int schedule_ranks(const pf_trainer_options& o) {
  return o.schedule_text != nullptr ? pf::sched::parse_schedule(o.schedule_text).num_ranks() : pipeline_ranks_option(o);
}

// The pipeline options of a C options struct whose schedule or schedule_text is set, on the
// processes `launch` placed (not validated yet).
pf::exec::PipelineOptions convert_pipeline(const pf_trainer_options& o, const pf::TrainerOptions& base,
                                           const pf::capi::ProcessLaunch& launch) {
  pf::exec::PipelineOptions p;
  p.base = base;
  if (o.schedule_text != nullptr) {
    PF_CHECK_ARG(o.schedule == nullptr, "options->schedule and options->schedule_text are both set; set one");
    p.schedule_text = o.schedule_text;
  } else {
    p.schedule = o.schedule;
  }
  p.ranks = pipeline_ranks_option(o);
  p.chunks = o.chunks;
  p.seq_slices = seq_slices_option(o);
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
  if (o.gradient_reduction != nullptr) p.gradient_reduction = o.gradient_reduction;
  p.async = convert_async(o);
  p.local_head = local_head_option(o);
  pf::capi::convert_slow_rank(o, schedule_ranks(o), &p);
  if (launch.per_rank) {
    for (const pf::Device& d : p.devices)
      PF_CHECK_ARG(d.kind == pf::DeviceKind::kCpu, "options->devices is '", o.devices, "': ", d.to_string(),
                   " is not supported with one process per rank yet (CPU ranks only)");
    p.world = launch.pipeline;
    p.data_parallel_world = launch.data_parallel;
  }
  return p;
}

pf::TrainerOptions convert(const pf_trainer_options& o) {
  pf::TrainerOptions t;
  t.micro_batches = o.micro_batches;
  PF_CHECK_ARG(o.data_parallel >= 1, "options->data_parallel is ", o.data_parallel,
               ": the data-parallel replicas must be >= 1 (1 = none)");
  t.replicas = o.data_parallel;
  if (o.gradient_reduction != nullptr) {
    const std::string r = o.gradient_reduction;
    PF_CHECK_ARG(r == "allreduce" || r == "deterministic", "options->gradient_reduction is '", r,
                 "': expected \"allreduce\" or \"deterministic\" (or NULL)");
  }
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
  if (o.lr_schedule != nullptr) t.lr_schedule.kind = pf::parse_lr_schedule_kind(o.lr_schedule);
  PF_CHECK_ARG(o.warmup_steps >= 0, "options->warmup_steps is ", o.warmup_steps, ": expected >= 0");
  PF_CHECK_ARG(o.decay_steps >= 0, "options->decay_steps is ", o.decay_steps, ": expected >= 0");
  t.lr_schedule.warmup_steps = o.warmup_steps;
  t.lr_schedule.decay_steps = o.decay_steps;
  t.lr_schedule.min_lr = o.min_lr;
  return t;
}

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
  const int owner = trainer.pipeline()->owner_rank(&p);
  PF_CHECK_STATE(trainer.pipeline()->is_local_rank(owner), "parameter '", p.name, "' is held by pipeline rank ",
                 owner, ", another process (this one, launch rank ", trainer.launch_rank, " of ",
                 trainer.launch_size, ", runs pipeline rank ", trainer.pipeline()->options().world->rank(),
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
      if (trainer.pipeline()->is_local_rank(r)) add(trainer.pipeline()->rank_device(r));
  } else {
    add(trainer.trainer->model().device());
  }
  return devices;
}

}  // namespace

namespace pf::capi {

pf::TrainerOptions read_trainer_options(const pf_trainer_options* options) {
  const pf_trainer_options o =
      options == nullptr ? default_options()
                         : read_struct(*options, kTrainerOptionsV1Size, "options", "pf_trainer_options", default_options());
  return convert(o);
}

}  // namespace pf::capi


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
    trainer->step_micro_batches = converted.step_micro_batches();
    const bool has_schedule = o.schedule != nullptr || o.schedule_text != nullptr;
    const pf::capi::ProcessLaunch launch = pf::capi::launch_processes(o.processes, has_schedule, converted.replicas,
                                                                      [&] { return schedule_ranks(o); });
    trainer->per_rank_processes = launch.per_rank;
    trainer->launch_rank = launch.launch_rank;
    trainer->launch_size = launch.launch_size;
    // A trainer with one process per rank releases the tensors of other processes' parameters; any
    // other trainer needs every parameter (a no-op unless an earlier trainer released some).
    if (!launch.per_rank)
      for (pf::Parameter* p : model->model->parameters()) pf::allocate_parameter(*p);
    if (has_schedule) {
      pf::exec::PipelineOptions p = convert_pipeline(o, converted, launch);
      p.validate();
      auto pipeline = std::make_unique<pf::exec::PipelineTrainer>(model->model, p);
      trainer->adapt_pending = pf::capi::check_adaptation(o, pipeline.get());
      trainer->pipelined = pipeline.get();
      trainer->trainer = std::move(pipeline);
    } else {
      PF_CHECK_ARG(o.activation_policy == nullptr || std::string(o.activation_policy) == "none",
                   "options->activation_policy is '", o.activation_policy,
                   "' but no schedule is set: activation policies apply to pipelined training (set "
                   "options->schedule or options->schedule_text)");
      check_no_async_options(o);
      check_no_local_head(o);
      check_no_seq_slices(o);
      pf::capi::convert_slow_rank(o, 1, nullptr);
      pf::capi::check_adaptation(o, nullptr);
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
    pf::capi::start_adapting(*trainer, batch);
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
    pf::capi::start_adapting_from_loader(*trainer);
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
    value.local = trainer->pipeline()->is_local_rank(rank) ? 1 : 0;
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
