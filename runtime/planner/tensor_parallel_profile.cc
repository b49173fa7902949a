#include "runtime/planner/tensor_parallel_profile.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <memory>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/comm/thread_world.h"
#include "runtime/core/error.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/layers/parameter.h"
#include "runtime/models/builders.h"
#include "runtime/schedules/simulator.h"
#include "runtime/tensor_parallel/split_model.h"

namespace pf::plan {
namespace {

// A copy of `model` without tensors, split as member `rank` of `world` (no collective runs while
// splitting), or null when it does not split at the world's size (kInvalidArgument).
std::unique_ptr<Model> split_copy(const nlohmann::json& description, const std::shared_ptr<comm::ThreadWorld>& world,
                                  int rank, bool sequence_parallel) {
  std::unique_ptr<Model> copy;
  {
    DeferParameterAllocation defer;
    copy = build_model_from_json(description);
  }
  std::shared_ptr<comm::World> member(world, &world->member(rank));
  try {
    split_model_for_tensor_parallel(
        *copy, std::make_shared<TensorParallelGroup>(member, TensorReduction::kAllReduce, 600.0, sequence_parallel));
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument) throw;
    return nullptr;
  }
  return copy;
}

// The bytes each of T members of the split model keeps, per top-level layer (the largest over the
// members): the members, threads of a ThreadWorld, each allocate their slices and run one F, B, W
// pass on `sample`. Null when the model does not split at T so, or the pass refuses the sample
// (kInvalidArgument: sequences whose steps T does not divide).
std::unique_ptr<TensorParallelProfile::MemberBytes> measure_member_bytes(const nlohmann::json& description, int T,
                                                                         bool sequence_parallel, const Batch& sample) {
  auto world = std::make_shared<comm::ThreadWorld>(T);
  std::vector<std::unique_ptr<Model>> members;
  for (int r = 0; r < T; ++r) {
    members.push_back(split_copy(description, world, r, sequence_parallel));
    if (!members.back()) return nullptr;
    for (Parameter* p : members.back()->parameters()) allocate_parameter(*p);
  }
  std::vector<MicroBatchCosts> bytes(static_cast<size_t>(T));
  std::vector<std::exception_ptr> errors(static_cast<size_t>(T));
  std::vector<std::thread> threads;
  for (int r = 0; r < T; ++r) {
    threads.emplace_back([&, r] {
      try {
        cpu::set_blas_threads_for_this_thread(1);
        bytes[static_cast<size_t>(r)] = measure_micro_batch_bytes(*members[static_cast<size_t>(r)], sample);
      } catch (const std::exception& e) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        world->member(r).abort(e.what());  // the others' collectives give up instead of waiting
      }
    });
  }
  for (std::thread& t : threads) t.join();
  // The first member's own error (the others' are cancellations naming it).
  for (const std::exception_ptr& e : errors) {
    if (!e) continue;
    try {
      std::rethrow_exception(e);
    } catch (const Error& error) {
      if (error.code() == ErrorCode::kCancelled) continue;
      if (error.code() == ErrorCode::kInvalidArgument) return nullptr;
      throw;
    }
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  auto out = std::make_unique<TensorParallelProfile::MemberBytes>();
  out->tensor_parallel = T;
  out->sequence_parallel = sequence_parallel;
  const size_t n = bytes[0].layers.size();
  for (auto* field : {&out->activation_bytes, &out->shared_with_previous_bytes, &out->weight_pending_bytes,
                      &out->input_bytes})
    field->assign(n, 0);
  for (const MicroBatchCosts& member : bytes) {
    for (size_t i = 0; i < n; ++i) {
      const LayerCosts& l = member.layers[i];
      out->activation_bytes[i] = std::max(out->activation_bytes[i], l.activation_bytes);
      out->shared_with_previous_bytes[i] = std::max(out->shared_with_previous_bytes[i], l.shared_with_previous_bytes);
      out->weight_pending_bytes[i] = std::max(out->weight_pending_bytes[i], l.weight_pending_bytes);
      out->input_bytes[i] = std::max(out->input_bytes[i], l.input_bytes);
    }
  }
  return out;
}

}  // namespace

TensorParallelProfile profile_tensor_parallel(const Model& model, int max_degree, const Batch* sample) {
  TensorParallelProfile out;
  const nlohmann::json description = model.to_json();
  for (int T = 2; T <= max_degree; ++T) {
    const std::unique_ptr<Model> copy = split_copy(description, std::make_shared<comm::ThreadWorld>(T), 0, false);
    if (!copy) continue;
    out.degrees.push_back(T);
    if (sample != nullptr) {
      out.member_bytes_rows = sample->rows();
      for (bool sequence_parallel : {false, true})
        if (auto m = measure_member_bytes(description, T, sequence_parallel, *sample)) out.member_bytes.push_back(*m);
    }
    if (out.degrees.size() > 1) continue;  // the same layers split at every T
    for (const auto& layer : copy->layers()) {
      int64_t split = 0;
      for (const Parameter* p : layer->parameters())
        if (p->shard.split()) split += shape_numel(p->shard.full);
      const Layer::TensorParallelFloats floats = layer->tensor_parallel_floats();
      out.split_parameters.push_back(split);
      out.forward_floats.push_back(floats.forward);
      out.backward_floats.push_back(floats.backward);
    }
  }
  return out;
}

MicroBatchCosts tensor_parallel_costs(const TensorParallelProfile& tensor_parallel, MicroBatchCosts costs, int T,
                                      double bandwidth, double latency, bool sequence_parallel) {
  PF_CHECK_ARG(!sequence_parallel || T > 1, "sequence parallelism needs tensor_parallel > 1");
  if (T == 1) return costs;
  PF_CHECK_ARG(std::find(tensor_parallel.degrees.begin(), tensor_parallel.degrees.end(), T) !=
                   tensor_parallel.degrees.end(),
               "the model does not split at tensor_parallel ", T,
               tensor_parallel.degrees.empty() ? std::string(" (nothing in it splits)") : std::string());
  PF_CHECK_ARG(tensor_parallel.split_parameters.size() == costs.layers.size(), "the tensor-parallel profile has ",
               tensor_parallel.split_parameters.size(), " layers, the costs ", costs.layers.size());
  const TensorParallelProfile::MemberBytes* member = tensor_parallel.member(T, sequence_parallel);
  PF_CHECK_ARG(member != nullptr || !sequence_parallel, "the profile has no sequence-parallel member bytes at ",
               "tensor_parallel ", T, " (the model does not split by sequence steps there, or was profiled without ",
               "a sample micro-batch)");
  if (member != nullptr) {
    PF_CHECK_ARG(member->activation_bytes.size() == costs.layers.size() && tensor_parallel.member_bytes_rows > 0,
                 "the tensor-parallel member bytes have ", member->activation_bytes.size(), " layers, the costs ",
                 costs.layers.size());
    // Bytes per row, as at_rows scales a profiled size to another.
    const double k = static_cast<double>(costs.rows) / static_cast<double>(tensor_parallel.member_bytes_rows);
    const auto scaled = [k](int64_t b) { return static_cast<int64_t>(std::llround(static_cast<double>(b) * k)); };
    for (size_t i = 0; i < costs.layers.size(); ++i) {
      LayerCosts& l = costs.layers[i];
      l.activation_bytes = scaled(member->activation_bytes[i]);
      l.shared_with_previous_bytes = scaled(member->shared_with_previous_bytes[i]);
      l.weight_pending_bytes = scaled(member->weight_pending_bytes[i]);
      l.input_bytes = scaled(member->input_bytes[i]);
    }
  }
  const double tokens = static_cast<double>(costs.tokens);
  for (size_t i = 0; i < costs.layers.size(); ++i) {
    LayerCosts& l = costs.layers[i];
    const double split = static_cast<double>(tensor_parallel.split_parameters[i]);
    const double share = l.parameters > 0 ? split / static_cast<double>(l.parameters) : 0.0;
    const double stays = 1.0 - share + share / T;
    const auto allreduce = [&](int64_t floats) {
      return floats > 0 ? sched::ring_allreduce_time(4.0 * tokens * static_cast<double>(floats), T, bandwidth, latency)
                        : 0.0;
    };
    l.forward_s *= stays;
    l.backward_input_s *= stays;
    l.tensor_parallel_forward_s = allreduce(tensor_parallel.forward_floats[i]);
    l.tensor_parallel_backward_s = allreduce(tensor_parallel.backward_floats[i]);
    l.backward_weight_s *= stays;
    l.parameters = l.parameters - tensor_parallel.split_parameters[i] + tensor_parallel.split_parameters[i] / T;
  }
  return costs;
}

}  // namespace pf::plan
