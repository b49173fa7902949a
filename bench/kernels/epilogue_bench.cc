// The GPT block's epilogue passes, unfused (as the layers ran them before) against fused, at the
// block's shapes: B x T = 8 x 64 rows, d_model 256 and 512, MLP hidden 4 x d_model, BLAS on one
// thread. Each pair runs alternately (old, new, old, new, ...) so load from other processes falls on
// both; the figure per side is the median over rounds of the thread CPU time per call. Prints one
// JSON object: per shape and kernel, old_us, new_us and old/new; under "unchanged_us" the passes the
// fusion kept (bias broadcast, LayerNorm weight gradients) and the MLP GEMMs alone.
//
// Kernels (old -> new):
//  gelu_forward, gelu_backward: 0.5 v (1 + tanh(u)) and its derivative per element
//    (cpu/reference/gelu_tanh_reference.h) -> v / (1 + e^{-2u}) eight lanes at a time;
//  fc_bias_gelu_forward: bias broadcast + GEMM (beta 1) + GELU pass -> the same (kept; "epilogue"
//    times the alternative, GEMM with beta 0 + one bias-and-GELU pass);
//  gelu_backward_bias_grad: GELU backward pass, then the bias gradient's column sums (in W) ->
//    one pass computing both (plus adding the [hidden] partial in W);
//  proj_residual_forward: bias broadcast + GEMM (beta 1) + residual add -> (residual + bias)
//    broadcast + GEMM (beta 1);
//  layer_norm_forward: two scalar passes -> one-pass Welford, vectorised;
//  residual_layer_norm_forward: residual add + LayerNorm -> LayerNorm folding the add;
//  layer_norm_backward: scalar reductions -> vectorised;
//  layer_norm_backward_residual: LayerNorm backward + residual gradient add -> folded.
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/kernels/cpu/blas.h"
#include "runtime/kernels/cpu/gelu.h"
#include "runtime/kernels/cpu/layer_norm.h"
#include "runtime/kernels/cpu/reference/gelu_tanh_reference.h"
#include "runtime/kernels/cpu/reference/layer_norm_reference.h"
#include "runtime/kernels/cpu/rows.h"

namespace {

constexpr int64_t kRows = 8 * 64;
constexpr int kRounds = 31;
constexpr float kEps = 1e-5f;

std::vector<float> values(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {
    x = x * 1664525u + 1013904223u;
    f = scale * (static_cast<float>((x >> 8) & 0xFFFF) / 32768.0f - 1.0f);
  }
  return v;
}

double thread_seconds() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Microseconds per call, median over rounds.
double time_us(const std::function<void()>& fn) {
  fn();
  const double t0 = thread_seconds();
  fn();
  const double one = std::max(thread_seconds() - t0, 1e-7);
  const int calls = std::max(1, static_cast<int>(2e-3 / one));
  std::vector<double> us;
  for (int round = 0; round < kRounds; ++round) {
    const double start = thread_seconds();
    for (int c = 0; c < calls; ++c) fn();
    us.push_back(1e6 * (thread_seconds() - start) / calls);
  }
  return median(us);
}

// Microseconds per call of old and new, alternating; calls per round chosen so a round of old
// takes about 2 ms.
nlohmann::json compare(const std::function<void()>& old_fn, const std::function<void()>& new_fn) {
  old_fn();
  new_fn();
  const double t0 = thread_seconds();
  old_fn();
  const double one = std::max(thread_seconds() - t0, 1e-7);
  const int calls = std::max(1, static_cast<int>(2e-3 / one));
  std::vector<double> old_us, new_us;
  for (int round = 0; round < kRounds; ++round) {
    for (int side = 0; side < 2; ++side) {
      const auto& fn = side == 0 ? old_fn : new_fn;
      const double start = thread_seconds();
      for (int c = 0; c < calls; ++c) fn();
      (side == 0 ? old_us : new_us).push_back(1e6 * (thread_seconds() - start) / calls);
    }
  }
  const double o = median(old_us), n = median(new_us);
  return {{"old_us", o}, {"new_us", n}, {"old_over_new", o / n}};
}

nlohmann::json bench_shape(int64_t d) {
  const int64_t h = 4 * d, rows = kRows;
  const std::vector<float> x = values(rows * d, 1), skip = values(rows * d, 2), dy_d = values(rows * d, 3);
  const std::vector<float> w_fc = values(h * d, 4, 0.05f), w_proj = values(d * h, 5, 0.05f);
  const std::vector<float> b_h = values(h, 6), b_d = values(d, 7), gamma = values(d, 8), beta = values(d, 9);
  const std::vector<float> hidden = values(rows * h, 10), dy_h = values(rows * h, 11);
  std::vector<float> pre(rows * h), post(rows * h), dpre(rows * h), dbias(h), partial(h);
  std::vector<float> y(rows * d), m(rows * d), xhat(rows * d), sum(rows * d), dx(rows * d), t(rows * d);
  std::vector<float> rstd(rows);
  nlohmann::json out;

  out["gelu_forward"] = compare(
      [&] { pf::cpu::reference::gelu_tanh_forward(rows * h, hidden.data(), post.data()); },
      [&] { pf::cpu::gelu_forward(rows * h, hidden.data(), post.data()); });
  out["gelu_forward"]["note"] = "old = 0.5 v (1 + tanh(u)) per element, new = v / (1 + e^-2u) eight lanes at a time";
  out["gelu_backward"] = compare(
      [&] { pf::cpu::reference::gelu_tanh_backward(rows * h, hidden.data(), dy_h.data(), dpre.data()); },
      [&] { pf::cpu::gelu_backward(rows * h, hidden.data(), dy_h.data(), dpre.data()); });
  out["fc_bias_gelu_forward"] = compare(
      [&] {
        pf::cpu::broadcast_rows(rows, h, b_h.data(), pre.data());
        pf::cpu::gemm(false, true, rows, h, d, 1.0f, x.data(), w_fc.data(), 1.0f, pre.data());
        pf::cpu::gelu_forward(rows * h, pre.data(), post.data());
      },
      [&] {
        pf::cpu::gemm(false, true, rows, h, d, 1.0f, x.data(), w_fc.data(), 0.0f, pre.data());
        pf::cpu::bias_gelu_forward(rows, h, b_h.data(), pre.data(), post.data());
      });
  out["fc_bias_gelu_forward"]["note"] = "new = GEMM beta 0 + one bias-and-GELU pass (the alternative)";
  out["gelu_backward_bias_grad"] = compare(
      [&] {
        pf::cpu::gelu_backward(rows * h, hidden.data(), dy_h.data(), dpre.data());
        pf::cpu::accumulate_column_sums(rows, h, dpre.data(), dbias.data());
      },
      [&] {
        pf::cpu::gelu_backward_column_sums(rows, h, hidden.data(), dy_h.data(), dpre.data(), partial.data());
        pf::cpu::add(h, dbias.data(), partial.data(), dbias.data());
      });
  out["proj_residual_forward"] = compare(
      [&] {
        pf::cpu::broadcast_rows(rows, d, b_d.data(), m.data());
        pf::cpu::gemm(false, true, rows, d, h, 1.0f, hidden.data(), w_proj.data(), 1.0f, m.data());
        pf::cpu::add(rows * d, x.data(), m.data(), y.data());
      },
      [&] {
        pf::cpu::add_broadcast_rows(rows, d, x.data(), b_d.data(), y.data());
        pf::cpu::gemm(false, true, rows, d, h, 1.0f, hidden.data(), w_proj.data(), 1.0f, y.data());
      });
  out["layer_norm_forward"] = compare(
      [&] {
        pf::cpu::reference::layer_norm_forward(rows, d, x.data(), gamma.data(), beta.data(), kEps, y.data(),
                                               xhat.data(), rstd.data());
      },
      [&] {
        pf::cpu::layer_norm_forward(rows, d, x.data(), nullptr, nullptr, gamma.data(), beta.data(), kEps,
                                    y.data(), xhat.data(), rstd.data());
      });
  out["residual_layer_norm_forward"] = compare(
      [&] {
        pf::cpu::add(rows * d, x.data(), skip.data(), sum.data());
        pf::cpu::reference::layer_norm_forward(rows, d, sum.data(), gamma.data(), beta.data(), kEps, y.data(),
                                               xhat.data(), rstd.data());
      },
      [&] {
        pf::cpu::layer_norm_forward(rows, d, x.data(), skip.data(), sum.data(), gamma.data(), beta.data(), kEps,
                                    y.data(), xhat.data(), rstd.data());
      });
  out["layer_norm_backward"] = compare(
      [&] {
        pf::cpu::reference::layer_norm_backward_input(rows, d, xhat.data(), rstd.data(), gamma.data(),
                                                      dy_d.data(), dx.data());
      },
      [&] {
        pf::cpu::layer_norm_backward_input(rows, d, xhat.data(), rstd.data(), gamma.data(), dy_d.data(), nullptr,
                                           dx.data());
      });
  out["layer_norm_backward_residual"] = compare(
      [&] {
        pf::cpu::reference::layer_norm_backward_input(rows, d, xhat.data(), rstd.data(), gamma.data(),
                                                      dy_d.data(), t.data());
        pf::cpu::add(rows * d, skip.data(), t.data(), dx.data());
      },
      [&] {
        pf::cpu::layer_norm_backward_input(rows, d, xhat.data(), rstd.data(), gamma.data(), dy_d.data(),
                                           skip.data(), dx.data());
      });

  // Passes the fusion left as they were, and the GEMMs, for the profile of where the block's time goes.
  nlohmann::json& same = out["unchanged_us"];
  same["fc_gemm"] = time_us([&] {
    pf::cpu::gemm(false, true, rows, h, d, 1.0f, x.data(), w_fc.data(), 1.0f, pre.data());
  });
  same["fc_bias_broadcast"] = time_us([&] { pf::cpu::broadcast_rows(rows, h, b_h.data(), pre.data()); });
  same["proj_gemm"] = time_us([&] {
    pf::cpu::gemm(false, true, rows, d, h, 1.0f, hidden.data(), w_proj.data(), 1.0f, m.data());
  });
  same["layer_norm_backward_weight"] = time_us([&] {
    pf::cpu::layer_norm_backward_weight(rows, d, xhat.data(), dy_d.data(), t.data(), sum.data());
  });
  return out;
}

}  // namespace

int main() {
  pf::cpu::set_blas_threads_for_this_thread(1);
  nlohmann::json out = {{"rows", kRows}, {"rounds", kRounds}, {"unit", "microseconds of thread CPU time per call, median"}};
  for (int64_t d : {256, 512}) out["d_model_" + std::to_string(d)] = bench_shape(d);
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}
