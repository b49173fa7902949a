#include "runtime/layers/attention.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

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
  // Queries are this slice's steps; keys and values span the earlier slices too (keys = L). The
  // fused kernel reads q, k and v in place from qkv, or k and v gathered over the slices.
  const cpu::AttentionDims dims{steps, earlier.steps + steps, hd, earlier.steps};
  const int64_t width = 3 * dim_;
  Tensor lse = Tensor::empty({batch, heads_, steps});
  Tensor attended = Tensor::empty({batch, steps, dim_});
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
      const float* q = qkv.f32() + b * steps * width + h * hd;
      cpu::ConstRows keys{q + dim_, width}, values{q + 2 * dim_, width};
      if (!earlier.cores.empty()) {
        gather_keys(earlier, qkv, b, dim_, 1, h * hd, hd, k.f32());
        gather_keys(earlier, qkv, b, dim_, 2, h * hd, hd, v.f32());
        keys = {k.f32(), hd};
        values = {v.f32(), hd};
      }
      cpu::flash_attention_forward(dims, {q, width}, keys, values, {attended.f32() + b * steps * dim_ + h * hd, dim_},
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
  SavedContext& core = ctx.child(kCoreChild);
  const Tensor& qkv = core.get("qkv");
  const int64_t batch = qkv.dim(0), steps = qkv.dim(1), hd = head_dim_;
  const Shape expected = {batch, steps, dim_};
  PF_CHECK_ARG(grad_output.defined() && grad_output.dtype() == DType::kF32 &&
                   grad_output.shape() == expected,
               "attention '", name(), "': output gradient ", shape_to_string(grad_output.shape()),
               " does not match the forward output ", shape_to_string(expected));
  check_same_device(type(), name(), "output gradient", grad_output.device(), "the forward activations",
                    qkv.device());
  Tensor grad_attended = proj_->backward_input(ctx.child(kProjChild), grad_output);
  if (is_cuda(qkv)) {
    Tensor grad_qkv = cuda_backend().attention_core_backward(qkv, core.get("probs"), grad_attended, heads_);
    core.clear();
    return qkv_->backward_input(ctx.child(kQkvChild), grad_qkv);
  }
  // Sequence slices: this slice's keys and values also got gradients from the later slices'
  // backwards ("kv_grad"), and its own backward adds to the earlier slices' ones.
  const EarlierSlices earlier = earlier_slices(core, name(), batch);
  const cpu::AttentionDims dims{steps, earlier.steps + steps, hd, earlier.steps};
  const int64_t width = 3 * dim_;
  const Tensor& lse = core.get("lse");
  const Tensor& out = core.get("out");
  Tensor grad_qkv = Tensor::empty(qkv.shape());
  Tensor work, k, v, dk, dv;
  {
    MemoryCategoryScope scope(MemoryCategory::kWorkspace);
    work = Tensor::empty({static_cast<int64_t>(cpu::flash_attention_workspace_floats(dims))});
    if (!earlier.cores.empty()) {
      k = Tensor::empty({dims.keys, hd});
      v = Tensor::empty({dims.keys, hd});
      dk = Tensor::empty({dims.keys, hd});
      dv = Tensor::empty({dims.keys, hd});
    }
  }
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < heads_; ++h) {
      const int64_t at = b * steps * width + h * hd;  // this head's q in qkv and dq in grad_qkv
      const float* q = qkv.f32() + at;
      float* dq = grad_qkv.f32() + at;
      cpu::ConstRows keys{q + dim_, width}, values{q + 2 * dim_, width};
      cpu::Rows dkeys{dq + dim_, width}, dvalues{dq + 2 * dim_, width};
      if (!earlier.cores.empty()) {  // over all L keys; this slice's rows are scattered below
        gather_keys(earlier, qkv, b, dim_, 1, h * hd, hd, k.f32());
        gather_keys(earlier, qkv, b, dim_, 2, h * hd, hd, v.f32());
        keys = {k.f32(), hd};
        values = {v.f32(), hd};
        dkeys = {dk.f32(), hd};
        dvalues = {dv.f32(), hd};
      }
      const int64_t rows_at = b * steps * dim_ + h * hd;  // in out and grad_attended
      cpu::flash_attention_backward(dims, {q, width}, keys, values, {out.f32() + rows_at, dim_},
                                    lse.f32() + (b * heads_ + h) * steps, {grad_attended.f32() + rows_at, dim_},
                                    {dq, width}, dkeys, dvalues, work.f32());
      if (!earlier.cores.empty()) {
        scatter_block(add_to_earlier(earlier, dk.f32(), b, dim_, 1, h * hd, hd), b, steps, width,
                      dim_ + h * hd, hd, grad_qkv.f32());
        scatter_block(add_to_earlier(earlier, dv.f32(), b, dim_, 2, h * hd, hd), b, steps, width,
                      2 * dim_ + h * hd, hd, grad_qkv.f32());
      }
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
