#include "runtime/layers/parameter.h"

#include "runtime/core/checked_math.h"
#include "runtime/core/limits.h"
#include "runtime/layers/cuda_dispatch.h"

namespace pf {
namespace {

thread_local ParameterSizing* current_sizing = nullptr;

}  // namespace

ParameterSizing::ParameterSizing() : outer_(current_sizing) { current_sizing = this; }
ParameterSizing::~ParameterSizing() { current_sizing = outer_; }

Parameter make_parameter(const std::string& name, const Shape& shape, InitSpec init) {
  for (int64_t d : shape) {
    PF_CHECK_ARG(d >= 1 && d <= limits::kMaxDimension, "parameter '", name, "': dimension ", d, " of shape ",
                 shape_to_string(shape), " is outside [1, ", limits::kMaxDimension, "]");
  }
  Parameter p;
  p.name = name;
  p.shape = shape;
  p.init = init;
  if (ParameterSizing* sizing = current_sizing) {
    const int64_t bytes = checked_mul(shape_numel(shape), 4, "parameter '" + name + "' bytes");
    sizing->bytes_ = checked_add(sizing->bytes_, bytes, "the model's parameter bytes");
    ++sizing->count_;
    return p;
  }
  allocate_parameter(p);
  return p;
}

void allocate_parameter(Parameter& p) {
  if (!p.value.defined()) {
    MemoryCategoryScope scope(MemoryCategory::kParameters);
    p.value = Tensor::zeros(p.shape);
  }
  if (!p.grad.defined()) {
    MemoryCategoryScope scope(MemoryCategory::kGradients);
    p.grad = Tensor::zeros(p.shape);
  }
}

void release_parameter(Parameter& p) {
  p.value = Tensor();
  p.grad = Tensor();
}

void split_parameter(Parameter& p, int dim, int part, int parts, const std::vector<int64_t>& blocks) {
  PF_CHECK_ARG(!p.shard.split(), "parameter '", p.name, "' is already split");
  PF_CHECK_ARG(dim >= 0 && dim < static_cast<int>(p.shape.size()), "parameter '", p.name,
               "': no dimension ", dim, " to split in ", shape_to_string(p.shape));
  PF_CHECK_ARG(parts >= 1 && part >= 0 && part < parts, "parameter '", p.name, "': part ", part, " of ", parts);
  PF_CHECK_ARG(p.shape[static_cast<size_t>(dim)] % parts == 0, "parameter '", p.name, "': dimension ", dim,
               " of ", shape_to_string(p.shape), " (", p.shape[static_cast<size_t>(dim)],
               ") is not divisible by the tensor-parallel size ", parts);
  int64_t sum = 0;
  for (int64_t b : blocks) {
    PF_CHECK_ARG(b > 0 && b % parts == 0, "parameter '", p.name, "': block of ", b, " along dimension ", dim,
                 " is not divisible by the tensor-parallel size ", parts);
    sum += b;
  }
  PF_CHECK_ARG(blocks.empty() || sum == p.shape[static_cast<size_t>(dim)], "parameter '", p.name, "': blocks sum to ",
               sum, ", not dimension ", dim, " of ", shape_to_string(p.shape));
  if (parts == 1) return;
  p.shard.blocks = blocks;
  p.shard.dim = dim;
  p.shard.part = part;
  p.shard.parts = parts;
  p.shard.full = p.shape;
  p.shape[static_cast<size_t>(dim)] /= parts;
  if (p.allocated()) {
    release_parameter(p);
    allocate_parameter(p);
  }
}

int64_t full_tensor_index(const Parameter& p, int64_t index) {
  if (!p.shard.split()) return index;
  const size_t d = static_cast<size_t>(p.shard.dim);
  int64_t inner = 1;
  for (size_t i = d + 1; i < p.shape.size(); ++i) inner *= p.shape[i];
  const int64_t extent = p.shape[d];
  const int64_t outer = index / (inner * extent);
  int64_t k = index / inner % extent;
  const int64_t j = index % inner;
  // k is in this member's slice of one block: where that slice lies in the full dimension.
  int64_t start = 0, slice = extent;
  for (int64_t block : p.shard.blocks) {
    slice = block / p.shard.parts;
    if (k < slice) break;
    k -= slice;
    start += block;
  }
  return (outer * p.shard.full[d] + start + p.shard.part * slice + k) * inner + j;
}

const Shape& whole_shape(const Parameter& p) { return p.shard.split() ? p.shard.full : p.shape; }

void take_slice(const Parameter& p, const float* whole, float* slice) {
  const int64_t n = shape_numel(p.shape);
  for (int64_t e = 0; e < n; ++e) slice[e] = whole[full_tensor_index(p, e)];
}

void place_slice(const Parameter& p, int part, const float* slice, float* whole) {
  Parameter member;
  member.shape = p.shape;
  member.shard = p.shard;
  member.shard.part = part;
  const int64_t n = shape_numel(p.shape);
  for (int64_t e = 0; e < n; ++e) whole[full_tensor_index(member, e)] = slice[e];
}

void gather_whole(const Parameter& p, const float* slice, TensorParallelGroup& group, const std::string& what,
                  float* whole) {
  const size_t bytes = static_cast<size_t>(shape_numel(p.shape)) * sizeof(float);
  const std::vector<char> all = group.all_gather(slice, bytes, what);
  for (int r = 0; r < group.size(); ++r)
    place_slice(p, r, reinterpret_cast<const float*>(all.data() + static_cast<size_t>(r) * bytes), whole);
}

void accumulate_over_sequence(TensorParallelGroup* group, const std::vector<Parameter*>& parameters,
                              const std::function<void(const std::vector<Tensor>&)>& accumulate,
                              const std::string& what) {
  std::vector<Tensor> grads;
  for (Parameter* p : parameters) grads.push_back(p->grad);
  if (group == nullptr) {
    accumulate(grads);
    return;
  }
  // One zeroed scratch on the gradients' device, a view of it per parameter: one collective for all.
  int64_t total = 0;
  for (const Tensor& g : grads) total += g.numel();
  const Tensor scratch = Tensor::zeros({total}, DType::kF32, grads.front().device());
  std::vector<Tensor> sums;
  int64_t at = 0;
  for (const Tensor& g : grads) {
    sums.push_back(scratch.slice_rows(at, at + g.numel()).reshape(g.shape()));
    at += g.numel();
  }
  accumulate(sums);
  group->all_reduce_sum(scratch, what);
  for (size_t i = 0; i < grads.size(); ++i) {
    if (is_cuda(grads[i])) {
      grads[i].copy_from(cuda_backend().add(grads[i], sums[i]));
      continue;
    }
    float* g = grads[i].f32();
    const float* sum = sums[i].f32();
    for (int64_t j = 0, n = grads[i].numel(); j < n; ++j) g[j] += sum[j];
  }
}

}  // namespace pf
