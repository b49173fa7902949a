// pf_plan_*: the planner (runtime/planner) for C callers and, through them, the language bindings.
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "c_api/guard.h"
#include "c_api/handles.h"
#include "c_api/struct_io.h"
#include "c_api/tensor_view.h"
#include "c_api/trainer_config.h"
#include "runtime/core/json_text.h"
#include "runtime/planner/calibration.h"
#include "runtime/planner/candidates.h"
#include "runtime/planner/cluster.h"
#include "runtime/planner/model_profile.h"
#include "runtime/planner/plan_report.h"
#include "runtime/tensor/memory_tracker.h"

struct pf_plan {
  pf::plan::PlanRequest request;
  pf::plan::Plan plan;
  std::string candidate_json, json, svg;  // what the getters returned last
  // What pf_plan_apply points the trainer options at, per candidate.
  std::vector<std::vector<int32_t>> layers_per_stage;
};

namespace {

using pf::capi::guard;
using pf::capi::guard_void;
using pf::capi::require;

constexpr size_t kPlanOptionsV1Size = sizeof(pf_plan_options);

pf_plan_options default_plan_options() {
  pf_plan_options o{};
  o.struct_size = sizeof(pf_plan_options);
  o.max_micro_batches = 16;
  o.max_chunks = 2;
  o.repeats = 3;
  o.calibration_steps = 5;
  return o;
}

std::vector<std::string> split_list(const char* text) {
  std::vector<std::string> out;
  if (text == nullptr) return out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ','))
    if (!item.empty()) out.push_back(item);
  return out;
}

const pf::plan::Prediction& candidate(const pf_plan& plan, int32_t index) {
  PF_CHECK_ARG(index >= 0 && static_cast<size_t>(index) < plan.plan.ranked.size(), "index is ", index, ": the plan has ",
               plan.plan.ranked.size(), " candidates that fit");
  return plan.plan.ranked[static_cast<size_t>(index)];
}

}  // namespace

extern "C" {

void pf_plan_options_init(pf_plan_options* options) {
  if (options != nullptr) *options = default_plan_options();
}

pf_status* pf_plan_create(pf_model* model, const pf_tensor_view* inputs, const pf_tensor_view* targets,
                          const pf_trainer_options* trainer_options, const pf_plan_options* options, pf_plan** out) {
  return guard(__func__, [&] {
    require(model, "model");
    require(inputs, "inputs");
    require(targets, "targets");
    require(out, "out");
    const pf_plan_options o = options == nullptr ? default_plan_options()
                                                 : pf::capi::read_struct(*options, kPlanOptionsV1Size, "options",
                                                                         "pf_plan_options", default_plan_options());
    const pf::TrainerOptions trainer = pf::capi::read_training_config(trainer_options).base;
    PF_CHECK_ARG(o.devices >= 0 && o.devices <= 4096, "options->devices is ", o.devices, ": expected 0 .. 4096");
    PF_CHECK_ARG(o.max_micro_batches >= 1, "options->max_micro_batches is ", o.max_micro_batches, ": expected >= 1");
    PF_CHECK_ARG(o.max_chunks >= 1, "options->max_chunks is ", o.max_chunks, ": expected >= 1");
    PF_CHECK_ARG(o.repeats >= 1 && o.repeats <= 1000, "options->repeats is ", o.repeats, ": expected 1 .. 1000");
    PF_CHECK_ARG(o.calibration_steps >= 0 && o.calibration_steps <= 1000, "options->calibration_steps is ",
                 o.calibration_steps, ": expected 0 .. 1000");
    PF_CHECK_ARG(o.memory_limit_bytes >= 0, "options->memory_limit_bytes is ", o.memory_limit_bytes, ": expected >= 0");
    PF_CHECK_STATE(model->model->device().kind == pf::DeviceKind::kCpu, "the model is on ",
                   model->model->device().to_string(), ": the planner profiles on the CPU");
    pf::Batch batch;
    {
      pf::MemoryCategoryScope scope(pf::MemoryCategory::kActivations);
      batch.inputs = pf::capi::tensor_from_view(*inputs, "inputs");
      batch.targets = pf::capi::tensor_from_view(*targets, "targets");
    }
    model->model->check_batch(batch.inputs, batch.targets, "the step's batch");

    auto plan = std::make_unique<pf_plan>();
    pf::plan::PlanRequest& request = plan->request;
    request.cluster = o.cluster_json == nullptr
                          ? pf::plan::measure_this_machine(o.devices)
                          : pf::plan::cluster_from_json(
                                pf::parse_json_text(o.cluster_json, "options->cluster_json", size_t{1} << 20),
                                "options->cluster_json");
    request.batch_rows = batch.rows();
    request.schedules = split_list(o.schedules);
    request.policies = split_list(o.policies);
    request.max_micro_batches = o.max_micro_batches;
    request.max_chunks = o.max_chunks;
    request.memory_limit_bytes = o.memory_limit_bytes;
    std::shared_ptr<pf::Model> copy;  // calibration trains it
    request.profile = pf::plan::profile_model_copy(*model->model, batch, pf::plan::needed_micro_batch_rows(request),
                                                   trainer.optimizer, o.repeats, &copy);
    if (o.calibration_steps > 0 && batch.rows() % 4 == 0)
      request.profile.calibration = pf::plan::calibrate(request, copy, batch, trainer.optimizer, o.calibration_steps);
    plan->plan = pf::plan::make_plan(request);
    for (const pf::plan::Prediction& p : plan->plan.ranked)
      plan->layers_per_stage.emplace_back(p.candidate.layers_per_stage.begin(), p.candidate.layers_per_stage.end());
    *out = plan.release();
  });
}

pf_status* pf_plan_num_candidates(const pf_plan* plan, int32_t* out) {
  return guard(__func__, [&] {
    require(plan, "plan");
    require(out, "out");
    *out = static_cast<int32_t>(plan->plan.ranked.size());
  });
}

pf_status* pf_plan_candidate_json(pf_plan* plan, int32_t index, const char** out) {
  return guard(__func__, [&] {
    require(plan, "plan");
    require(out, "out");
    plan->candidate_json = pf::plan::prediction_to_json(candidate(*plan, index)).dump();
    *out = plan->candidate_json.c_str();
  });
}

pf_status* pf_plan_to_json(pf_plan* plan, const char** out) {
  return guard(__func__, [&] {
    require(plan, "plan");
    require(out, "out");
    const nlohmann::json j = pf::plan::plan_to_json(plan->plan, plan->request, plan->plan.ranked.size());
    plan->json = j.dump();
    *out = plan->json.c_str();
  });
}

pf_status* pf_plan_to_svg(pf_plan* plan, const char** out) {
  return guard(__func__, [&] {
    require(plan, "plan");
    require(out, "out");
    plan->svg = pf::plan::plan_svg(plan->plan, plan->request.limit(),
                                   "batch " + std::to_string(plan->request.batch_rows) + ", " +
                                       std::to_string(plan->request.cluster.devices()) + " " +
                                       plan->request.cluster.device_kind + " devices");
    *out = plan->svg.c_str();
  });
}

pf_status* pf_plan_apply(const pf_plan* plan, int32_t index, pf_trainer_options* options) {
  return guard(__func__, [&] {
    require(plan, "plan");
    require(options, "options");
    const pf::plan::Candidate& c = candidate(*plan, index).candidate;
    pf::capi::check_out_struct(*options, offsetof(pf_trainer_options, data_parallel) + sizeof(int32_t), "options",
                               "pf_trainer_options");
    options->micro_batches = c.micro_batches;
    options->data_parallel = c.data_parallel;
    if (c.sequential()) {
      options->schedule = nullptr;
      options->stages = 1;
      options->ranks = 0;
      options->chunks = 1;
      options->layers_per_stage = nullptr;
      options->num_layers_per_stage = 0;
      options->activation_policy = nullptr;
      return;
    }
    const std::vector<int32_t>& counts = plan->layers_per_stage[static_cast<size_t>(index)];
    options->schedule = c.schedule.c_str();
    options->stages = c.ranks;
    options->ranks = c.ranks;
    options->chunks = c.chunks;
    options->layers_per_stage = counts.data();
    options->num_layers_per_stage = counts.size();
    options->activation_policy = c.activation_policy.c_str();
  });
}

void pf_plan_destroy(pf_plan* plan) {
  guard_void(__func__, [&] { delete plan; });
}

}  // extern "C"
