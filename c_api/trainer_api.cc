// pf_trainer_*: create, step and destroy a trainer (the sequential or a pipelined one, threads or
// one process per rank, made by the runtime's one factory), its data loader, drain and metrics.
// Parameters and checkpoints: trainer_parameters_api.cc; reports: trainer_report_api.cc.
#include <cstddef>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "c_api/guard.h"
#include "c_api/handles.h"
#include "c_api/process_launch.h"
#include "c_api/struct_io.h"
#include "c_api/tensor_view.h"
#include "c_api/trainer_config.h"
#include "runtime/run/make_trainer.h"
#include "runtime/tensor/cpu_allocator.h"
#include "runtime/tensor/device.h"
#include "runtime/tensor/memory_tracker.h"

namespace {

using pf::capi::guard;
using pf::capi::guard_void;
using pf::capi::require;

constexpr size_t kStepResultV1Size = offsetof(pf_step_result, lr);
constexpr size_t kMetricsV1Size = sizeof(pf_metrics);
static_assert(kStepResultV1Size == 48 && kMetricsV1Size == 56 &&
                  pf::capi::kDataLoaderV1Size == 40,
              "a v1 struct layout changed");

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
        pf::capi::launch_processes(o.processes, config.pipelined(), config.tensor_parallel, config.base.replicas,
                                   [&] { return pf::capi::schedule_ranks(o); });
    trainer->per_rank_processes = launch.per_rank;
    trainer->launch_rank = launch.launch_rank;
    trainer->launch_size = launch.launch_size;
    if (launch.per_rank) {
      // The sequential trainer under tensor parallelism runs no pipeline: no pipeline world.
      if (config.pipelined()) config.world = launch.pipeline;
      config.data_parallel_world = launch.data_parallel;
      if (config.tensor_parallel > 1) config.tensor_parallel_world = launch.tensor_parallel;
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
    trainer->trainer->drain();
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
void pf_trainer_destroy(pf_trainer* trainer) {
  if (trainer == nullptr) return;
  guard_void(__func__, [&] {
    delete trainer;
    pf::cpu_allocator().release_cache();  // the freed tensors' blocks go back to the system
  });
}

}  // extern "C"
