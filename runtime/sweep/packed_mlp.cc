#include "runtime/sweep/packed_mlp.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "runtime/core/checked_math.h"
#include "runtime/core/error.h"
#include "runtime/core/limits.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/kernels/cpu/fast_math.h"
#include "runtime/kernels/cpu/fast_math_lanes.h"
#include "runtime/kernels/cpu/vec8.h"
#include "runtime/models/builders.h"
#include "runtime/models/init.h"
#include "runtime/optim/cpu_update.h"

PF_VEC8_NO_PSABI_WARNING

namespace pf::sweep {

namespace {

using cpu::load8;
using cpu::splat8;
using cpu::store8;
using cpu::v8f;

// Runs vector(k) for k = 0, 8, ... while eight elements remain, then scalar(k) for the rest. The
// vector forms below give the scalar forms' bits (fast_math_lanes.h), so results do not depend on
// where a row's tail falls.
template <typename Vector, typename Scalar>
inline void for_lanes(int64_t n, Vector vector, Scalar scalar) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) vector(k);
  for (; k < n; ++k) scalar(k);
}

// a = act(z) over n elements.
void activate(Activation f, int64_t n, const float* z, float* a) {
  switch (f) {
    case Activation::kRelu:
      for_lanes(n, [&](int64_t k) { store8(a + k, cpu::max_lanes(load8(z + k), 0.0f)); },
                [&](int64_t k) { a[k] = z[k] > 0.0f ? z[k] : 0.0f; });
      return;
    case Activation::kGelu:
      for_lanes(n, [&](int64_t k) { store8(a + k, cpu::gelu_lanes(load8(z + k))); },
                [&](int64_t k) { a[k] = cpu::gelu(z[k]); });
      return;
    case Activation::kTanh:
      for_lanes(n, [&](int64_t k) { store8(a + k, cpu::tanh_lanes(load8(z + k))); },
                [&](int64_t k) { a[k] = cpu::fast_tanh(z[k]); });
      return;
    case Activation::kSigmoid:
      for_lanes(n, [&](int64_t k) { store8(a + k, 1.0f / (1.0f + cpu::exp_lanes(-load8(z + k)))); },
                [&](int64_t k) { a[k] = 1.0f / (1.0f + cpu::fast_exp(-z[k])); });
      return;
    case Activation::kIdentity:
      std::memcpy(a, z, static_cast<size_t>(n) * sizeof(float));
      return;
  }
}

// dz = dy * act'(z) over n elements, from z and a = act(z), written over z.
void activation_backward(Activation f, int64_t n, float* z, const float* a, const float* dy) {
  switch (f) {
    case Activation::kRelu:
      for_lanes(n, [&](int64_t k) { const v8f zv = load8(z + k); store8(z + k, zv > 0.0f ? load8(dy + k) : v8f{}); },
                [&](int64_t k) { z[k] = z[k] > 0.0f ? dy[k] : 0.0f; });
      return;
    case Activation::kGelu:
      for_lanes(n, [&](int64_t k) { store8(z + k, cpu::gelu_grad_lanes(load8(z + k), load8(dy + k))); },
                [&](int64_t k) { z[k] = cpu::gelu_grad(z[k], dy[k]); });
      return;
    case Activation::kTanh:
      for_lanes(n, [&](int64_t k) { const v8f av = load8(a + k); store8(z + k, load8(dy + k) * (1.0f - av * av)); },
                [&](int64_t k) { z[k] = dy[k] * (1.0f - a[k] * a[k]); });
      return;
    case Activation::kSigmoid:
      for_lanes(n, [&](int64_t k) { const v8f av = load8(a + k); store8(z + k, load8(dy + k) * (av * (1.0f - av))); },
                [&](int64_t k) { z[k] = dy[k] * (a[k] * (1.0f - a[k])); });
      return;
    case Activation::kIdentity:
      std::memcpy(z, dy, static_cast<size_t>(n) * sizeof(float));
      return;
  }
}

// out[0, n) += w * x.
inline void axpy(int64_t n, float w, const float* x, float* out) {
  const v8f wv = splat8(w);
  for_lanes(n, [&](int64_t k) { store8(out + k, load8(out + k) + wv * load8(x + k)); },
            [&](int64_t k) { out[k] += w * x[k]; });
}

// The sum of x[0, n) in a fixed order (eight lanes, vec8.h, then the tail in order).
float sum_of(const float* x, int64_t n) {
  cpu::v8f acc = cpu::splat8(0.0f);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) acc += cpu::load8(x + k);
  float total = cpu::sum8(acc);
  for (; k < n; ++k) total += x[k];
  return total;
}

// dy[0, n) += w * g and returns the dot product of a and g, in a fixed order.
float dot_and_axpy(const float* a, const float* g, float w, float* dy, int64_t n) {
  cpu::v8f acc = cpu::splat8(0.0f);
  const cpu::v8f wv = cpu::splat8(w);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    const cpu::v8f gv = cpu::load8(g + k);
    acc += cpu::load8(a + k) * gv;
    cpu::store8(dy + k, cpu::load8(dy + k) + wv * gv);
  }
  float dot = cpu::sum8(acc);
  for (; k < n; ++k) {
    dot += a[k] * g[k];
    dy[k] += w * g[k];
  }
  return dot;
}

}  // namespace

const std::vector<std::string>& activation_names() {
  static const std::vector<std::string> names = {"relu", "gelu", "tanh", "sigmoid", "identity"};
  return names;
}

Activation parse_activation(const std::string& name) {
  const std::vector<std::string>& names = activation_names();
  std::string known;
  for (size_t k = 0; k < names.size(); ++k) {
    if (names[k] == name) return static_cast<Activation>(k);
    known += (k ? ", " : "") + names[k];
  }
  fail(ErrorCode::kInvalidArgument, "unknown activation '", name, "' (known: ", known, ")");
}

const char* activation_name(Activation activation) {
  return activation_names()[static_cast<size_t>(activation)].c_str();
}

PackedMlp::PackedMlp(int64_t features, int64_t classes, std::vector<MlpSpec> specs, const OptimizerConfig& optimizer,
                     int64_t max_rows)
    : features_(features), classes_(classes), max_rows_(max_rows), models_(std::move(specs)), optimizer_(optimizer) {
  PF_CHECK_ARG(features >= 1 && features <= limits::kMaxDimension, "features must be in [1, ", limits::kMaxDimension,
               "], got ", features);
  PF_CHECK_ARG(classes >= 2 && classes <= limits::kMaxDimension, "classes must be in [2, ", limits::kMaxDimension,
               "], got ", classes);
  PF_CHECK_ARG(max_rows >= 1 && max_rows <= limits::kMaxDimension, "rows must be in [1, ", limits::kMaxDimension,
               "], got ", max_rows);
  PF_CHECK_ARG(!models_.empty(), "a packed network needs at least one model");
  optimizer_.lr = 1.0f;  // unused: each model has its own
  optimizer_.clip_norm = 0.0f;
  optimizer_.validate();
  offset_.reserve(models_.size() + 1);
  offset_.push_back(0);
  for (size_t i = 0; i < models_.size(); ++i) {
    const MlpSpec& m = models_[i];
    PF_CHECK_ARG(m.hidden >= 1 && m.hidden <= limits::kMaxDimension, "model ", i, ": hidden must be in [1, ",
                 limits::kMaxDimension, "], got ", m.hidden);
    PF_CHECK_ARG(std::isfinite(m.lr) && m.lr > 0, "model ", i, ": lr must be a positive number, got ", m.lr);
    total_hidden_ = checked_add(total_hidden_, m.hidden, "the models' total hidden width");
    offset_.push_back(total_hidden_);
  }
  PF_CHECK_ARG(total_hidden_ <= limits::kMaxDimension, "the models' total hidden width ", total_hidden_,
               " is larger than ", limits::kMaxDimension);
  const int64_t n = models();
  // Parameters and gradients, the optimizer's slots, the work buffers: all checked before allocating.
  const int64_t params = checked_add(checked_mul(total_hidden_, checked_add(features, classes + 1, "sizes"), "sizes"),
                                     checked_mul(n, classes, "sizes"), "sizes");
  const int slots = optimizer_.kind == OptimizerConfig::Kind::kAdamW ? 2 : (optimizer_.momentum != 0.0f ? 1 : 0);
  // z, a [rows, H]; logits [rows, models, classes]; two scratch rows.
  const int64_t work = checked_add(checked_mul(checked_add(checked_mul(max_rows, total_hidden_, "sizes"), max_rows, "sizes"), 2, "sizes"),
                                   checked_mul(checked_mul(max_rows, n, "sizes"), classes, "sizes"), "sizes");
  const int64_t floats = checked_add(checked_mul(params, 2 + slots, "sizes"), work, "sizes");
  const int64_t need = checked_mul(floats, int64_t{sizeof(float)}, "sizes");
  if (need > limits::max_parameter_bytes())
    fail(ErrorCode::kOutOfMemory, "the packed network of ", n, " models (total hidden width ", total_hidden_,
         ") and ", max_rows, " rows per batch needs ", need, " bytes, more than the limit of ",
         limits::max_parameter_bytes(), " (fewer models or rows per batch)");

  const int64_t h = total_hidden_;
  w1_.resize(static_cast<size_t>(h * features));
  b1_.resize(static_cast<size_t>(h));
  w2_.resize(static_cast<size_t>(h * classes));
  b2_.resize(static_cast<size_t>(n * classes));
  gw1_.resize(w1_.size());
  gb1_.resize(b1_.size());
  gw2_.resize(w2_.size());
  gb2_.resize(b2_.size());
  if (slots >= 1) {
    s1w1_.assign(w1_.size(), 0.0f), s1b1_.assign(b1_.size(), 0.0f), s1w2_.assign(w2_.size(), 0.0f);
    s1b2_.assign(b2_.size(), 0.0f);
  }
  if (slots >= 2) {
    s2w1_.assign(w1_.size(), 0.0f), s2b1_.assign(b1_.size(), 0.0f), s2w2_.assign(w2_.size(), 0.0f);
    s2b2_.assign(b2_.size(), 0.0f);
  }
  z_.resize(static_cast<size_t>(max_rows * h));
  a_.resize(z_.size());
  logits_.resize(static_cast<size_t>(max_rows * n * classes));
  row_max_.resize(static_cast<size_t>(max_rows));
  row_sum_.resize(static_cast<size_t>(max_rows));

  // Each model's initial parameters: those of the MLP alone, initialised from its seed.
  for (int64_t i = 0; i < n; ++i) {
    const MlpSpec& m = models_[static_cast<size_t>(i)];
    MlpConfig config;
    config.input_dim = features;
    config.hidden = {m.hidden};
    config.classes = classes;
    std::unique_ptr<Model> alone = build_mlp(config);
    initialize_parameters(alone->parameters(), m.seed);
    for (Parameter* p : alone->parameters()) {
      const float* v = p->value.f32();
      const int64_t off = offset_[static_cast<size_t>(i)];
      if (p->name == "fc0.weight") {
        std::copy(v, v + m.hidden * features, w1_.begin() + off * features);
      } else if (p->name == "fc0.bias") {
        std::copy(v, v + m.hidden, b1_.begin() + off);
      } else if (p->name == "head.weight") {  // [classes, h] -> rows off.. of [H, classes]
        for (int64_t c = 0; c < classes; ++c)
          for (int64_t j = 0; j < m.hidden; ++j) w2_[static_cast<size_t>((off + j) * classes + c)] = v[c * m.hidden + j];
      } else if (p->name == "head.bias") {
        std::copy(v, v + classes, b2_.begin() + i * classes);
      }
    }
  }
}

int64_t PackedMlp::bytes() const {
  size_t floats = 0;
  for (const std::vector<float>* v : {&w1_, &b1_, &w2_, &b2_, &gw1_, &gb1_, &gw2_, &gb2_, &s1w1_, &s1b1_, &s1w2_,
                                      &s1b2_, &s2w1_, &s2b1_, &s2w2_, &s2b2_, &z_, &a_, &logits_, &row_max_, &row_sum_})
    floats += v->size();
  return static_cast<int64_t>(floats * sizeof(float));
}

void PackedMlp::check_batch(const float* x, const int32_t* y, int64_t rows) const {
  PF_CHECK_ARG(rows >= 1 && rows <= max_rows_, "a batch must have 1 to ", max_rows_, " rows, got ", rows);
  PF_CHECK_ARG(x != nullptr && y != nullptr, "the batch's features and labels must not be null");
  for (int64_t r = 0; r < rows; ++r)
    PF_CHECK_ARG(y[r] >= 0 && y[r] < classes_, "label ", y[r], " at row ", r, " is out of range [0, ", classes_, ")");
}

void PackedMlp::forward(const float* x, int64_t rows) {
  // Hidden-major work buffers ([H, rows] and [models, classes, rows]): every inner loop below runs
  // over the rows of the batch, contiguous, so it vectorises whatever the widths and classes.
  const int64_t h = total_hidden_, n = models(), c = classes_;
  float* z = z_.data();
  for (int64_t j = 0; j < h; ++j) std::fill(z + j * rows, z + (j + 1) * rows, b1_[static_cast<size_t>(j)]);
  cpu::gemm(false, true, h, rows, features_, 1.0f, w1_.data(), x, 1.0f, z);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t off = offset_[static_cast<size_t>(i)], len = offset_[static_cast<size_t>(i) + 1] - off;
    activate(models_[static_cast<size_t>(i)].activation, len * rows, z + off * rows, a_.data() + off * rows);
  }
  // logits[i, k, :] = b2[i, k] + sum over model i's units j of w2[j, k] a[j, :].
  for (int64_t i = 0; i < n; ++i) {
    float* logits = logits_.data() + i * c * rows;
    for (int64_t k = 0; k < c; ++k) std::fill(logits + k * rows, logits + (k + 1) * rows, b2_[static_cast<size_t>(i * c + k)]);
    for (int64_t j = offset_[static_cast<size_t>(i)]; j < offset_[static_cast<size_t>(i) + 1]; ++j) {
      const float* a = a_.data() + j * rows;
      for (int64_t k = 0; k < c; ++k) axpy(rows, w2_[static_cast<size_t>(j * c + k)], a, logits + k * rows);
    }
  }
}

void PackedMlp::train_step(const float* x, const int32_t* y, int64_t rows, double* losses) {
  check_batch(x, y, rows);
  forward(x, rows);
  const int64_t n = models(), c = classes_;
  // Each model's loss and, in place of its logits, their gradient (softmax - onehot) / rows.
  const float inv_rows = 1.0f / static_cast<float>(rows);
  std::vector<float>& mx = row_max_;
  std::vector<float>& sum = row_sum_;
  for (int64_t i = 0; i < n; ++i) {
    float* logits = logits_.data() + i * c * rows;
    float* m = mx.data();
    float* total = sum.data();
    std::copy(logits, logits + rows, m);
    for (int64_t k = 1; k < c; ++k) {
      const float* l = logits + k * rows;
      for_lanes(rows, [&](int64_t r) { const v8f lv = load8(l + r), mv = load8(m + r); store8(m + r, lv > mv ? lv : mv); },
                [&](int64_t r) { m[r] = l[r] > m[r] ? l[r] : m[r]; });
    }
    double loss = 0;
    for (int64_t r = 0; r < rows; ++r) loss -= static_cast<double>(logits[y[r] * rows + r] - m[r]);
    std::fill(total, total + rows, 0.0f);
    for (int64_t k = 0; k < c; ++k) {
      float* l = logits + k * rows;
      for_lanes(rows,
                [&](int64_t r) {
                  const v8f e = cpu::exp_lanes(load8(l + r) - load8(m + r));
                  store8(l + r, e);
                  store8(total + r, load8(total + r) + e);
                },
                [&](int64_t r) {
                  l[r] = cpu::fast_exp(l[r] - m[r]);
                  total[r] += l[r];
                });
    }
    for (int64_t r = 0; r < rows; ++r) {
      loss += static_cast<double>(std::log(total[r]));
      total[r] = inv_rows / total[r];
    }
    for (int64_t k = 0; k < c; ++k) {
      float* l = logits + k * rows;
      for_lanes(rows, [&](int64_t r) { store8(l + r, load8(l + r) * load8(total + r)); },
                [&](int64_t r) { l[r] *= total[r]; });
    }
    for (int64_t r = 0; r < rows; ++r) logits[y[r] * rows + r] -= inv_rows;
    losses[i] = loss / static_cast<double>(rows);
  }

  // Output layer: gw2[j, k] = g[i, k, :] . a[j, :], gb2[i, k] = the sum of g[i, k, :], and
  // da[j, :] = sum over k of w2[j, k] g[i, k, :], turned into dz = da * act'(z) in place of z.
  float* __restrict da = row_sum_.data();  // reused: [rows]
  for (int64_t i = 0; i < n; ++i) {
    const float* g = logits_.data() + i * c * rows;
    for (int64_t k = 0; k < c; ++k) gb2_[static_cast<size_t>(i * c + k)] = sum_of(g + k * rows, rows);
    const Activation f = models_[static_cast<size_t>(i)].activation;
    for (int64_t j = offset_[static_cast<size_t>(i)]; j < offset_[static_cast<size_t>(i) + 1]; ++j) {
      const float* a = a_.data() + j * rows;
      float* z = z_.data() + j * rows;
      std::fill(da, da + rows, 0.0f);
      for (int64_t k = 0; k < c; ++k)
        gw2_[static_cast<size_t>(j * c + k)] = dot_and_axpy(a, g + k * rows, w2_[static_cast<size_t>(j * c + k)], da, rows);
      activation_backward(f, rows, z, a, da);
      gb1_[static_cast<size_t>(j)] = sum_of(z, rows);
    }
  }
  // Hidden layer: gw1 = dz x ([H, rows] x [rows, features]).
  cpu::gemm(false, false, total_hidden_, features_, rows, 1.0f, z_.data(), x, 0.0f, gw1_.data());

  // Each model's update on its four slices, with its own learning rate.
  ++steps_;
  const bool adamw = optimizer_.kind == OptimizerConfig::Kind::kAdamW;
  const cpu::AdamWBias bias = cpu::adamw_bias(optimizer_, steps_);
  auto update = [&](int64_t begin, int64_t len, std::vector<float>& w, std::vector<float>& g, std::vector<float>& s1,
                    std::vector<float>& s2, float lr) {
    if (adamw) {
      cpu::adamw_update(len, w.data() + begin, g.data() + begin, s1.data() + begin, s2.data() + begin, optimizer_, lr,
                        bias);
    } else {
      cpu::sgd_update(len, w.data() + begin, g.data() + begin, s1.empty() ? nullptr : s1.data() + begin, optimizer_,
                      lr, steps_);
    }
  };
  for (int64_t i = 0; i < n; ++i) {
    const int64_t off = offset_[static_cast<size_t>(i)], len = offset_[static_cast<size_t>(i) + 1] - off;
    const float lr = models_[static_cast<size_t>(i)].lr;
    update(off * features_, len * features_, w1_, gw1_, s1w1_, s2w1_, lr);
    update(off, len, b1_, gb1_, s1b1_, s2b1_, lr);
    update(off * c, len * c, w2_, gw2_, s1w2_, s2w2_, lr);
    update(i * c, c, b2_, gb2_, s1b2_, s2b2_, lr);
  }
}

void PackedMlp::evaluate(const float* x, const int32_t* y, int64_t rows, double* loss_sum, int64_t* correct) {
  check_batch(x, y, rows);
  forward(x, rows);
  const int64_t n = models(), c = classes_;
  for (int64_t i = 0; i < n; ++i) {
    const float* l = logits_.data() + i * c * rows;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t best = 0;
      for (int64_t k = 1; k < c; ++k) best = l[k * rows + r] > l[best * rows + r] ? k : best;
      const double top = l[best * rows + r];
      double sum = 0.0;
      for (int64_t k = 0; k < c; ++k) sum += std::exp(static_cast<double>(l[k * rows + r]) - top);
      loss_sum[i] += top + std::log(sum) - static_cast<double>(l[y[r] * rows + r]);
      correct[i] += best == y[r] ? 1 : 0;
    }
  }
}

std::vector<float> PackedMlp::parameter(int64_t model, const std::string& name) const {
  PF_CHECK_ARG(model >= 0 && model < models(), "model ", model, " is out of range [0, ", models(), ")");
  const int64_t off = offset_[static_cast<size_t>(model)], len = offset_[static_cast<size_t>(model) + 1] - off;
  if (name == "fc0.weight") return {w1_.begin() + off * features_, w1_.begin() + (off + len) * features_};
  if (name == "fc0.bias") return {b1_.begin() + off, b1_.begin() + off + len};
  if (name == "head.bias") return {b2_.begin() + model * classes_, b2_.begin() + (model + 1) * classes_};
  if (name == "head.weight") {
    std::vector<float> out(static_cast<size_t>(classes_ * len));
    for (int64_t k = 0; k < classes_; ++k)
      for (int64_t j = 0; j < len; ++j) out[static_cast<size_t>(k * len + j)] = w2_[static_cast<size_t>((off + j) * classes_ + k)];
    return out;
  }
  fail(ErrorCode::kInvalidArgument, "unknown parameter '", name, "' (known: fc0.weight, fc0.bias, head.weight, head.bias)");
}

}  // namespace pf::sweep
