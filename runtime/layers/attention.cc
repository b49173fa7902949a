#include "runtime/layers/attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/kernels/cpu/flash_attention.h"
#include "runtime/layers/cuda_dispatch.h"

namespace pf {

namespace {

constexpr size_t kQkvChild = 0, kCoreChild = 1, kProjChild = 2;

// Copies the [T, hd] block at columns [col, col + hd) of batch b out of a [B, T, width] tensor
// into a contiguous matrix (gather), or back (scatter).
void gather_block(const float* src, int64_t b, int64_t steps, int64_t width, int64_t col, int64_t hd,
                  float* out) {
  for (int64_t t = 0; t < steps; ++t) {
    const float* s = src + (b * steps + t) * width + col;
    for (int64_t i = 0; i < hd; ++i) out[t * hd + i] = s[i];
  }
}

void scatter_block(const float* in, int64_t b, int64_t steps, int64_t width, int64_t col, int64_t hd,
                   float* dst) {
  for (int64_t t = 0; t < steps; ++t) {
    float* d = dst + (b * steps + t) * width + col;
    for (int64_t i = 0; i < hd; ++i) d[i] = in[t * hd + i];
  }
}

// out[b, t, c] += in[t, c] for a [T, hd] block at columns [col, col + hd) of a [B, T, width] tensor.
void add_block(const float* in, int64_t b, int64_t steps, int64_t width, int64_t col, int64_t hd, float* dst) {
  for (int64_t t = 0; t < steps; ++t) {
    float* d = dst + (b * steps + t) * width + col;
    for (int64_t i = 0; i < hd; ++i) d[i] += in[t * hd + i];
  }
}

// Sequence slicing: the attention-core contexts of the earlier slices of this micro-batch (first
// slice first), each holding its "qkv", and their total length (this slice's position offset).
struct EarlierSlices {
  std::vector<SavedContext*> cores;
  int64_t steps = 0;
};

EarlierSlices earlier_slices(const SavedContext& core, const std::string& name, int64_t batch) {
  EarlierSlices out;
  for (SavedContext* c = core.previous_slice(); c != nullptr; c = c->previous_slice()) {
    PF_INTERNAL_CHECK(c->has("qkv"), "attention '", name,
                      "': the keys and values of an earlier sequence slice are gone (its backward ran first?)");
    const Tensor& qkv = c->get("qkv");
    PF_CHECK_ARG(qkv.dim(0) == batch, "attention '", name, "': an earlier sequence slice has ", qkv.dim(0),
                 " rows, this one ", batch);
    out.cores.push_back(c);
    out.steps += qkv.dim(1);
  }
  std::reverse(out.cores.begin(), out.cores.end());
  return out;
}

// The [L, hd] block at column `col` of qkv (a key or value head) of batch b over the earlier
// slices and then this slice's `qkv` (L = earlier.steps + T); width = qkv's row width.
void gather_keys(const EarlierSlices& earlier, const Tensor& qkv, int64_t b, int64_t width, int64_t col,
                 int64_t hd, float* out) {
  for (const SavedContext* c : earlier.cores) {
    const Tensor& x = c->get("qkv");
    gather_block(x.f32(), b, x.dim(1), width, col, hd, out);
    out += x.dim(1) * hd;
  }
  gather_block(qkv.f32(), b, qkv.dim(1), width, col, hd, out);
}

// Adds the [L, hd] gradient of the key or value head at column `kv_col` of the earlier slices'
// "kv_grad" ([B, T_i, kv_width]: keys | values, created at zero on first use) of batch b; returns
// where this slice's own rows start.
const float* add_to_earlier(const EarlierSlices& earlier, const float* grad, int64_t b, int64_t kv_width,
                            int64_t kv_col, int64_t hd) {
  for (SavedContext* c : earlier.cores) {
    // Sizes copied out: save() may move the context's tensors, so no reference into it outlives it.
    const int64_t batch = c->get("qkv").dim(0), steps = c->get("qkv").dim(1);
    if (!c->has("kv_grad")) {
      MemoryCategoryScope scope(MemoryCategory::kActivations);  // held until that slice's backward
      c->save("kv_grad", Tensor::zeros({batch, steps, kv_width}));
    }
    add_block(grad, b, steps, kv_width, kv_col, hd, c->get("kv_grad").f32());
    grad += steps * hd;
  }
  return grad;
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(std::string name, int64_t dim, int64_t heads, float init_std,
                                         const AttentionOptions& options)
    : Layer(std::move(name)), dim_(dim), heads_(heads), head_dim_(0), kv_heads_(0), q_dim_(dim), init_std_(init_std),
      options_(options) {
  PF_CHECK_ARG(dim_ > 0 && heads_ > 0 && dim_ % heads_ == 0, "attention '", this->name(),
               "': dim and heads must be > 0 with dim divisible by heads, got dim ", dim_,
               " and heads ", heads_);
  head_dim_ = dim_ / heads_;
  kv_heads_ = options_.kv_heads == 0 ? heads_ : options_.kv_heads;
  PF_CHECK_ARG(kv_heads_ > 0 && heads_ % kv_heads_ == 0, "attention '", this->name(), "': kv_heads ", kv_heads_,
               " must be > 0 and divide heads ", heads_);
  PF_CHECK_ARG(std::isfinite(options_.rope_theta) && options_.rope_theta >= 0.0f, "attention '", this->name(),
               "': rope_theta must be finite and >= 0, got ", options_.rope_theta);
  PF_CHECK_ARG(options_.rope_theta == 0.0f || head_dim_ % 2 == 0, "attention '", this->name(),
               "': rotary positions need an even head dimension, got dim ", dim_, " / heads ", heads_, " = ",
               head_dim_);
  options_.kv_heads = kv_heads_;
  qkv_ = std::make_unique<Linear>(join_name(this->name(), "qkv"), dim_, dim_ + 2 * kv_heads_ * head_dim_,
                                  options_.bias, init_std_);
  proj_ = std::make_unique<Linear>(join_name(this->name(), "proj"), dim_, dim_, options_.bias, init_std_);
}

nlohmann::json CausalSelfAttention::config() const {
  nlohmann::json j = {{"type", type()}, {"name", name()}, {"dim", dim_}, {"heads", heads_ * parts_},
                      {"init_std", init_std_}};
  if (kv_heads_ != heads_) j["kv_heads"] = kv_heads_ * parts_;
  if (!options_.bias) j["bias"] = false;
  if (options_.rope_theta > 0.0f) j["rope_theta"] = options_.rope_theta;
  if (!options_.causal) j["causal"] = false;
  return j;
}

void CausalSelfAttention::split_for_tensor_parallel(const std::shared_ptr<TensorParallelGroup>& group) {
  PF_CHECK_ARG(group != nullptr, "attention '", name(), "': the tensor-parallel group is null");
  PF_CHECK_ARG(parts_ == 1, "attention '", name(), "' is already split");
  const int t = group->size();
  if (t == 1) return;
  PF_CHECK_ARG(heads_ % t == 0, "attention '", name(), "': ", heads_, " heads are not divisible by the ",
               "tensor-parallel size ", t);
  PF_CHECK_ARG(kv_heads_ % t == 0, "attention '", name(), "': ", kv_heads_, " key/value heads are not divisible ",
               "by the tensor-parallel size ", t);
  // qkv: column-parallel over whole heads (this member's query, key and value heads); the output
  // projection: row-parallel over the same heads' columns.
  const int64_t kv_dim = kv_heads_ * head_dim_;
  split_column_row_pair(*qkv_, *proj_, group, {q_dim_, kv_dim, kv_dim});
  heads_ /= t;
  kv_heads_ /= t;
  q_dim_ /= t;
  parts_ = t;
}

void CausalSelfAttention::rotate(Tensor& qkv, int64_t offset, bool inverse) const {
  if (is_cuda(qkv)) {  // the same angles, computed on the device (runtime/kernels/cuda/rotary.h)
    cuda_backend().rotary_embedding(qkv, heads_ + kv_heads_, head_dim_, offset, options_.rope_theta, inverse);
    return;
  }
  const int64_t batch = qkv.dim(0), steps = qkv.dim(1), width = qkv.dim(2), hd = head_dim_, half = hd / 2;
  const int64_t rotated_heads = heads_ + kv_heads_;  // the query heads, then the key heads
  // The angles as Hugging Face's LlamaRotaryEmbedding computes them, in f32: inv_freq_i =
  // 1 / theta^(2i / hd), angle = position * inv_freq_i.
  std::vector<float> cosines(static_cast<size_t>(steps * half)), sines(cosines.size());
  for (int64_t i = 0; i < half; ++i) {
    const float inv_freq =
        1.0f / std::pow(options_.rope_theta, static_cast<float>(2 * i) / static_cast<float>(hd));
    for (int64_t t = 0; t < steps; ++t) {
      const float angle = static_cast<float>(offset + t) * inv_freq;
      cosines[t * half + i] = std::cos(angle);
      sines[t * half + i] = inverse ? -std::sin(angle) : std::sin(angle);
    }
  }
  for (int64_t r = 0; r < batch * steps; ++r) {
    const float* c = cosines.data() + (r % steps) * half;
    const float* sn = sines.data() + (r % steps) * half;
    for (int64_t h = 0; h < rotated_heads; ++h) {
      float* x = qkv.f32() + r * width + h * hd;
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = x[i], x2 = x[i + half];
        x[i] = x1 * c[i] - x2 * sn[i];
        x[i + half] = x2 * c[i] + x1 * sn[i];
      }
    }
  }
}

std::vector<Parameter*> CausalSelfAttention::parameters() {
  std::vector<Parameter*> out = qkv_->parameters();
  auto p = proj_->parameters();
  out.insert(out.end(), p.begin(), p.end());
  return out;
}

Tensor CausalSelfAttention::forward(const Tensor& input, SavedContext& ctx) {
  PF_CHECK_ARG(input.defined() && input.dtype() == DType::kF32 && input.rank() == 3 &&
                   input.dim(2) == dim_,
               "attention '", name(), "': expected f32 input [B, T, ", dim_, "], got ",
               input.defined() ? dtype_name(input.dtype()) : "undefined", " ",
               shape_to_string(input.shape()));
  check_same_device(type(), name(), "input", input.device(), "the parameters",
                    qkv_->parameters()[0]->value.device());
  const int64_t batch = input.dim(0), hd = head_dim_;
  PF_CHECK_ARG(options_.causal || (ctx.position_offset() == 0 && ctx.previous_slice() == nullptr), "attention '",
               name(), "': bidirectional attention (causal false) cannot run on sequence slices (seq_slices > 1): "
               "a slice's queries would need the later slices' keys; this slice starts at position ",
               ctx.position_offset());

  Tensor qkv = qkv_->forward(input, ctx.child(kQkvChild));
  const int64_t steps = qkv.dim(1);  // the whole sequence (under sequence parallelism the input holds 1/T of it)
  SavedContext& core = ctx.child(kCoreChild);
  const EarlierSlices earlier = earlier_slices(core, name(), batch);
  if (is_cuda(input) && !earlier.cores.empty())
    fail(ErrorCode::kUnimplemented, "attention '", name(), "': sequence slices (seq_slices > 1) run on the CPU only");
  if (options_.rope_theta > 0.0f) rotate(qkv, earlier.steps, false);
  if (is_cuda(input)) {  // same contexts as below; the core runs on the GPU (cuda_dispatch.h)
    Tensor probs, attended;
    cuda_backend().attention_core_forward(qkv, heads_, kv_heads_, options_.causal, &probs, &attended);
    core.save("qkv", qkv);
    core.save("probs", probs);
    return proj_->forward(attended, ctx.child(kProjChild));
  }
  // Queries are this slice's steps; keys and values span the earlier slices too (keys = L). The
  // fused kernel reads q, k and v in place from qkv, or k and v gathered over the slices.
  const cpu::AttentionDims dims{steps, earlier.steps + steps, hd, earlier.steps, options_.causal};
  const int64_t kv_dim = kv_heads_ * hd, width = q_dim_ + 2 * kv_dim, group = heads_ / kv_heads_;
  Tensor lse = Tensor::empty({batch, heads_, steps});
  Tensor attended = Tensor::empty({batch, steps, q_dim_});
  Tensor work, k, v;
  {
    MemoryCategoryScope scope(MemoryCategory::kWorkspace);
    work = Tensor::empty({static_cast<int64_t>(cpu::flash_attention_workspace_floats(dims))});
    if (!earlier.cores.empty()) {
      k = Tensor::empty({dims.keys, hd});
      v = Tensor::empty({dims.keys, hd});
    }
  }
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const float* row0 = qkv.f32() + b * steps * width;
      const int64_t kcol = q_dim_ + (h / group) * hd, vcol = kcol + kv_dim;  // its key and value head
      const float* q = row0 + h * hd;
      cpu::ConstRows keys{row0 + kcol, width}, values{row0 + vcol, width};
      if (!earlier.cores.empty()) {
        gather_keys(earlier, qkv, b, width, kcol, hd, k.f32());
        gather_keys(earlier, qkv, b, width, vcol, hd, v.f32());
        keys = {k.f32(), hd};
        values = {v.f32(), hd};
      }
      cpu::flash_attention_forward(dims, {q, width}, keys, values, {attended.f32() + b * steps * q_dim_ + h * hd, q_dim_},
                                   lse.f32() + (b * heads_ + h) * steps, work.f32());
    }
  }
  // "out" is the projection's input (the same storage, so no extra bytes): the backward's D = rowsum(dO o O).
  core.save("qkv", qkv);
  core.save("lse", lse);
  core.save("out", attended);
  return proj_->forward(attended, ctx.child(kProjChild));
}

Tensor CausalSelfAttention::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  return backward_input(ctx, grad_output, false);
}

Tensor CausalSelfAttention::backward(SavedContext& ctx, const Tensor& grad_output) {
  Tensor grad_input = backward_input(ctx, grad_output, true);
  backward_weight(ctx);
  wait_input_gradient();
  return grad_input;
}

Tensor CausalSelfAttention::backward_input(SavedContext& ctx, const Tensor& grad_output, bool overlap) {
  SavedContext& core = ctx.child(kCoreChild);
  const Tensor& qkv = core.get("qkv");
  const int64_t batch = qkv.dim(0), steps = qkv.dim(1), hd = head_dim_;
  const Shape expected = proj_->output_shape({batch, steps, proj_->in_features()});
  PF_CHECK_ARG(grad_output.defined() && grad_output.dtype() == DType::kF32 &&
                   grad_output.shape() == expected,
               "attention '", name(), "': output gradient ", shape_to_string(grad_output.shape()),
               " does not match the forward output ", shape_to_string(expected));
  check_same_device(type(), name(), "output gradient", grad_output.device(), "the forward activations",
                    qkv.device());
  Tensor grad_attended = proj_->backward_input(ctx.child(kProjChild), grad_output);
  if (is_cuda(qkv)) {
    Tensor grad_qkv =
        cuda_backend().attention_core_backward(qkv, core.get("probs"), grad_attended, heads_, kv_heads_, options_.causal);
    if (options_.rope_theta > 0.0f) rotate(grad_qkv, 0, true);  // to the unrotated q and k
    core.clear();
    return qkv_->backward_input(ctx.child(kQkvChild), grad_qkv, overlap);
  }
  // Sequence slices: this slice's keys and values also got gradients from the later slices'
  // backwards ("kv_grad"), and its own backward adds to the earlier slices' ones.
  const EarlierSlices earlier = earlier_slices(core, name(), batch);
  const cpu::AttentionDims dims{steps, earlier.steps + steps, hd, earlier.steps, options_.causal};
  const int64_t kv_dim = kv_heads_ * hd, width = q_dim_ + 2 * kv_dim, group = heads_ / kv_heads_;
  const Tensor& lse = core.get("lse");
  const Tensor& out = core.get("out");
  Tensor grad_qkv = Tensor::empty(qkv.shape());
  // The key and value gradients go straight into grad_qkv when one query head alone reads them
  // over this slice only; else into dk, dv, from where they are scattered (the first query head of
  // a group) or added (the others, in head order) to grad_qkv and the earlier slices' "kv_grad".
  const bool direct = earlier.cores.empty() && group == 1;
  Tensor work, k, v, dk, dv;
  {
    MemoryCategoryScope scope(MemoryCategory::kWorkspace);
    work = Tensor::empty({static_cast<int64_t>(cpu::flash_attention_workspace_floats(dims))});
    if (!earlier.cores.empty()) {
      k = Tensor::empty({dims.keys, hd});
      v = Tensor::empty({dims.keys, hd});
    }
    if (!direct) {
      dk = Tensor::empty({dims.keys, hd});
      dv = Tensor::empty({dims.keys, hd});
    }
  }
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t at = b * steps * width;  // this batch row's first qkv row, in qkv and grad_qkv
      const int64_t kv_head = h / group, kcol = q_dim_ + kv_head * hd, vcol = kcol + kv_dim;
      const float* q = qkv.f32() + at + h * hd;
      float* dq = grad_qkv.f32() + at + h * hd;
      cpu::ConstRows keys{qkv.f32() + at + kcol, width}, values{qkv.f32() + at + vcol, width};
      cpu::Rows dkeys{grad_qkv.f32() + at + kcol, width}, dvalues{grad_qkv.f32() + at + vcol, width};
      if (!earlier.cores.empty()) {  // over all L keys
        gather_keys(earlier, qkv, b, width, kcol, hd, k.f32());
        gather_keys(earlier, qkv, b, width, vcol, hd, v.f32());
        keys = {k.f32(), hd};
        values = {v.f32(), hd};
      }
      if (!direct) {
        dkeys = {dk.f32(), hd};
        dvalues = {dv.f32(), hd};
      }
      const int64_t rows_at = b * steps * q_dim_ + h * hd;  // in out and grad_attended
      cpu::flash_attention_backward(dims, {q, width}, keys, values, {out.f32() + rows_at, q_dim_},
                                    lse.f32() + (b * heads_ + h) * steps, {grad_attended.f32() + rows_at, q_dim_},
                                    {dq, width}, dkeys, dvalues, work.f32());
      if (!direct) {
        const float* own_k = add_to_earlier(earlier, dk.f32(), b, 2 * kv_dim, kv_head * hd, hd);
        const float* own_v = add_to_earlier(earlier, dv.f32(), b, 2 * kv_dim, kv_dim + kv_head * hd, hd);
        const auto place = h % group == 0 ? scatter_block : add_block;
        place(own_k, b, steps, width, kcol, hd, grad_qkv.f32());
        place(own_v, b, steps, width, vcol, hd, grad_qkv.f32());
      }
    }
  }
  if (core.has("kv_grad")) {  // what the later slices' backwards added to this slice's keys and values
    const float* carry = core.get("kv_grad").f32();
    float* g = grad_qkv.f32();
    for (int64_t r = 0; r < batch * steps; ++r)
      for (int64_t c = 0; c < 2 * kv_dim; ++c) g[r * width + q_dim_ + c] += carry[r * 2 * kv_dim + c];
  }
  if (options_.rope_theta > 0.0f) rotate(grad_qkv, earlier.steps, true);  // to the unrotated q and k
  core.clear();  // backward_weight needs only what the two Linear layers keep
  return qkv_->backward_input(ctx.child(kQkvChild), grad_qkv, overlap);
}

void CausalSelfAttention::backward_weight(SavedContext& ctx) {
  // Reverse order, like Sequential.
  proj_->backward_weight(ctx.child(kProjChild));
  qkv_->backward_weight(ctx.child(kQkvChild));
  ctx.clear();
}

}  // namespace pf
