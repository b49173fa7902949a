#include "runtime/layers/embedding.h"

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/layers/cuda_dispatch.h"

namespace pf {

Embedding::Embedding(std::string name, int64_t vocab, int64_t seq_len, int64_t dim, float init_std, bool positions,
                     TensorSplit split)
    : Layer(std::move(name)), vocab_(vocab), seq_len_(seq_len), dim_(dim), init_std_(init_std), positions_(positions),
      split_(split), tokens_held_(vocab) {
  PF_CHECK_ARG(vocab_ > 0 && seq_len_ > 0 && dim_ > 0, "embedding '", this->name(),
               "': vocab, seq_len and dim must be > 0, got ", vocab_, ", ", seq_len_, " and ", dim_);
  PF_CHECK_ARG(split_ == TensorSplit::kNone || split_ == TensorSplit::kVocab, "embedding '", this->name(),
               "': an embedding splits by \"vocab\" only, not \"", tensor_split_name(split_), "\"");
  token_weight_ = make_parameter(join_name(this->name(), "token_weight"), {vocab_, dim_},
                                 InitSpec::normal(init_std_));
  if (positions_) {
    position_weight_ = make_parameter(join_name(this->name(), "position_weight"), {seq_len_, dim_},
                                      InitSpec::normal(init_std_));
  }
}

nlohmann::json Embedding::config() const {
  nlohmann::json j = {{"type", type()},     {"name", name()}, {"vocab", vocab_},
                      {"seq_len", seq_len_}, {"dim", dim_},    {"init_std", init_std_}};
  if (!positions_) j["positions"] = false;
  if (split_ != TensorSplit::kNone) j["parallel"] = tensor_split_name(split_);
  return j;
}

bool Embedding::choose_tensor_split(TensorSplit split, int parts) {
  PF_CHECK_ARG(group_ == nullptr, "embedding '", name(), "' is already split");
  if (split != TensorSplit::kNone && (split != TensorSplit::kVocab || parts <= 0 || vocab_ % parts != 0)) return false;
  split_ = split;
  return true;
}

void Embedding::split_for_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) {
  PF_CHECK_ARG(group != nullptr, "embedding '", name(), "': the tensor-parallel group is null");
  PF_CHECK_ARG(group_ == nullptr, "embedding '", name(), "' is already split");
  if (split_ == TensorSplit::kNone || group->size() == 1) return;
  const int parts = group->size();
  PF_CHECK_ARG(vocab_ % parts == 0, "embedding '", name(), "': a vocabulary of ", vocab_,
               " tokens is not divisible by the tensor-parallel size ", parts);
  split_parameter(token_weight_, 0, group->rank(), parts);
  tokens_held_ = vocab_ / parts;
  first_token_ = tokens_held_ * group->rank();
  group_ = group;
}

Layer::TensorParallelFloats Embedding::tensor_parallel_floats() {
  TensorParallelFloats floats;
  if (group_ != nullptr) floats.forward = dim_;  // the members' looked-up rows, summed
  return floats;
}

std::vector<Parameter*> Embedding::parameters() {
  if (!positions_) return {&token_weight_};
  return {&token_weight_, &position_weight_};
}

Tensor Embedding::forward(const Tensor& input, SavedContext& ctx) {
  PF_CHECK_ARG(input.defined() && input.dtype() == DType::kI32 && input.rank() == 2 &&
                   input.dim(1) <= seq_len_,
               "embedding '", name(), "': expected i32 token ids [B, T] with T <= ", seq_len_,
               ", got ", input.defined() ? dtype_name(input.dtype()) : "undefined", " ",
               shape_to_string(input.shape()));
  check_same_device(type(), name(), "input", input.device(), "the parameters", token_weight_.value.device());
  const int64_t batch = input.dim(0), steps = input.dim(1), offset = ctx.position_offset();
  PF_CHECK_ARG(offset + steps <= seq_len_, "embedding '", name(), "': a sequence slice at position ", offset,
               " of ", steps, " tokens runs past seq_len ", seq_len_);
  if (is_cuda(input) && offset != 0)
    fail(ErrorCode::kUnimplemented, "embedding '", name(), "': sequence slices (seq_slices > 1) run on the CPU only");
  // CUDA: the ids are checked on a host copy (the kernel would turn a bad id into NaN outputs).
  const std::vector<int32_t> host_ids = is_cuda(input) ? cuda_backend().i32_to_host(input) : std::vector<int32_t>();
  const int32_t* ids = is_cuda(input) ? host_ids.data() : input.i32();
  for (int64_t r = 0; r < batch * steps; ++r) {
    PF_CHECK_ARG(ids[r] >= 0 && ids[r] < vocab_, "embedding '", name(), "': token id ", ids[r],
                 " at position [", r / steps, ", ", r % steps, "] is out of range [0, ", vocab_, ")");
  }
  if (is_cuda(input)) return forward_cuda(input, ids, ctx);
  // Each row's token row (at T > 1: zeros for ids this member does not hold, the members' rows then
  // summed over the group, exactly: one member contributes each), then its position's row.
  Tensor output = Tensor::empty({batch, steps, dim_});
  const float* tok = token_weight_.value.f32();
  float* y = output.f32();
  for (int64_t r = 0; r < batch * steps; ++r) {
    const int64_t row = static_cast<int64_t>(ids[r]) - first_token_;
    float* yr = y + r * dim_;
    if (row < 0 || row >= tokens_held_) {
      for (int64_t i = 0; i < dim_; ++i) yr[i] = 0.0f;
      continue;
    }
    const float* tr = tok + row * dim_;
    for (int64_t i = 0; i < dim_; ++i) yr[i] = tr[i];
  }
  // Sequence parallelism: the sum lands on this member's steps [first_step, first_step + held) only.
  if (group_ != nullptr) output = group_->sum_partials(output, "embedding '" + name() + "' forward");
  y = output.f32();
  const int64_t held = output.dim(1), first_step = sequence_parallel() ? group_->rank() * held : 0;
  if (positions_) {
    for (int64_t r = 0; r < batch * held; ++r) {
      const float* pr = position_weight_.value.f32() + (offset + first_step + r % held) * dim_;
      float* yr = y + r * dim_;
      for (int64_t i = 0; i < dim_; ++i) yr[i] += pr[i];
    }
  }
  ctx.save("input", input);
  return output;
}

Tensor Embedding::forward_cuda(const Tensor& input, const int32_t* ids, SavedContext& ctx) {
  if (group_ == nullptr) {
    Tensor output = cuda_backend().embedding_forward(input, token_weight_.value, position_weight_.value);
    ctx.save("input", input);
    return output;
  }
  // Vocabulary parallelism: this member's rows of the ids it holds (the others kEmbeddingIdNotHeld:
  // zero rows), member 0 adding every position's row, then summed over the group. One member
  // contributes each token's row and one each position's, so the sum is exactly token + position,
  // as on the CPU.
  std::vector<int32_t> held(static_cast<size_t>(input.numel()));
  for (size_t r = 0; r < held.size(); ++r) {
    const int64_t row = static_cast<int64_t>(ids[r]) - first_token_;
    held[r] = row >= 0 && row < tokens_held_ ? static_cast<int32_t>(row) : kEmbeddingIdNotHeld;
  }
  const Tensor held_ids = Tensor::from_ints(input.shape(), held).to_device(input.device());
  Tensor output = cuda_backend().embedding_forward(held_ids, token_weight_.value,
                                                   group_->rank() == 0 ? position_weight_.value : Tensor());
  output = group_->sum_partials(output, "embedding '" + name() + "' forward");
  ctx.save("input", held_ids);  // W adds the rows of the ids this member holds, and every position's
  return output;
}

Tensor Embedding::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  const Tensor& input = ctx.get("input");
  const int64_t parts = sequence_parallel() ? group_->size() : 1;
  const Shape expected = {input.dim(0), input.dim(1) / parts, dim_};
  PF_CHECK_ARG(grad_output.defined() && grad_output.dtype() == DType::kF32 &&
                   grad_output.shape() == expected,
               "embedding '", name(), "': output gradient ", shape_to_string(grad_output.shape()),
               " does not match the forward output ", shape_to_string(expected));
  check_same_device(type(), name(), "output gradient", grad_output.device(), "the forward input",
                    input.device());
  // Sequence parallelism: every member's steps, for the rows and positions of the whole sequence.
  ctx.save("grad_output", sequence_parallel()
                              ? group_->gather_sequence(grad_output, "embedding '" + name() + "' output gradient")
                              : grad_output);
  return Tensor();  // token ids have no gradient
}

void Embedding::backward_weight(SavedContext& ctx) {
  const Tensor& input = ctx.get("input");
  const Tensor& grad_output = ctx.get("grad_output");
  if (is_cuda(input)) {
    cuda_backend().embedding_backward_weight(input, grad_output, token_weight_.grad, position_weight_.grad);
    ctx.clear();
    return;
  }
  const int64_t steps = input.dim(1), rows = input.numel(), offset = ctx.position_offset();
  const int32_t* ids = input.i32();
  const float* dy = grad_output.f32();
  float* dtok = token_weight_.grad.f32();
  // Scatter-add in row order, so repeated ids always sum in the same order (a vocabulary-parallel
  // member adds the rows of the ids it holds).
  for (int64_t r = 0; r < rows; ++r) {
    const float* dyr = dy + r * dim_;
    const int64_t row = static_cast<int64_t>(ids[r]) - first_token_;
    float* tr = row >= 0 && row < tokens_held_ ? dtok + row * dim_ : nullptr;
    if (tr != nullptr)
      for (int64_t i = 0; i < dim_; ++i) tr[i] += dyr[i];
    if (!positions_) continue;
    float* pr = position_weight_.grad.f32() + (offset + r % steps) * dim_;
    for (int64_t i = 0; i < dim_; ++i) pr[i] += dyr[i];
  }
  ctx.clear();
}

}  // namespace pf
