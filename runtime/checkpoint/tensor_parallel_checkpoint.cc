#include "runtime/checkpoint/tensor_parallel_checkpoint.h"

#include <exception>

#include "runtime/checkpoint/checkpoint_file.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"

namespace pf {

WholeEntries gather_whole_entries(const Trainer& trainer, const std::vector<Parameter*>& params,
                                  TensorParallelGroup& group) {
  WholeEntries whole;
  whole.entries = checkpoint_entries(trainer, params);
  whole.tensors.reserve(whole.entries.size());  // the entries point into it
  for (CheckpointEntry& e : whole.entries) {
    const Parameter& p = *e.parameter;
    if (!p.shard.split()) continue;
    whole.tensors.push_back(Tensor::zeros(whole_shape(p)));
    // (A CUDA member's slice through a host copy.)
    gather_whole(p, e.tensor->to_host().f32(), group, "checkpoint: gathering " + e.name, whole.tensors.back().f32());
    e.tensor = &whole.tensors.back();
  }
  return whole;
}

void save_tensor_parallel_checkpoint(Trainer& trainer, const std::string& path) {
  TensorParallelGroup& group = *trainer.model().tensor_parallel_group();
  const WholeEntries whole = gather_whole_entries(trainer, trainer.model().parameters(), group);
  std::exception_ptr error;
  if (group.rank() == 0) {
    try {
      write_checkpoint_file(path, encode_checkpoint_entries(trainer, whole.entries, path));
      log(LogLevel::kInfo, "saved checkpoint '" + path + "' at step " + std::to_string(trainer.metrics().step));
    } catch (...) {
      error = std::current_exception();
    }
  }
  const char ok = error ? 0 : 1;
  const std::vector<char> all = group.all_gather(&ok, 1, "checkpoint '" + path + "': agreeing on the write");
  if (error) std::rethrow_exception(error);
  if (!all[0])
    fail(ErrorCode::kIoError, "checkpoint '", path, "': tensor parallel rank 0 failed to write it (its own error "
         "says why)");
}

}  // namespace pf
