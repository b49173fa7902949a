#include "runtime/layers/attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/kernels/cpu/fast_math.h"
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

// The [L, hd] keys (part 1) or values (part 2) of head h, batch b over the earlier slices and then
// this slice's `qkv` (L = earlier.steps + T).
void gather_keys(const EarlierSlices& earlier, const Tensor& qkv, int64_t b, int64_t dim, int64_t part,
                 int64_t col, int64_t hd, float* out) {
  for (const SavedContext* c : earlier.cores) {
    const Tensor& x = c->get("qkv");
    gather_block(x.f32(), b, x.dim(1), 3 * dim, part * dim + col, hd, out);
    out += x.dim(1) * hd;
  }
  gather_block(qkv.f32(), b, qkv.dim(1), 3 * dim, part * dim + col, hd, out);
}

// Adds the [L, hd] key (part 1) or value (part 2) gradient of head h, batch b to the earlier
// slices' "kv_grad" ([B, T_i, 2 dim]: keys | values, created at zero on first use); returns where
// this slice's own rows start.
const float* add_to_earlier(const EarlierSlices& earlier, const float* grad, int64_t b, int64_t dim,
                            int64_t part, int64_t col, int64_t hd) {
  for (SavedContext* c : earlier.cores) {
    // Sizes copied out: save() may move the context's tensors, so no reference into it outlives it.
    const int64_t batch = c->get("qkv").dim(0), steps = c->get("qkv").dim(1);
    if (!c->has("kv_grad")) {
      MemoryCategoryScope scope(MemoryCategory::kActivations);  // held until that slice's backward
      c->save("kv_grad", Tensor::zeros({batch, steps, 2 * dim}));
    }
    add_block(grad, b, steps, 2 * dim, (part - 1) * dim + col, hd, c->get("kv_grad").f32());
    grad += steps * hd;
  }
  return grad;
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(std::string name, int64_t dim, int64_t heads, float init_std)
    : Layer(std::move(name)), dim_(dim), heads_(heads), head_dim_(0), init_std_(init_std) {
  PF_CHECK_ARG(dim_ > 0 && heads_ > 0 && dim_ % heads_ == 0, "attention '", this->name(),
               "': dim and heads must be > 0 with dim divisible by heads, got dim ", dim_,
               " and heads ", heads_);
  head_dim_ = dim_ / heads_;
  qkv_ = std::make_unique<Linear>(join_name(this->name(), "qkv"), dim_, 3 * dim_, true, init_std_);
  proj_ = std::make_unique<Linear>(join_name(this->name(), "proj"), dim_, dim_, true, init_std_);
}

nlohmann::json CausalSelfAttention::config() const {
  return {{"type", type()}, {"name", name()}, {"dim", dim_}, {"heads", heads_}, {"init_std", init_std_}};
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
  const int64_t batch = input.dim(0), steps = input.dim(1), hd = head_dim_;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  Tensor qkv = qkv_->forward(input, ctx.child(kQkvChild));
  SavedContext& core = ctx.child(kCoreChild);
  const EarlierSlices earlier = earlier_slices(core, name(), batch);
  if (is_cuda(input)) {  // same contexts as below; the core runs on the GPU (cuda_dispatch.h)
    if (!earlier.cores.empty())
      fail(ErrorCode::kUnimplemented, "attention '", name(), "': sequence slices (seq_slices > 1) run on the CPU only");
    Tensor probs, attended;
    cuda_backend().attention_core_forward(qkv, heads_, &probs, &attended);
    core.save("qkv", qkv);
    core.save("probs", probs);
    return proj_->forward(attended, ctx.child(kProjChild));
  }
  // Queries are this slice's steps; keys and values span the earlier slices too (keys = L).
  const int64_t offset = earlier.steps, keys = offset + steps;
  Tensor probs = Tensor::empty({batch, heads_, steps, keys});
  Tensor attended = Tensor::empty({batch, steps, dim_});
  Tensor q, k, v, o;
  {
    MemoryCategoryScope scope(MemoryCategory::kWorkspace);
    q = Tensor::empty({steps, hd});
    k = Tensor::empty({keys, hd});
    v = Tensor::empty({keys, hd});
    o = Tensor::empty({steps, hd});
  }
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      gather_block(qkv.f32(), b, steps, 3 * dim_, h * hd, hd, q.f32());
      gather_keys(earlier, qkv, b, dim_, 1, h * hd, hd, k.f32());
      gather_keys(earlier, qkv, b, dim_, 2, h * hd, hd, v.f32());
      float* p = probs.f32() + (b * heads_ + h) * steps * keys;
      // Scores for all pairs (the masked part is overwritten below), then a causal softmax per row:
      // query i sits at position offset + i.
      cpu::gemm(false, true, steps, keys, hd, scale, q.f32(), k.f32(), 0.0f, p);
      for (int64_t i = 0; i < steps; ++i) {
        float* row = p + i * keys;
        const int64_t last = offset + i;
        float max_score = row[0];
        for (int64_t j = 1; j <= last; ++j) max_score = row[j] > max_score ? row[j] : max_score;
        float sum = 0.0f;
        for (int64_t j = 0; j <= last; ++j) {
          row[j] = cpu::fast_exp(row[j] - max_score);
          sum += row[j];
        }
        const float inv = 1.0f / sum;
        for (int64_t j = 0; j <= last; ++j) row[j] *= inv;
        for (int64_t j = last + 1; j < keys; ++j) row[j] = 0.0f;
      }
      cpu::gemm(false, false, steps, hd, keys, 1.0f, p, v.f32(), 0.0f, o.f32());
      scatter_block(o.f32(), b, steps, dim_, h * hd, hd, attended.f32());
    }
  }
  core.save("qkv", qkv);
  core.save("probs", probs);
  return proj_->forward(attended, ctx.child(kProjChild));
}

Tensor CausalSelfAttention::backward_input(SavedContext& ctx, const Tensor& grad_output) {
  SavedContext& core = ctx.child(kCoreChild);
  const Tensor& qkv = core.get("qkv");
  const Tensor& probs = core.get("probs");
  const int64_t batch = qkv.dim(0), steps = qkv.dim(1), hd = head_dim_;
  const Shape expected = {batch, steps, dim_};
  PF_CHECK_ARG(grad_output.defined() && grad_output.dtype() == DType::kF32 &&
                   grad_output.shape() == expected,
               "attention '", name(), "': output gradient ", shape_to_string(grad_output.shape()),
               " does not match the forward output ", shape_to_string(expected));
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));

  check_same_device(type(), name(), "output gradient", grad_output.device(), "the forward activations",
                    qkv.device());
  Tensor grad_attended = proj_->backward_input(ctx.child(kProjChild), grad_output);
  if (is_cuda(qkv)) {
    Tensor grad_qkv = cuda_backend().attention_core_backward(qkv, probs, grad_attended, heads_);
    core.clear();
    return qkv_->backward_input(ctx.child(kQkvChild), grad_qkv);
  }
  // Sequence slices: this slice's keys and values also got gradients from the later slices'
  // backwards ("kv_grad"), and its own backward adds to the earlier slices' ones.
  const EarlierSlices earlier = earlier_slices(core, name(), batch);
  const int64_t offset = earlier.steps, keys = offset + steps;
  Tensor grad_qkv = Tensor::empty(qkv.shape());
  Tensor q, k, v, dout, dp, dq, dk, dv;
  {
    MemoryCategoryScope scope(MemoryCategory::kWorkspace);
    q = Tensor::empty({steps, hd});
    k = Tensor::empty({keys, hd});
    v = Tensor::empty({keys, hd});
    dout = Tensor::empty({steps, hd});
    dp = Tensor::empty({steps, keys});
    dq = Tensor::empty({steps, hd});
    dk = Tensor::empty({keys, hd});
    dv = Tensor::empty({keys, hd});
  }
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      gather_block(qkv.f32(), b, steps, 3 * dim_, h * hd, hd, q.f32());
      gather_keys(earlier, qkv, b, dim_, 1, h * hd, hd, k.f32());
      gather_keys(earlier, qkv, b, dim_, 2, h * hd, hd, v.f32());
      gather_block(grad_attended.f32(), b, steps, dim_, h * hd, hd, dout.f32());
      const float* p = probs.f32() + (b * heads_ + h) * steps * keys;
      // dV = P^T dO ; dP = dO V^T ; dS = P * (dP - rowsum(P * dP)) ; dQ = s dS K ; dK = s dS^T Q.
      cpu::gemm(true, false, keys, hd, steps, 1.0f, p, dout.f32(), 0.0f, dv.f32());
      cpu::gemm(false, true, steps, keys, hd, 1.0f, dout.f32(), v.f32(), 0.0f, dp.f32());
      for (int64_t i = 0; i < steps; ++i) {
        const float* prow = p + i * keys;
        float* drow = dp.f32() + i * keys;
        const int64_t last = offset + i;
        float dot = 0.0f;
        for (int64_t j = 0; j <= last; ++j) dot += prow[j] * drow[j];
        for (int64_t j = 0; j <= last; ++j) drow[j] = prow[j] * (drow[j] - dot);
        for (int64_t j = last + 1; j < keys; ++j) drow[j] = 0.0f;
      }
      cpu::gemm(false, false, steps, hd, keys, scale, dp.f32(), k.f32(), 0.0f, dq.f32());
      cpu::gemm(true, false, keys, hd, steps, scale, dp.f32(), q.f32(), 0.0f, dk.f32());
      scatter_block(dq.f32(), b, steps, 3 * dim_, h * hd, hd, grad_qkv.f32());
      scatter_block(add_to_earlier(earlier, dk.f32(), b, dim_, 1, h * hd, hd), b, steps, 3 * dim_,
                    dim_ + h * hd, hd, grad_qkv.f32());
      scatter_block(add_to_earlier(earlier, dv.f32(), b, dim_, 2, h * hd, hd), b, steps, 3 * dim_,
                    2 * dim_ + h * hd, hd, grad_qkv.f32());
    }
  }
  if (core.has("kv_grad")) {  // what the later slices' backwards added to this slice's keys and values
    const float* carry = core.get("kv_grad").f32();
    float* g = grad_qkv.f32();
    for (int64_t r = 0; r < batch * steps; ++r)
      for (int64_t c = 0; c < 2 * dim_; ++c) g[r * 3 * dim_ + dim_ + c] += carry[r * 2 * dim_ + c];
  }
  core.clear();  // backward_weight needs only what the two Linear layers keep
  return qkv_->backward_input(ctx.child(kQkvChild), grad_qkv);
}

void CausalSelfAttention::backward_weight(SavedContext& ctx) {
  // Reverse order, like Sequential.
  proj_->backward_weight(ctx.child(kProjChild));
  qkv_->backward_weight(ctx.child(kQkvChild));
  ctx.clear();
}

}  // namespace pf
