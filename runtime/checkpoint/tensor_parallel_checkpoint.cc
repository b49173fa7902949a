#include "runtime/checkpoint/tensor_parallel_checkpoint.h"

#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/core/error.h"
#include "runtime/models/builders.h"
#include "runtime/optim/optimizer.h"
#include "runtime/tensor/memory_tracker.h"
#include "runtime/tensor_parallel/group.h"
#include "runtime/train/sequential_trainer.h"

namespace pf {
namespace {

TensorParallelGroup& group_of(const Trainer& trainer) {
  const auto& group = trainer.model().tensor_parallel_group();
  PF_INTERNAL_CHECK(group != nullptr, "tensor-parallel checkpoint of a model that is not split");
  return *group;
}

// A whole copy of the split model, with a sequential trainer of the member's options over it.
std::unique_ptr<SequentialTrainer> whole_copy(const Trainer& trainer) {
  const auto* sequential = dynamic_cast<const SequentialTrainer*>(&trainer);
  PF_INTERNAL_CHECK(sequential != nullptr, "tensor-parallel checkpoints of the sequential trainer only");
  std::shared_ptr<Model> whole = build_model_from_json(trainer.model().to_json());
  PF_INTERNAL_CHECK(whole->parameters().size() == trainer.model().parameters().size(),
                    "the whole copy of a split model has other parameters");
  auto copy = std::make_unique<SequentialTrainer>(whole, sequential->options());
  copy->set_run_description(trainer.run_description());
  return copy;
}

// Member `part`'s slice of `shard`'s parameter: element e of the slice is element
// full_tensor_index(.., e) of the whole tensor.
Parameter slice_of_member(const Parameter& mine, int part) {
  Parameter meta;
  meta.name = mine.name;
  meta.shape = mine.shape;
  meta.shard = mine.shard;
  meta.shard.part = part;
  return meta;
}

// Every member's `slice` (of `mine`'s shape and split) put in its place in `whole`.
void gather_into(TensorParallelGroup& group, const Parameter& mine, const Tensor& slice, Tensor& whole) {
  if (!mine.shard.split()) {
    whole.copy_from(slice);
    return;
  }
  const size_t bytes = static_cast<size_t>(slice.nbytes());
  const std::vector<char> all = group.all_gather(slice.data<char>(), bytes, "checkpoint: gathering '" + mine.name + "'");
  float* out = whole.f32();
  for (int r = 0; r < group.size(); ++r) {
    const Parameter member = slice_of_member(mine, r);
    const float* in = reinterpret_cast<const float*>(all.data() + static_cast<size_t>(r) * bytes);
    for (int64_t e = 0, n = slice.numel(); e < n; ++e) out[full_tensor_index(member, e)] = in[e];
  }
}

// This member's slice of `whole`, into `slice`.
void take_slice(const Parameter& mine, const Tensor& whole, Tensor& slice) {
  if (!mine.shard.split()) {
    slice.copy_from(whole);
    return;
  }
  const float* in = whole.f32();
  float* out = slice.f32();
  for (int64_t e = 0, n = slice.numel(); e < n; ++e) out[e] = in[full_tensor_index(mine, e)];
}

// Every member learns whether member 0's write went through; the others throw naming it.
void agree_on_write(TensorParallelGroup& group, std::exception_ptr error, const std::string& path) {
  const char ok = error ? 0 : 1;
  const std::vector<char> all = group.all_gather(&ok, 1, "checkpoint '" + path + "': agreeing on the write");
  if (error) std::rethrow_exception(error);
  if (!all[0])
    fail(ErrorCode::kIoError, "checkpoint '", path, "': tensor parallel rank 0 failed to write it (its own error "
         "says why)");
}

}  // namespace

void save_tensor_parallel_checkpoint(Trainer& trainer, const std::string& path) {
  TensorParallelGroup& group = group_of(trainer);
  std::unique_ptr<SequentialTrainer> whole = whole_copy(trainer);
  const std::vector<Parameter*>& mine = trainer.model().parameters();
  const std::vector<Parameter*>& all = whole->model().parameters();
  auto& state = trainer.optimizer().state();
  auto& whole_state = whole->optimizer().state();
  const std::vector<std::string>& slots = optimizer_slot_names(trainer.optimizer().config().kind);
  for (size_t i = 0; i < mine.size(); ++i) {
    PF_INTERNAL_CHECK(mine[i]->name == all[i]->name, "parameter ", i, " is '", mine[i]->name, "' split, '",
                      all[i]->name, "' whole");
    gather_into(group, *mine[i], mine[i]->value, all[i]->value);
    // The optimizer state slots this parameter has, in the same order on every member.
    for (const std::string& slot : slots) {
      const auto it = state.find(mine[i]->name + "/" + slot);
      if (it == state.end()) continue;
      Tensor whole_slot = Tensor::zeros(all[i]->shape);
      gather_into(group, *mine[i], it->second, whole_slot);
      whole_state[it->first] = whole_slot;
    }
  }
  whole->optimizer().set_steps_taken(trainer.optimizer().steps_taken());
  whole->restore_progress(trainer.metrics().step, trainer.metrics().data_position);
  std::exception_ptr error;
  if (group.rank() == 0) {
    try {
      save_checkpoint(*whole, path);
    } catch (...) {
      error = std::current_exception();
    }
  }
  agree_on_write(group, error, path);
}

void load_tensor_parallel_checkpoint(Trainer& trainer, const std::string& path) {
  group_of(trainer);
  std::unique_ptr<SequentialTrainer> whole = whole_copy(trainer);
  load_checkpoint(*whole, path);
  const std::vector<Parameter*>& mine = trainer.model().parameters();
  const std::vector<Parameter*>& all = whole->model().parameters();
  auto& state = trainer.optimizer().state();
  const auto& whole_state = whole->optimizer().state();
  const std::vector<std::string>& slots = optimizer_slot_names(trainer.optimizer().config().kind);
  state.clear();
  for (size_t i = 0; i < mine.size(); ++i) {
    take_slice(*mine[i], all[i]->value, mine[i]->value);
    for (const std::string& slot : slots) {
      const auto it = whole_state.find(all[i]->name + "/" + slot);
      if (it == whole_state.end()) continue;
      MemoryCategoryScope scope(MemoryCategory::kOptimizerState);
      Tensor my_slot = Tensor::zeros(mine[i]->shape);
      take_slice(*mine[i], it->second, my_slot);
      state[it->first] = my_slot;
    }
  }
  trainer.optimizer().set_steps_taken(whole->optimizer().steps_taken());
  trainer.restore_progress(whole->metrics().step, whole->metrics().data_position);
}

}  // namespace pf
