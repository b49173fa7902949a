// GPU benchmark of one pre-LN GPT block (runtime/kernels/cuda/gpt_block.h): F (gpt_block_forward),
// B (gpt_block_backward_input) and W (gpt_block_backward_weight), bf16 at hidden 1024/2048/4096 and
// fp32 at one shape, timed with CUDA events after warm-up (median of --reps), plus the cost of
// offloading the block's saved activations to pinned host memory. Prints ONE JSON object on stdout;
// on a machine without a GPU it prints {"benchmark": ..., "skipped": "<reason>"} and exits 0.
//
//   bazel run -c opt //bench/gpu:gpt_block_gpu_bench -- [--peak-tflops 989.4] [--tokens 8192] ...
//   (or gpu_bundle/bin/gpt_block_gpu_bench through tools/gpu_check.sh on the GPU machine)
//
// FLOP counts (N = tokens = batch * steps, h = dim, T = steps, MLP width 4h, multiply-add = 2):
//   matmuls, forward: QKV 2·N·h·3h + attention proj 2·N·h·h + MLP fc 2·N·h·4h + MLP proj 2·N·4h·h
//                     = 2·N·12h² = 24·N·h²
//   attention core, forward: S = Q Kᵀ and O = P V, 2·N·T·h each = 4·N·T·h. Counted as FULL (not
//                     causal-halved): our kernels compute the whole [T, T] product and zero the
//                     masked half (docs/CUDA_KERNELS.md), so this is the work actually done. The
//                     PyTorch script (bench/gpu/torch_gpt_block.py) uses the same counts, so the
//                     ours ÷ torch ratios do not depend on the convention.
//   F = 24·N·h² + 4·N·T·h
//   B = 24·N·h² (dx = dy W for the four Linears) + 8·N·T·h (dV = Pᵀ dO, dP = dO Vᵀ, dQ = dS K,
//       dK = dSᵀ Q) — the attention core has no weights, so all of its backward is in B
//   W = 24·N·h² (dW += dyᵀ x for the four Linears)
//   Element-wise work (LayerNorm, GELU, softmax, bias sums, residual adds) is not counted.
//
// Memory comes from cudaMalloc / cudaMallocHost directly (no caching allocator): weights and
// fp32 gradients, one activation buffer (gpt_block_activation_bytes) and one workspace per block.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <iostream>
#include <random>
#include <sstream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <cuda_runtime_api.h>
#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/backend/cuda_backend.h"
#include "runtime/kernels/cuda/check.h"
#include "runtime/kernels/cuda/elementwise.h"
#include "runtime/kernels/cuda/gpt_block.h"

namespace {

using nlohmann::json;
using pf::cuda::bf16;

constexpr const char* kName = "gpt_block_gpu";

struct Options {
  double peak_tflops = 989.4;       // H200 SXM dense bf16 tensor-core peak
  double peak_fp32_tflops = 67.0;   // H200 SXM fp32 (non-tensor-core) peak
  int64_t steps = 1024;
  int64_t tokens = 8192;            // batch = tokens / steps (at least 1)
  int64_t batch = 0;                // > 0 overrides tokens
  int64_t head_dim = 128;           // heads = dim / head_dim
  std::vector<int64_t> dims = {1024, 2048, 4096};
  std::vector<int64_t> fp32_dims = {1024};
  int warmup = 3;
  int reps = 10;
  int device = 0;
  bool offload = true;
  int64_t offload_dim = 2048;
  int offload_microbatches = 4;
  bool tf32 = false;                // fp32 products on TF32 tensor cores
  bool lt_bias = true;              // LinearOptions::lt_bias_epilogue (the library default)
  bool lt_gelu = false;             // LinearOptions::lt_gelu_epilogue (the library default)
};

void usage() {
  std::cerr << "usage: gpt_block_gpu_bench [--peak-tflops F] [--peak-fp32-tflops F] [--steps N]\n"
               "  [--tokens N | --batch N] [--head-dim N] [--dims 1024,2048,4096] [--fp32-dims 1024|none]\n"
               "  [--warmup N] [--reps N] [--device N] [--no-offload] [--offload-dim N]\n"
               "  [--offload-microbatches N] [--tf32] [--no-lt-bias] [--lt-gelu]\n";
}

std::vector<int64_t> parse_list(const std::string& s) {
  std::vector<int64_t> out;
  if (s == "none" || s.empty()) return out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoll(item));
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string value;
    const size_t eq = a.find('=');
    bool has_inline = false;
    if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_inline = true;
    }
    auto next = [&]() -> std::string {
      if (has_inline) return value;
      if (i + 1 >= argc) throw std::invalid_argument("missing value after " + a);
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      usage();
      std::exit(0);
    } else if (a == "--peak-tflops") o.peak_tflops = std::stod(next());
    else if (a == "--peak-fp32-tflops") o.peak_fp32_tflops = std::stod(next());
    else if (a == "--steps") o.steps = std::stoll(next());
    else if (a == "--tokens") o.tokens = std::stoll(next());
    else if (a == "--batch") o.batch = std::stoll(next());
    else if (a == "--head-dim") o.head_dim = std::stoll(next());
    else if (a == "--dims") o.dims = parse_list(next());
    else if (a == "--fp32-dims") o.fp32_dims = parse_list(next());
    else if (a == "--warmup") o.warmup = std::stoi(next());
    else if (a == "--reps") o.reps = std::stoi(next());
    else if (a == "--device") o.device = std::stoi(next());
    else if (a == "--no-offload") o.offload = false;
    else if (a == "--offload-dim") o.offload_dim = std::stoll(next());
    else if (a == "--offload-microbatches") o.offload_microbatches = std::stoi(next());
    else if (a == "--tf32") o.tf32 = true;
    else if (a == "--no-lt-bias") o.lt_bias = false;
    else if (a == "--lt-gelu") o.lt_gelu = true;
    else throw std::invalid_argument("unknown argument " + a);
  }
  if (o.steps <= 0 || o.tokens <= 0 || o.head_dim <= 0 || o.reps <= 0 || o.warmup < 0 ||
      o.offload_microbatches <= 0)
    throw std::invalid_argument("sizes, --reps and --offload-microbatches must be positive");
  return o;
}

pf::cuda::LinearOptions linear_options(const Options& o) {
  pf::cuda::LinearOptions lin;
  lin.gemm.allow_tf32 = o.tf32;
  lin.lt_bias_epilogue = o.lt_bias;
  lin.lt_gelu_epilogue = o.lt_gelu;
  return lin;
}

int64_t batch_of(const Options& o) { return o.batch > 0 ? o.batch : std::max<int64_t>(1, o.tokens / o.steps); }

// ---- raw CUDA memory (RAII over cudaMalloc / cudaMallocHost) ----

class DeviceMem {
 public:
  DeviceMem() = default;
  explicit DeviceMem(size_t bytes) : bytes_(bytes) {
    if (bytes) PF_CUDA_CHECK(cudaMalloc(&p_, bytes));
  }
  ~DeviceMem() {
    if (p_) cudaFree(p_);
  }
  DeviceMem(DeviceMem&& o) noexcept : p_(std::exchange(o.p_, nullptr)), bytes_(o.bytes_) {}
  DeviceMem& operator=(DeviceMem&& o) noexcept {
    std::swap(p_, o.p_);
    std::swap(bytes_, o.bytes_);
    return *this;
  }
  DeviceMem(const DeviceMem&) = delete;
  template <typename U>
  U* as() const { return static_cast<U*>(p_); }
  void* get() const { return p_; }
  size_t bytes() const { return bytes_; }

 private:
  void* p_ = nullptr;
  size_t bytes_ = 0;
};

class HostPinned {
 public:
  explicit HostPinned(size_t bytes) {
    if (bytes) PF_CUDA_CHECK(cudaMallocHost(&p_, bytes));
  }
  ~HostPinned() {
    if (p_) cudaFreeHost(p_);
  }
  HostPinned(HostPinned&& o) noexcept : p_(std::exchange(o.p_, nullptr)) {}
  HostPinned(const HostPinned&) = delete;
  char* get() const { return static_cast<char*>(p_); }

 private:
  void* p_ = nullptr;
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { PF_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() {
    if (s) cudaStreamDestroy(s);
  }
  Stream(const Stream&) = delete;
};

struct Event {
  cudaEvent_t e = nullptr;
  Event() { PF_CUDA_CHECK(cudaEventCreate(&e)); }
  ~Event() {
    if (e) cudaEventDestroy(e);
  }
  Event(Event&& o) noexcept : e(std::exchange(o.e, nullptr)) {}
  Event(const Event&) = delete;
};

float elapsed_ms(const Event& a, const Event& b) {
  float ms = 0;
  PF_CUDA_CHECK(cudaEventElapsedTime(&ms, a.e, b.e));
  return ms;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Uploads n values drawn uniformly from [lo, hi] (or `constant` when lo == hi) as T.
template <typename T>
void fill(cudaStream_t stream, T* dst, int64_t n, float lo, float hi, uint64_t seed) {
  std::vector<float> host(static_cast<size_t>(n));
  if (lo == hi) {
    std::fill(host.begin(), host.end(), lo);
  } else {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> dist(lo, hi);
    for (float& v : host) v = dist(rng);
  }
  if constexpr (std::is_same_v<T, float>) {
    PF_CUDA_CHECK(cudaMemcpyAsync(dst, host.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
    PF_CUDA_CHECK(cudaStreamSynchronize(stream));
  } else {
    DeviceMem tmp(static_cast<size_t>(n) * sizeof(float));
    PF_CUDA_CHECK(cudaMemcpyAsync(tmp.get(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice, stream));
    pf::cuda::convert_f32_to_bf16(stream, n, tmp.as<float>(), dst);
    PF_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
}

// ---- one block: parameters, gradients, activations, inputs ----

template <typename T>
struct Block {
  pf::cuda::GptBlockShape shape;
  std::vector<DeviceMem> values, grads;  // TransformerBlock::parameters() order, 12 each
  pf::cuda::GptBlockWeights<T> w;
  pf::cuda::GptBlockGrads g;
  DeviceMem x, dy, dx, y, workspace;

  Block(cudaStream_t stream, const pf::cuda::GptBlockShape& s) : shape(s) {
    const int64_t d = s.dim, hd = s.hidden;
    const int64_t sizes[12] = {d, d, 3 * d * d, 3 * d, d * d, d, d, d, hd * d, hd, d * hd, d};
    const int64_t fan_in[12] = {0, 0, d, 0, d, 0, 0, 0, d, 0, hd, 0};
    for (int i = 0; i < 12; ++i) {
      values.emplace_back(static_cast<size_t>(sizes[i]) * sizeof(T));
      grads.emplace_back(static_cast<size_t>(sizes[i]) * sizeof(float));
      const bool gamma = i == 0 || i == 6;
      if (gamma) {
        fill<T>(stream, values[i].as<T>(), sizes[i], 1.0f, 1.0f, 0);
      } else if (fan_in[i] > 0) {
        const float a = 1.0f / std::sqrt(static_cast<float>(fan_in[i]));
        fill<T>(stream, values[i].as<T>(), sizes[i], -a, a, 100 + i);
      } else {
        fill<T>(stream, values[i].as<T>(), sizes[i], -0.02f, 0.02f, 100 + i);
      }
      PF_CUDA_CHECK(cudaMemsetAsync(grads[i].get(), 0, grads[i].bytes(), stream));
    }
    const T* p[12];
    float* q[12];
    for (int i = 0; i < 12; ++i) {
      p[i] = values[i].as<T>();
      q[i] = grads[i].as<float>();
    }
    w = pf::cuda::gpt_block_weights<T>(p);
    g = pf::cuda::gpt_block_grads(q);

    const int64_t n = s.rows() * s.dim;
    x = DeviceMem(n * sizeof(T));
    dy = DeviceMem(n * sizeof(T));
    dx = DeviceMem(n * sizeof(T));
    y = DeviceMem(n * sizeof(T));
    workspace = DeviceMem(pf::cuda::gpt_block_workspace_bytes<T>(s));
    fill<T>(stream, x.as<T>(), n, -1.0f, 1.0f, 1);
    fill<T>(stream, dy.as<T>(), n, -1e-2f, 1e-2f, 2);
  }
};

// One activation buffer (F writes, B reads) with the byte ranges F saves, for offloading.
template <typename T>
struct Saved {
  DeviceMem mem;
  pf::cuda::GptBlockActivations<T> acts;
  std::vector<std::pair<size_t, size_t>> ranges;  // (offset, bytes) of what F writes and B/W read
  size_t saved_bytes = 0;

  explicit Saved(const pf::cuda::GptBlockShape& s)
      : mem(pf::cuda::gpt_block_activation_bytes<T>(s)),
        acts(pf::cuda::gpt_block_carve_activations<T>(s, mem.get())) {
    // F writes ln1_mean .. attended and h .. fc_act (gpt_block.h); d_qkv sits between attended and
    // h and the d_* tail is written by B, so neither is copied.
    const char* base = mem.as<char>();
    auto off = [&](const void* p) { return static_cast<size_t>(static_cast<const char*>(p) - base); };
    const int64_t rows = s.rows();
    const size_t attended_end = off(acts.attn.attended) + rows * s.dim * sizeof(T);
    const size_t fc_act_end = off(acts.fc_act) + rows * s.hidden * sizeof(T);
    ranges = {{off(acts.ln1_mean), attended_end - off(acts.ln1_mean)}, {off(acts.h), fc_act_end - off(acts.h)}};
    for (const auto& r : ranges) saved_bytes += r.second;
  }
};

struct PassFlops {
  double f, b, w;
};

PassFlops flops(const pf::cuda::GptBlockShape& s) {
  const double n = static_cast<double>(s.rows()), h = static_cast<double>(s.dim),
               t = static_cast<double>(s.steps), hid = static_cast<double>(s.hidden);
  // Linears: qkv (h -> 3h), proj (h -> h), fc (h -> hid), proj (hid -> h); 2 FLOP per multiply-add.
  const double linear = 2.0 * n * (h * 3 * h + h * h + h * hid + hid * h);  // = 24 N h² for hid = 4h
  const double attn_f = 2.0 * 2.0 * n * t * h;                              // Q Kᵀ and P V, full
  return {linear + attn_f, linear + 2.0 * attn_f, linear};
}

json pass_json(const std::vector<double>& ms, double flop, double peak) {
  const double med = median(ms);
  const double tflops = flop / (med * 1e-3) / 1e12;
  return {{"ms", med},
          {"ms_min", *std::min_element(ms.begin(), ms.end())},
          {"gflop", flop / 1e9},
          {"tflops", tflops},
          {"peak_fraction", tflops / peak}};
}

template <typename T>
json bench_shape(const Options& o, cudaStream_t stream, int64_t dim) {
  pf::cuda::GptBlockShape s;
  s.batch = batch_of(o);
  s.steps = o.steps;
  s.dim = dim;
  s.heads = std::max<int64_t>(1, dim / o.head_dim);
  s.hidden = 4 * dim;
  const bool is_bf16 = std::is_same_v<T, bf16>;
  const pf::cuda::LinearOptions lin = linear_options(o);

  Block<T> blk(stream, s);
  Saved<T> saved(s);
  auto f = [&] {
    pf::cuda::gpt_block_forward<T>(stream, s, blk.w, blk.x.template as<T>(), saved.acts, blk.y.template as<T>(),
                                   blk.workspace.get(), lin);
  };
  auto b = [&] {
    pf::cuda::gpt_block_backward_input<T>(stream, s, blk.w, blk.x.template as<T>(), saved.acts,
                                          blk.dy.template as<T>(), blk.dx.template as<T>(), blk.workspace.get(),
                                          lin);
  };
  auto wg = [&] {
    pf::cuda::gpt_block_backward_weight<T>(stream, s, blk.x.template as<T>(), saved.acts,
                                           blk.dy.template as<T>(), blk.g, lin);
  };
  for (int i = 0; i < o.warmup; ++i) {
    f();
    b();
    wg();
  }
  PF_CUDA_CHECK(cudaStreamSynchronize(stream));

  std::vector<double> tf, tb, tw, tall;
  Event e0, e1, e2, e3;
  for (int i = 0; i < o.reps; ++i) {
    PF_CUDA_CHECK(cudaEventRecord(e0.e, stream));
    f();
    PF_CUDA_CHECK(cudaEventRecord(e1.e, stream));
    b();
    PF_CUDA_CHECK(cudaEventRecord(e2.e, stream));
    wg();
    PF_CUDA_CHECK(cudaEventRecord(e3.e, stream));
    PF_CUDA_CHECK(cudaEventSynchronize(e3.e));
    tf.push_back(elapsed_ms(e0, e1));
    tb.push_back(elapsed_ms(e1, e2));
    tw.push_back(elapsed_ms(e2, e3));
    tall.push_back(elapsed_ms(e0, e3));
  }
  const PassFlops fl = flops(s);
  const double peak = is_bf16 ? o.peak_tflops : (o.tf32 ? o.peak_tflops / 2 : o.peak_fp32_tflops);
  json r = {{"dtype", is_bf16 ? "bf16" : (o.tf32 ? "fp32_tf32" : "fp32")},
            {"dim", s.dim},
            {"heads", s.heads},
            {"hidden", s.hidden},
            {"batch", s.batch},
            {"steps", s.steps},
            {"tokens", s.rows()},
            {"peak_tflops", peak},
            {"activation_bytes", saved.mem.bytes()},
            {"workspace_bytes", blk.workspace.bytes()}};
  r["passes"] = {{"F", pass_json(tf, fl.f, peak)},
                 {"B", pass_json(tb, fl.b, peak)},
                 {"W", pass_json(tw, fl.w, peak)},
                 {"FBW", pass_json(tall, fl.f + fl.b + fl.w, peak)}};
  return r;
}

// F for micro-batches 0..K-1, then B and W in reverse order, on `compute`. With `offload`, each
// micro-batch's saved activations go to pinned host memory on `copy` after its F (the copy stream
// waits on an event recorded after F) and come back before its B (compute waits on an event
// recorded after the host-to-device copy). Returns the median wall time (events on `compute`).
template <typename T>
double run_offload_schedule(const Options& o, cudaStream_t compute, cudaStream_t copy, Block<T>& blk,
                            std::vector<Saved<T>>& saved, std::vector<HostPinned>& host, bool offload,
                            int reps) {
  const pf::cuda::GptBlockShape& s = blk.shape;
  const int k = static_cast<int>(saved.size());
  const pf::cuda::LinearOptions lin = linear_options(o);
  std::vector<Event> after_f(k), after_d2h(k), after_h2d(k);
  Event start, stop;
  std::vector<double> times;
  for (int rep = 0; rep < reps + o.warmup; ++rep) {
    PF_CUDA_CHECK(cudaEventRecord(start.e, compute));
    for (int i = 0; i < k; ++i) {
      pf::cuda::gpt_block_forward<T>(compute, s, blk.w, blk.x.template as<T>(), saved[i].acts,
                                     blk.y.template as<T>(), blk.workspace.get(), lin);
      if (offload) {
        PF_CUDA_CHECK(cudaEventRecord(after_f[i].e, compute));
        PF_CUDA_CHECK(cudaStreamWaitEvent(copy, after_f[i].e, 0));
        size_t host_off = 0;
        for (const auto& [off, bytes] : saved[i].ranges) {
          PF_CUDA_CHECK(cudaMemcpyAsync(host[i].get() + host_off, saved[i].mem.template as<char>() + off, bytes,
                                        cudaMemcpyDeviceToHost, copy));
          host_off += bytes;
        }
        PF_CUDA_CHECK(cudaEventRecord(after_d2h[i].e, copy));
      }
    }
    if (offload) {
      // Prefetch in backward order on the copy stream (FIFO after every offload).
      for (int i = k - 1; i >= 0; --i) {
        size_t host_off = 0;
        for (const auto& [off, bytes] : saved[i].ranges) {
          PF_CUDA_CHECK(cudaMemcpyAsync(saved[i].mem.template as<char>() + off, host[i].get() + host_off, bytes,
                                        cudaMemcpyHostToDevice, copy));
          host_off += bytes;
        }
        PF_CUDA_CHECK(cudaEventRecord(after_h2d[i].e, copy));
      }
    }
    for (int i = k - 1; i >= 0; --i) {
      if (offload) PF_CUDA_CHECK(cudaStreamWaitEvent(compute, after_h2d[i].e, 0));
      pf::cuda::gpt_block_backward_input<T>(compute, s, blk.w, blk.x.template as<T>(), saved[i].acts,
                                            blk.dy.template as<T>(), blk.dx.template as<T>(), blk.workspace.get(),
                                            lin);
      pf::cuda::gpt_block_backward_weight<T>(compute, s, blk.x.template as<T>(), saved[i].acts,
                                             blk.dy.template as<T>(), blk.g, lin);
    }
    PF_CUDA_CHECK(cudaEventRecord(stop.e, compute));
    PF_CUDA_CHECK(cudaEventSynchronize(stop.e));
    PF_CUDA_CHECK(cudaStreamSynchronize(copy));
    if (rep >= o.warmup) times.push_back(elapsed_ms(start, stop));
  }
  return median(times);
}

json bench_offload(const Options& o, cudaStream_t compute, cudaStream_t copy) {
  using T = bf16;
  pf::cuda::GptBlockShape s;
  s.batch = batch_of(o);
  s.steps = o.steps;
  s.dim = o.offload_dim;
  s.heads = std::max<int64_t>(1, s.dim / o.head_dim);
  s.hidden = 4 * s.dim;
  Block<T> blk(compute, s);
  json out = {{"dtype", "bf16"},
              {"dim", s.dim},
              {"heads", s.heads},
              {"hidden", s.hidden},
              {"batch", s.batch},
              {"steps", s.steps},
              {"tokens", s.rows()},
              {"note",
               "ratio = time(F+B+W with saved activations copied to pinned host after F on a copy stream "
               "and back before B) / time(same without copies); >1 means slower"}};

  // Pure copy bandwidth of one micro-batch's saved bytes.
  {
    Saved<T> one(s);
    HostPinned h(one.saved_bytes);
    Event a, b, c;
    std::vector<double> d2h, h2d;
    for (int rep = 0; rep < o.reps + 1; ++rep) {
      PF_CUDA_CHECK(cudaEventRecord(a.e, copy));
      size_t ho = 0;
      for (const auto& [off, bytes] : one.ranges) {
        PF_CUDA_CHECK(cudaMemcpyAsync(h.get() + ho, one.mem.as<char>() + off, bytes, cudaMemcpyDeviceToHost, copy));
        ho += bytes;
      }
      PF_CUDA_CHECK(cudaEventRecord(b.e, copy));
      ho = 0;
      for (const auto& [off, bytes] : one.ranges) {
        PF_CUDA_CHECK(cudaMemcpyAsync(one.mem.as<char>() + off, h.get() + ho, bytes, cudaMemcpyHostToDevice, copy));
        ho += bytes;
      }
      PF_CUDA_CHECK(cudaEventRecord(c.e, copy));
      PF_CUDA_CHECK(cudaEventSynchronize(c.e));
      if (rep > 0) {
        d2h.push_back(elapsed_ms(a, b));
        h2d.push_back(elapsed_ms(b, c));
      }
    }
    const double gb = static_cast<double>(one.saved_bytes) / 1e9;
    out["saved_bytes_per_block"] = one.saved_bytes;
    out["activation_bytes_per_block"] = one.mem.bytes();
    out["copy"] = {{"d2h_ms", median(d2h)},
                   {"h2d_ms", median(h2d)},
                   {"d2h_GBps", gb / (median(d2h) * 1e-3)},
                   {"h2d_GBps", gb / (median(h2d) * 1e-3)}};
  }

  auto schedule = [&](int k) {
    std::vector<Saved<T>> saved;
    std::vector<HostPinned> host;
    for (int i = 0; i < k; ++i) {
      saved.emplace_back(s);
      host.emplace_back(saved.back().saved_bytes);
    }
    const double without = run_offload_schedule<T>(o, compute, copy, blk, saved, host, false, o.reps);
    const double with = run_offload_schedule<T>(o, compute, copy, blk, saved, host, true, o.reps);
    return json{{"microbatches", k}, {"ms_without", without}, {"ms_with", with}, {"ratio", with / without}};
  };
  // One block alone: nothing to overlap the copies with (the round trip is fully exposed).
  out["single_block"] = schedule(1);
  // K micro-batches (F x K, then B+W x K in reverse): offloads overlap the later forwards and
  // prefetches overlap the earlier backwards.
  if (o.offload_microbatches > 1) out["microbatched"] = schedule(o.offload_microbatches);
  out["ratio"] = out.contains("microbatched") ? out["microbatched"]["ratio"] : out["single_block"]["ratio"];
  return out;
}

json device_json(int dev) {
  cudaDeviceProp p{};
  PF_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  int driver = 0, runtime = 0;
  cudaDriverGetVersion(&driver);
  cudaRuntimeGetVersion(&runtime);
  return {{"index", dev},
          {"name", p.name},
          {"compute_capability", std::to_string(p.major) + "." + std::to_string(p.minor)},
          {"sm_count", p.multiProcessorCount},
          {"memory_gib", static_cast<double>(p.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0)},
          {"driver_version", driver},
          {"runtime_version", runtime}};
}

}  // namespace

int main(int argc, char** argv) {
  json out = {{"benchmark", kName}};
  Options o;
  try {
    o = parse(argc, argv);
  } catch (const std::exception& e) {
    usage();
    out["error"] = std::string("bad arguments: ") + e.what();
    std::cout << out.dump(2) << std::endl;
    return 2;
  }
  const pf::CudaAvailability avail = pf::probe_cuda();
  if (avail.device_count <= 0) {
    out["skipped"] = "no CUDA device: " + avail.reason;
    std::cout << out.dump(2) << std::endl;
    return 0;
  }
  if (o.device >= avail.device_count) {
    out["skipped"] = "device " + std::to_string(o.device) + " not present (" +
                     std::to_string(avail.device_count) + " devices)";
    std::cout << out.dump(2) << std::endl;
    return 0;
  }
  try {
    PF_CUDA_CHECK(cudaSetDevice(o.device));
    out["device"] = device_json(o.device);
    out["peak_tflops"] = {{"bf16", o.peak_tflops}, {"fp32", o.peak_fp32_tflops}};
    out["flop_convention"] =
        "F = 24*N*h^2 + 4*N*T*h, B = 24*N*h^2 + 8*N*T*h, W = 24*N*h^2 (N tokens, h dim, T steps, MLP 4h); "
        "attention products counted in full (causal mask not halved), element-wise ops not counted";
    out["config"] = {{"steps", o.steps},     {"batch", batch_of(o)}, {"head_dim", o.head_dim},
                     {"warmup", o.warmup},   {"reps", o.reps},       {"tf32", o.tf32},
                     {"lt_bias_epilogue", o.lt_bias}, {"lt_gelu_epilogue", o.lt_gelu},
                     {"timing", "CUDA events per pass; median (ms_min = fastest) of reps after warm-up"}};
    Stream compute, copy;
    // One failing shape (out of memory, ...) is reported in its entry and the others still run.
    json results = json::array();
    int errors = 0;
    auto guarded = [&](const char* dtype, int64_t d, auto&& fn) {
      try {
        return fn();
      } catch (const std::exception& e) {
        ++errors;
        cudaGetLastError();  // clear a non-sticky error before the next shape
        return json{{"dtype", dtype}, {"dim", d}, {"error", e.what()}};
      }
    };
    for (int64_t d : o.dims)
      results.push_back(guarded("bf16", d, [&] { return bench_shape<bf16>(o, compute.s, d); }));
    for (int64_t d : o.fp32_dims)
      results.push_back(guarded("fp32", d, [&] { return bench_shape<float>(o, compute.s, d); }));
    out["results"] = results;
    if (o.offload)
      out["offload"] = guarded("bf16", o.offload_dim, [&] { return bench_offload(o, compute.s, copy.s); });
    if (errors > 0) out["error"] = std::to_string(errors) + " measurement(s) failed (see their \"error\" fields)";
    PF_CUDA_CHECK(cudaDeviceSynchronize());
  } catch (const std::exception& e) {
    out["error"] = e.what();
    std::cout << out.dump(2) << std::endl;
    return 1;
  }
  std::cout << out.dump(2) << std::endl;
  return out.contains("error") ? 1 : 0;
}
