// The attention core of CausalSelfAttention on the CPU, unfused (the former layer code: per
// (batch, head) gather q, k, v, cpu::attention_reference_forward / _backward with the full
// [B, heads, T, T] probabilities, scatter) against the fused kernel (cpu::flash_attention_forward /
// _backward reading the heads in place from qkv), forward (F) and input gradient (B), one thread.
// The two run alternately in the same process, `reps` times each; times are medians, in
// milliseconds, of the thread's CPU time (what a shared machine disturbs least) and of wall time.
// Saved bytes: what one micro-batch's CausalSelfAttention context holds after F (measured on the
// layer, which runs the fused kernel), and the same with the [B, heads, T, T] probabilities the
// unfused core saved in place of the per-row log-sum-exp.
// Prints one JSON object. Usage: attention_bench [--reps N] [--tokens N] (tokens per micro-batch:
// batch = max(1, tokens / T)).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/kernels/cpu/blas.h"
#include "runtime/kernels/cpu/flash_attention.h"
#include "runtime/layers/attention.h"
#include "runtime/tensor/tensor.h"

namespace {

using namespace pf;

struct Shape4 {
  int64_t batch, steps, dim, heads;
  int64_t hd() const { return dim / heads; }
};

std::vector<float> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

double thread_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// [T, hd] block at columns [col, col + hd) of batch b of a [B, T, width] array, out and back.
void gather(const float* src, int64_t b, int64_t steps, int64_t width, int64_t col, int64_t hd, float* out) {
  for (int64_t t = 0; t < steps; ++t)
    for (int64_t i = 0; i < hd; ++i) out[t * hd + i] = src[(b * steps + t) * width + col + i];
}
void scatter(const float* in, int64_t b, int64_t steps, int64_t width, int64_t col, int64_t hd, float* dst) {
  for (int64_t t = 0; t < steps; ++t)
    for (int64_t i = 0; i < hd; ++i) dst[(b * steps + t) * width + col + i] = in[t * hd + i];
}

struct Buffers {
  Shape4 s;
  std::vector<float> qkv, dout;                      // inputs: [B, T, 3 dim], [B, T, dim]
  std::vector<float> out_old, out_new, dqkv_old, dqkv_new;
  std::vector<float> probs, lse;                     // saved: [B, H, T, T] (unfused), [B, H, T] (fused)
  std::vector<float> q, k, v, o, g, dp, dq, dk, dv;  // the unfused core's per-head blocks
  std::vector<float> work;                           // the fused kernel's workspace
  explicit Buffers(const Shape4& shape) : s(shape) {
    const size_t rows = static_cast<size_t>(s.batch * s.steps), block = static_cast<size_t>(s.steps * s.hd());
    qkv = random_values(rows * 3 * s.dim, 1);
    dout = random_values(rows * s.dim, 2);
    out_old.assign(rows * s.dim, 0.0f);
    out_new = out_old;
    dqkv_old.assign(rows * 3 * s.dim, 0.0f);
    dqkv_new = dqkv_old;
    probs.assign(static_cast<size_t>(s.batch * s.heads * s.steps * s.steps), 0.0f);
    lse.assign(static_cast<size_t>(s.batch * s.heads * s.steps), 0.0f);
    for (auto* m : {&q, &k, &v, &o, &g, &dq, &dk, &dv}) m->assign(block, 0.0f);
    dp.assign(static_cast<size_t>(s.steps * s.steps), 0.0f);
    work.assign(cpu::flash_attention_workspace_floats(dims()), 0.0f);
  }
  cpu::AttentionDims dims() const { return {s.steps, s.steps, s.hd(), 0}; }
};

void old_forward(Buffers& x) {
  const Shape4& s = x.s;
  const int64_t T = s.steps, hd = s.hd(), w = 3 * s.dim;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      gather(x.qkv.data(), b, T, w, h * hd, hd, x.q.data());
      gather(x.qkv.data(), b, T, w, s.dim + h * hd, hd, x.k.data());
      gather(x.qkv.data(), b, T, w, 2 * s.dim + h * hd, hd, x.v.data());
      cpu::attention_reference_forward(x.dims(), x.q.data(), x.k.data(), x.v.data(),
                                       x.probs.data() + (b * s.heads + h) * T * T, x.o.data());
      scatter(x.o.data(), b, T, s.dim, h * hd, hd, x.out_old.data());
    }
}

void old_backward(Buffers& x) {
  const Shape4& s = x.s;
  const int64_t T = s.steps, hd = s.hd(), w = 3 * s.dim;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      gather(x.qkv.data(), b, T, w, h * hd, hd, x.q.data());
      gather(x.qkv.data(), b, T, w, s.dim + h * hd, hd, x.k.data());
      gather(x.qkv.data(), b, T, w, 2 * s.dim + h * hd, hd, x.v.data());
      gather(x.dout.data(), b, T, s.dim, h * hd, hd, x.g.data());
      cpu::attention_reference_backward(x.dims(), x.q.data(), x.k.data(), x.v.data(),
                                        x.probs.data() + (b * s.heads + h) * T * T, x.g.data(), x.dp.data(),
                                        x.dq.data(), x.dk.data(), x.dv.data());
      scatter(x.dq.data(), b, T, w, h * hd, hd, x.dqkv_old.data());
      scatter(x.dk.data(), b, T, w, s.dim + h * hd, hd, x.dqkv_old.data());
      scatter(x.dv.data(), b, T, w, 2 * s.dim + h * hd, hd, x.dqkv_old.data());
    }
}

void new_forward(Buffers& x) {
  const Shape4& s = x.s;
  const int64_t T = s.steps, hd = s.hd(), w = 3 * s.dim;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      const float* q = x.qkv.data() + b * T * w + h * hd;
      cpu::flash_attention_forward(x.dims(), {q, w}, {q + s.dim, w}, {q + 2 * s.dim, w},
                                   {x.out_new.data() + b * T * s.dim + h * hd, s.dim},
                                   x.lse.data() + (b * s.heads + h) * T, x.work.data());
    }
}

void new_backward(Buffers& x) {
  const Shape4& s = x.s;
  const int64_t T = s.steps, hd = s.hd(), w = 3 * s.dim;
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < s.heads; ++h) {
      const int64_t at = b * T * w + h * hd, rows_at = b * T * s.dim + h * hd;
      const float* q = x.qkv.data() + at;
      float* dq = x.dqkv_new.data() + at;
      cpu::flash_attention_backward(x.dims(), {q, w}, {q + s.dim, w}, {q + 2 * s.dim, w},
                                    {x.out_new.data() + rows_at, s.dim}, x.lse.data() + (b * s.heads + h) * T,
                                    {x.dout.data() + rows_at, s.dim}, {dq, w}, {dq + s.dim, w},
                                    {dq + 2 * s.dim, w}, x.work.data());
    }
}

// Thread CPU and wall milliseconds of fn().
template <typename Fn>
std::pair<double, double> time_ms(Fn&& fn) {
  const double c0 = thread_cpu_seconds();
  const auto w0 = std::chrono::steady_clock::now();
  fn();
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count();
  return {1e3 * (thread_cpu_seconds() - c0), 1e3 * wall};
}

double max_relative_difference(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0.0, m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    d = std::max(d, std::fabs(static_cast<double>(a[i]) - b[i]));
    m = std::max(m, std::fabs(static_cast<double>(b[i])));
  }
  return m > 0.0 ? d / m : d;
}

// The layer's saved bytes after F for one micro-batch, and with the unfused core's probabilities
// in place of the log-sum-exp.
std::pair<size_t, size_t> saved_bytes(const Shape4& s) {
  CausalSelfAttention attn("attn", s.dim, s.heads);
  SavedContext ctx;
  attn.forward(Tensor::from_vector({s.batch, s.steps, s.dim},
                                   random_values(static_cast<size_t>(s.batch * s.steps * s.dim), 3)),
               ctx);
  const size_t fused = ctx.bytes();
  const size_t lse = static_cast<size_t>(s.batch * s.heads * s.steps) * sizeof(float);
  const size_t probs = static_cast<size_t>(s.batch * s.heads * s.steps * s.steps) * sizeof(float);
  return {fused - lse + probs, fused};
}

nlohmann::json run_case(const Shape4& s, int reps) {
  Buffers x(s);
  std::vector<double> of_cpu, nf_cpu, ob_cpu, nb_cpu, of_wall, nf_wall, ob_wall, nb_wall;
  for (int r = 0; r <= reps; ++r) {  // rep 0 warms up and is not counted
    const auto of = time_ms([&] { old_forward(x); });
    const auto nf = time_ms([&] { new_forward(x); });
    const auto ob = time_ms([&] { old_backward(x); });
    const auto nb = time_ms([&] { new_backward(x); });
    if (r == 0) continue;
    of_cpu.push_back(of.first), of_wall.push_back(of.second);
    nf_cpu.push_back(nf.first), nf_wall.push_back(nf.second);
    ob_cpu.push_back(ob.first), ob_wall.push_back(ob.second);
    nb_cpu.push_back(nb.first), nb_wall.push_back(nb.second);
  }
  const auto [bytes_before, bytes_after] = saved_bytes(s);
  const double f_old = median(of_cpu), f_new = median(nf_cpu), b_old = median(ob_cpu), b_new = median(nb_cpu);
  nlohmann::json j = {
      {"T", s.steps},
      {"d_model", s.dim},
      {"heads", s.heads},
      {"head_dim", s.hd()},
      {"batch", s.batch},
      {"cpu_ms", {{"F_old", f_old}, {"F_new", f_new}, {"B_old", b_old}, {"B_new", b_new}}},
      {"wall_ms",
       {{"F_old", median(of_wall)}, {"F_new", median(nf_wall)}, {"B_old", median(ob_wall)}, {"B_new", median(nb_wall)}}},
      {"speedup", {{"F", f_old / f_new}, {"B", b_old / b_new}, {"F+B", (f_old + b_old) / (f_new + b_new)}}},
      {"saved_bytes_per_micro_batch", {{"before", bytes_before}, {"after", bytes_after}}},
      {"max_relative_difference",
       {{"out", max_relative_difference(x.out_new, x.out_old)},
        {"dqkv", max_relative_difference(x.dqkv_new, x.dqkv_old)}}},
  };
  return j;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 7, tokens = 2048;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--reps") reps = std::max(1, std::atoi(argv[i + 1]));
    else if (flag == "--tokens") tokens = std::max(1, std::atoi(argv[i + 1]));
    else {
      std::cerr << "unknown option " << flag << " (use --reps N, --tokens N)\n";
      return 2;
    }
  }
  cpu::set_blas_threads_for_this_thread(1);
  std::vector<Shape4> shapes = {{0, 64, 64, 2}};
  for (int64_t t : {64, 128, 256, 512, 1024}) shapes.push_back({0, t, 256, 8});
  nlohmann::json cases = nlohmann::json::array();
  for (Shape4 s : shapes) {
    s.batch = std::max<int64_t>(1, tokens / s.steps);
    cases.push_back(run_case(s, reps));
  }
  nlohmann::json out = {{"benchmark", "attention_core"},
                        {"threads", 1},
                        {"reps", reps},
                        {"tokens_per_micro_batch", tokens},
                        {"time", "median over reps; cpu_ms = thread CPU time"},
                        {"cases", cases}};
  std::cout << out.dump(2) << "\n";
  return 0;
}
