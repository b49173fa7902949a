#include "runtime/layers/linear.h"

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/kernels/cpu/rows.h"
#include "runtime/layers/cuda_dispatch.h"

namespace pf {

std::string join_name(const std::string& prefix, const std::string& suffix) {
  return prefix.empty() ? suffix : prefix + "." + suffix;
}

Linear::Linear(std::string name, int64_t in_features, int64_t out_features, bool bias,
               float init_stddev, const std::string& tied_to, TensorSplit split)
    : Layer(std::move(name)), in_(in_features), out_(out_features), has_bias_(bias), split_(split),
      init_stddev_(init_stddev) {
  PF_CHECK_ARG(in_ > 0 && out_ > 0, "linear '", this->name(), "': in and out features must be > 0, got ",
               in_, " and ", out_);
  weight_ = make_parameter(join_name(this->name(), "weight"), {out_, in_}, InitSpec::normal(init_stddev));
  weight_.tied_to = tied_to;
  if (has_bias_) bias_ = make_parameter(join_name(this->name(), "bias"), {out_}, InitSpec::zeros());
}

nlohmann::json Linear::config() const {
  const int64_t parts = group_ ? group_->size() : 1;
  const int64_t in = split_ == TensorSplit::kRow ? in_ * parts : in_;
  const int64_t out = split_ == TensorSplit::kColumn || split_ == TensorSplit::kVocab ? out_ * parts : out_;
  nlohmann::json j = {{"type", type()}, {"name", name()}, {"in", in}, {"out", out}, {"bias", has_bias_},
                      {"init_std", init_stddev_}};
  if (!weight_.tied_to.empty()) j["tied_to"] = weight_.tied_to;
  if (split_ != TensorSplit::kNone) j["parallel"] = tensor_split_name(split_);
  return j;
}

bool Linear::choose_tensor_split(TensorSplit split, int parts) {
  PF_CHECK_ARG(group_ == nullptr, "linear '", name(), "' is already split");
  if (split == TensorSplit::kVocab) {
    if (parts <= 0 || out_ % parts != 0) return false;
  } else if (!weight_.tied_to.empty()) {
    return false;
  }
  split_ = split;
  return true;
}

void Linear::set_output_blocks(std::vector<int64_t> blocks) {
  PF_CHECK_ARG(group_ == nullptr, "linear '", name(), "' is already split");
  int64_t sum = 0;
  for (int64_t b : blocks) sum += b;
  PF_CHECK_ARG(sum == out_, "linear '", name(), "': output blocks summing to ", sum, " for ", out_, " outputs");
  output_blocks_ = std::move(blocks);
}

void Linear::split_for_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) {
  PF_CHECK_ARG(group != nullptr, "linear '", name(), "': the tensor-parallel group is null");
  PF_CHECK_ARG(group_ == nullptr, "linear '", name(), "' is already split");
  if (split_ == TensorSplit::kNone || group->size() == 1) return;
  const int parts = group->size();
  PF_CHECK_ARG(weight_.tied_to.empty() || split_ == TensorSplit::kVocab, "linear '", name(), "': a tied weight (tied to '",
               weight_.tied_to, "') can only be split by the vocabulary (\"parallel\": \"vocab\", with its embedding), not ",
               tensor_split_name(split_));
  if (split_ == TensorSplit::kColumn || split_ == TensorSplit::kVocab) {
    PF_CHECK_ARG(out_ % parts == 0, "linear '", name(), "': ", out_, " output features are not divisible by the ",
                 "tensor-parallel size ", parts);
    split_parameter(weight_, 0, group->rank(), parts, output_blocks_);
    if (has_bias_) split_parameter(bias_, 0, group->rank(), parts, output_blocks_);
    out_ /= parts;
  } else {
    PF_CHECK_ARG(in_ % parts == 0, "linear '", name(), "': ", in_, " input features are not divisible by the ",
                 "tensor-parallel size ", parts);
    split_parameter(weight_, 1, group->rank(), parts);
    in_ /= parts;
  }
  group_ = group;
}

void split_column_row_pair(Linear& column, Linear& row, const std::shared_ptr<TensorParallelGroup>& group,
                           std::vector<int64_t> column_blocks) {
  column.choose_tensor_split(TensorSplit::kColumn, group->size());
  if (!column_blocks.empty()) column.set_output_blocks(std::move(column_blocks));
  row.choose_tensor_split(TensorSplit::kRow, group->size());
  column.split_for_tensor_parallel(group);
  row.split_for_tensor_parallel(group);
}

std::vector<Parameter*> Linear::parameters() {
  if (has_bias_) return {&weight_, &bias_};
  return {&weight_};
}

void Linear::check_input(const Tensor& input) const {
  PF_CHECK_ARG(input.dtype() == DType::kF32 && input.rank() >= 1 && input.dim(-1) == in_, "linear '",
               name(), "': expected f32 input [..., ", in_, "], got ", dtype_name(input.dtype()), " ",
               shape_to_string(input.shape()));
  check_same_device(type(), name(), "input", input.device(), "the parameters", weight_.value.device());
}

Tensor Linear::forward(const Tensor& input, SavedContext& ctx) {
  check_input(input);
  if (is_cuda(input)) return forward_cuda(input, ctx);
  return forward_cpu(input, nullptr, ctx);
}

Tensor Linear::forward_cuda(const Tensor& given, SavedContext& ctx) {
  const bool row_split = split_across_group() && split_ == TensorSplit::kRow;
  const Tensor input = whole_input(given);
  // A row split's bias enters member 0's partial product, so the sum holds it once.
  const bool with_bias = has_bias_ && (!row_split || group_->rank() == 0);
  Tensor output = cuda_backend().linear_forward(input, weight_.value, with_bias ? bias_.value : Tensor());
  if (row_split) output = group_->sum_partials(output, collective("forward"));
  ctx.save("input", input);
  return output;
}

Tensor Linear::whole_input(const Tensor& given) const {
  // Sequence parallelism: a column split's input arrives as the members' steps.
  if (!sequence_parallel() || split_ == TensorSplit::kRow) return given;
  return group_->gather_sequence(given, collective("input"));
}

Tensor Linear::forward_residual(const Tensor& input, const Tensor& residual, SavedContext& ctx) {
  check_input(input);
  const Shape out_shape = output_shape(input.shape());
  PF_CHECK_ARG(residual.defined() && residual.dtype() == DType::kF32 && residual.shape() == out_shape,
               "linear '", name(), "': residual ", residual.defined() ? shape_to_string(residual.shape()) : "undefined",
               " does not match the output ", shape_to_string(out_shape));
  PF_INTERNAL_CHECK(!is_cuda(input) && !is_cuda(residual), "linear '", name(),
                    "': the folded residual runs on CPU tensors only");
  return forward_cpu(input, &residual, ctx);
}

Shape Linear::output_shape(const Shape& input_shape) const {
  Shape shape = input_shape;
  shape.back() = out_;
  if (sequence_parallel() && split_ == TensorSplit::kRow && shape.size() >= 2) shape[1] /= group_->size();
  return shape;
}

std::string Linear::collective(const char* what) const { return "linear '" + name() + "' " + what; }

Tensor Linear::forward_cpu(const Tensor& given, const Tensor* residual, SavedContext& ctx) {
  // A row split sums the members' partial products first and adds the bias to the sum.
  const bool row_split = split_across_group() && split_ == TensorSplit::kRow;
  const Tensor input = whole_input(given);
  const int64_t rows = input.numel() / in_;
  Shape out_shape = input.shape();
  out_shape.back() = out_;
  Tensor output = Tensor::empty(out_shape);
  float* y = output.f32();
  float beta = 1.0f;
  if (row_split) {
    beta = 0.0f;
  } else if (residual != nullptr && has_bias_) {
    cpu::add_broadcast_rows(rows, out_, residual->f32(), bias_.value.f32(), y);
  } else if (residual != nullptr) {
    output.copy_from(*residual);
  } else if (has_bias_) {
    cpu::broadcast_rows(rows, out_, bias_.value.f32(), y);
  } else {
    beta = 0.0f;
  }
  cpu::gemm(false, true, rows, out_, in_, 1.0f, input.f32(), weight_.value.f32(), beta, y);
  if (row_split) {
    // ((x_0 W_0^T + x_1 W_1^T + ...) + b) + residual, on this member's steps under sequence parallelism.
    output = group_->sum_partials(output, collective("forward"));
    const int64_t out_rows = output.numel() / out_;
    y = output.f32();
    if (has_bias_) cpu::add_broadcast_rows(out_rows, out_, y, bias_.value.f32(), y);
    if (residual != nullptr) cpu::add(out_rows * out_, y, residual->f32(), y);
  }
  ctx.save("input", input);
  return output;
}

Tensor Linear::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  return backward_input(ctx, grad_output, false);
}

Tensor Linear::backward(SavedContext& ctx, const Tensor& grad_output) {
  Tensor grad_input = backward_input(ctx, grad_output, true);
  backward_weight(ctx);  // while the input gradient's all-reduce runs
  wait_input_gradient();
  return grad_input;
}

void Linear::wait_input_gradient() const {
  if (group_ != nullptr) group_->wait_all_reduce();
}

Tensor Linear::backward_input(SavedContext& ctx, const Tensor& given_grad, bool overlap) {
  const Tensor& input = ctx.get("input");
  const Shape expected = output_shape(input.shape());
  PF_CHECK_ARG(given_grad.defined() && given_grad.numel() == shape_numel(expected), "linear '", name(),
               "': output gradient ", given_grad.defined() ? shape_to_string(given_grad.shape()) : "undefined",
               " does not match the forward output ", shape_to_string(expected));
  const bool column_split = split_across_group() && (split_ == TensorSplit::kColumn || split_ == TensorSplit::kVocab);
  // Sequence parallelism: a row split's output gradient arrives as the members' steps.
  const Tensor grad_output = sequence_parallel() && !column_split
                                 ? group_->gather_sequence(given_grad.reshape(expected), collective("output gradient"))
                                 : given_grad;
  check_same_device(type(), name(), "output gradient", grad_output.device(), "the parameters",
                    weight_.value.device());
  Tensor grad_input;
  if (is_cuda(grad_output)) {
    grad_input = cuda_backend().linear_backward_input(grad_output, weight_.value, input.shape());
  } else {
    grad_input = Tensor::empty(input.shape());
    cpu::gemm(false, false, input.numel() / in_, in_, out_, 1.0f, grad_output.f32(), weight_.value.f32(), 0.0f,
              grad_input.f32());
  }
  if (column_split && sequence_parallel() && overlap)
    grad_input = group_->start_reduce_scatter_sequence(grad_input, collective("input gradient"));
  else if (column_split && sequence_parallel())
    grad_input = group_->reduce_scatter_sequence(grad_input, collective("input gradient"));
  else if (column_split && overlap)
    group_->start_all_reduce_sum(grad_input, collective("input gradient"));
  else if (column_split)
    group_->all_reduce_sum(grad_input, collective("input gradient"));
  ctx.save("grad_output", grad_output);
  return grad_input;
}

Tensor Linear::backward_input_bias_grad(SavedContext& ctx, const Tensor& grad_output, const Tensor& bias_grad,
                                        bool overlap) {
  PF_CHECK_ARG(bias_grad.defined() && bias_grad.dtype() == DType::kF32 && bias_grad.numel() == out_, "linear '",
               name(), "': bias gradient ", bias_grad.defined() ? shape_to_string(bias_grad.shape()) : "undefined",
               " does not match ", out_, " outputs");
  PF_INTERNAL_CHECK(!is_cuda(grad_output) && !is_cuda(bias_grad), "linear '", name(),
                    "': the folded bias gradient runs on CPU tensors only");
  Tensor grad_input = backward_input(ctx, grad_output, overlap);
  if (has_bias_) ctx.save("bias_grad", bias_grad);
  return grad_input;
}

void Linear::backward_weight(SavedContext& ctx) {
  const Tensor& input = ctx.get("input");
  const Tensor& grad_output = ctx.get("grad_output");
  if (is_cuda(input)) {
    check_same_device(type(), name(), "input", input.device(), "the gradients", weight_.grad.device());
    cuda_backend().linear_backward_weight(input, grad_output, weight_.grad, has_bias_ ? bias_.grad : Tensor());
    ctx.clear();
    return;
  }
  const int64_t rows = input.numel() / in_;
  // dW += dY^T X ; db += column sums of dY (in row order, so the sum order is fixed), or the sums
  // backward_input_bias_grad was given.
  cpu::gemm(true, false, out_, in_, rows, 1.0f, grad_output.f32(), input.f32(), 1.0f, weight_.grad.f32());
  if (has_bias_ && ctx.has("bias_grad")) {
    cpu::add(out_, bias_.grad.f32(), ctx.get("bias_grad").f32(), bias_.grad.f32());
  } else if (has_bias_) {
    cpu::accumulate_column_sums(rows, out_, grad_output.f32(), bias_.grad.f32());
  }
  ctx.clear();
}

}  // namespace pf
