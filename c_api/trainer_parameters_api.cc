// pf_trainer_* on a trainer's parameters and checkpoints: read and write a parameter (with one
// process per rank, in the process that holds it), its shape, the collective checksum,
// checkpoints (with one process per rank a folder of shards, written by every process), and
// (since 0.17) the weights of Transformers folders, loaded into the parameters this process holds
// or exported from a process that holds them all.
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
#include "runtime/interop/hf_models.h"
#include "runtime/run/checkpoint_series.h"
#include "runtime/schedules/timeline.h"
#include "runtime/tensor/allocator.h"
#include "runtime/tensor/device.h"
#include "runtime/tensor/memory_tracker.h"

namespace {

using pf::capi::guard;
using pf::capi::require;

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


}  // namespace

extern "C" {

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
                                                         : pf::whole_parameter_checksum(
                                                               trainer->trainer->model().parameters(),
                                                               trainer->trainer->model().tensor_parallel_group().get());
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

pf_status* pf_trainer_load_hf_weights(pf_trainer* trainer, const char* dir) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    const std::string folder = pf::capi::require_string(dir, "dir");
    pf::load_hf_weights(trainer->trainer->model(), trainer->trainer->local_parameters(), folder);
  });
}

pf_status* pf_trainer_export_hf(pf_trainer* trainer, const char* names, const char* dir) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    const pf::HfFamily family = pf::parse_hf_family(pf::capi::require_string(names, "names"), "names");
    const std::string folder = pf::capi::require_string(dir, "dir");
    // With one process per rank a process holds only its stages' parameters: export_hf_folder
    // refuses a parameter this process does not hold (kFailedPrecondition).
    pf::export_hf_folder(trainer->trainer->model(), family, folder);
  });
}

}  // extern "C"
