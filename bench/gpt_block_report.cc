// One run, one JSON object: how close one GPT TransformerBlock's F+B+W comes to the machine's
// single-thread sgemm rate, and what the caching CPU allocator (runtime/tensor/cpu_allocator.h)
// changes. Everything alternates inside the run, round after round, so that the other load on a
// shared machine hits all variants alike; figures are medians over the rounds.
//
//   bazel run -c opt //bench:gpt_block_report [-- --d_model 256 --rounds 9 --steps 4]
//
// Per round:
// * sgemm at the block's shapes: the block's 12 Linear products (bench/gemm_shapes.h) and, per
//   batch row and head, the 6 dense attention products, each once, as one timed sequence; and one
//   1024^3 product. OpenBLAS on one thread: "blas_threads" is the calling thread's OpenMP count
//   (the OpenMP OpenBLAS uses it per call; "openblas_pool_threads" is only the pool's size), and
//   "process_cpu_per_thread_cpu_*" (all threads' CPU time over the calling thread's) stays at 1
//   only if no second thread computes.
// * the block's F+B+W with the allocator's cache on and with it off (PF_CPU_ALLOCATOR_CACHE_BYTES=0;
//   the order swaps every round), each in a fresh child process (this program with --block_steps):
//   glibc's heap state, which decides how many pages fault in again, depends on everything the
//   process allocated before, so only a fresh process shows what a training run sees. The child
//   runs 2 untimed steps, then `steps` timed ones: time, minor page faults (getrusage ru_minflt)
//   and the allocator's hits per step.
// * allocate/free pairs from 1 and 2 threads through a private CpuAllocator, cache on and off.
//
// FLOPs are counted from the shapes: the Linears 2 * tokens * (3d^2 + d^2 + 4d^2 + 4d^2) per pass
// and the attention products 4 * tokens * T * d per pass (dense, as if unmasked; "causal" counts
// only the T(T+1)/2 unmasked query-key pairs), with backward (B + W) twice the forward. Rates
// are per thread-CPU second (what the other load on the machine does not inflate) and, as
// "wall", per elapsed second.
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/gemm_shapes.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/layers/transformer_block.h"
#include "runtime/models/init.h"
#include "runtime/tensor/cpu_allocator.h"
#include "runtime/tensor/tensor.h"

namespace {

using pf::bench::GemmShape;

constexpr int64_t kBatch = 8;
constexpr int64_t kSeqLen = 64;
constexpr int64_t kHeads = 4;

struct Sample {
  double wall = 0, cpu = 0;
  long faults = 0;
};

// User + system CPU seconds of the whole process (all threads).
double process_cpu() {
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

Sample now() {
  Sample s;
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  s.wall = static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  s.cpu = static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  rusage u;
  getrusage(RUSAGE_SELF, &u);
  s.faults = u.ru_minflt;
  return s;
}

Sample since(const Sample& start) {
  Sample end = now();
  return {end.wall - start.wall, end.cpu - start.cpu, end.faults - start.faults};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

void fill(float* p, int64_t n, uint32_t seed) {
  uint32_t x = seed * 2654435761u + 1;
  for (int64_t i = 0; i < n; ++i) {
    x = x * 1664525u + 1013904223u;
    p[i] = static_cast<float>((x >> 8) & 0xFFFF) / 65536.0f - 0.5f;
  }
}

pf::Tensor random_tensor(const pf::Shape& shape, uint32_t seed) {
  pf::Tensor t = pf::Tensor::empty(shape);
  fill(t.f32(), t.numel(), seed);
  return t;
}

// Operands of one product, allocated once.
struct GemmCase {
  GemmShape shape;
  int repeats;  // calls per sequence
  std::vector<float> a, b, c;
  std::vector<double> cpu_seconds;  // per round, all repeats
};

GemmCase make_case(const GemmShape& g, int repeats, uint32_t seed) {
  GemmCase c{g, repeats, std::vector<float>(static_cast<size_t>(g.m * g.k)),
             std::vector<float>(static_cast<size_t>(g.k * g.n)), std::vector<float>(static_cast<size_t>(g.m * g.n)), {}};
  fill(c.a.data(), static_cast<int64_t>(c.a.size()), seed);
  fill(c.b.data(), static_cast<int64_t>(c.b.size()), seed + 1);
  fill(c.c.data(), static_cast<int64_t>(c.c.size()), seed + 2);
  return c;
}

void run_case(GemmCase& c) {
  const GemmShape& g = c.shape;
  for (int r = 0; r < c.repeats; ++r)
    pf::cpu::gemm(g.trans_a, g.trans_b, g.m, g.n, g.k, 1.0f, c.a.data(), c.b.data(), g.beta, c.c.data());
}

struct BlockRun {
  std::vector<double> wall, cpu, faults, hits;  // per step, one entry per round
};

// The child: times the block in this process and prints one JSON line.
int time_block(int64_t d, int steps) {
  pf::cpu::set_blas_threads_for_this_thread(1);
  pf::TransformerBlock block("blocks.0", d, kHeads, 4 * d);
  pf::initialize_parameters(block.parameters(), 1234);
  const pf::Tensor x = random_tensor({kBatch, kSeqLen, d}, 1);
  const pf::Tensor dy = random_tensor({kBatch, kSeqLen, d}, 2);
  auto step = [&] {
    pf::SavedContext ctx;
    pf::Tensor y = block.forward(x, ctx);
    pf::Tensor dx = block.backward_input(ctx, dy);
    block.backward_weight(ctx);
    if (y.f32()[0] == 12345.0f && dx.f32()[0] == 12345.0f) std::puts("");  // keep both alive
  };
  step();  // untimed: the cache fills, glibc's thresholds settle
  step();
  const int64_t hits = pf::cpu_allocator().stats().hits;
  const double cpu0 = process_cpu();
  const Sample start = now();
  for (int s = 0; s < steps; ++s) step();
  const Sample t = since(start);
  const nlohmann::json out = {{"wall", t.wall / steps},
                              {"cpu", t.cpu / steps},
                              {"process_cpu", (process_cpu() - cpu0) / steps},
                              {"faults", static_cast<double>(t.faults) / steps},
                              {"hits", static_cast<double>(pf::cpu_allocator().stats().hits - hits) / steps},
                              {"cache_limit", pf::cpu_allocator().stats().limit_bytes}};
  std::printf("%s\n", out.dump().c_str());
  return 0;
}

// Runs this program as a child timing the block with the given cache limit; adds its figures.
void run_child(const std::string& exe, int64_t d, int steps, size_t cache_limit, BlockRun& out,
               double& process_cpu_sum, double& thread_cpu_sum) {
  const std::string command = "PF_CPU_ALLOCATOR_CACHE_BYTES=" + std::to_string(cache_limit) + " '" + exe +
                              "' --d_model " + std::to_string(d) + " --block_steps " + std::to_string(steps);
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) throw std::runtime_error("cannot run " + command);
  std::string text;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) text.append(buffer, n);
  if (pclose(pipe) != 0) throw std::runtime_error(command + " failed: " + text);
  const nlohmann::json r = nlohmann::json::parse(text);
  out.wall.push_back(r.at("wall").get<double>());
  out.cpu.push_back(r.at("cpu").get<double>());
  out.faults.push_back(r.at("faults").get<double>());
  out.hits.push_back(r.at("hits").get<double>());
  process_cpu_sum += r.at("process_cpu").get<double>();
  thread_cpu_sum += r.at("cpu").get<double>();
}

// Thread-CPU ns per allocate/free pair from `threads` threads at once (the slowest thread), sizes
// cycling over a step's mix.
double alloc_free_ns(size_t limit, int threads) {
  pf::CpuAllocator a(limit);
  constexpr int kPairs = 100000;
  const size_t sizes[] = {256, 4096, 64 << 10, 512 << 10, 2 << 20};
  std::vector<double> ns(static_cast<size_t>(threads));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const Sample start = now();
      for (int i = 0; i < kPairs; ++i) {
        const size_t bytes = sizes[i % 5];
        char* p = static_cast<char*>(a.allocate(bytes));
        p[0] = 1;  // touch one page, as a tensor's first write would
        a.deallocate(p, bytes);
      }
      ns[static_cast<size_t>(t)] = 1e9 * since(start).cpu / kPairs;
    });
  }
  for (std::thread& th : pool) th.join();
  return *std::max_element(ns.begin(), ns.end());
}

struct Options {
  int64_t d_model = 256;
  int rounds = 15, steps = 5;
  int block_steps = 0;  // > 0: the child (or a perf record target): time this many block steps only
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const long value = std::strtol(argv[i + 1], nullptr, 10);
    if (flag == "--d_model") o.d_model = value;
    else if (flag == "--rounds") o.rounds = static_cast<int>(value);
    else if (flag == "--steps") o.steps = static_cast<int>(value);
    else if (flag == "--block_steps") o.block_steps = static_cast<int>(value);
    else std::fprintf(stderr, "unknown flag %s (--d_model, --rounds, --steps, --block_steps)\n", flag.c_str());
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (o.block_steps > 0) return time_block(o.d_model, o.block_steps);
  const int64_t d = o.d_model, tokens = kBatch * kSeqLen, hd = d / kHeads;
  pf::cpu::set_blas_threads_for_this_thread(1);
  const int blas_threads = pf::cpu::blas_threads_for_this_thread();
  const int openblas_threads = openblas_get_num_threads();

  // The sgemm reference: the block's products, and one large square product.
  std::vector<GemmCase> block_gemms;
  uint32_t seed = 10;
  for (const GemmShape& g : pf::bench::block_linear_gemms("", d, tokens)) block_gemms.push_back(make_case(g, 1, seed += 3));
  for (const GemmShape& g : pf::bench::attention_head_gemms("", kSeqLen, hd))
    block_gemms.push_back(make_case(g, static_cast<int>(kBatch * kHeads), seed += 3));
  GemmCase square = make_case({"square_1024", false, false, 1024, 1024, 1024, 0.0f}, 1, 99);

  double linear_flops = 0, attention_flops = 0;
  for (const GemmCase& c : block_gemms) (c.repeats == 1 ? linear_flops : attention_flops) += c.shape.flops() * c.repeats;
  const double block_flops = linear_flops + attention_flops;
  const double causal_flops = linear_flops + attention_flops * static_cast<double>(kSeqLen + 1) / (2.0 * kSeqLen);

  const size_t cache_limit = pf::CpuAllocator::limit_from_environment() > 0 ? pf::CpuAllocator::limit_from_environment()
                                                                           : pf::CpuAllocator::kDefaultCacheBytes;
  char exe[4096];
  const ssize_t exe_length = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (exe_length <= 0) {
    std::fprintf(stderr, "cannot read /proc/self/exe\n");
    return 1;
  }
  exe[exe_length] = '\0';

  std::vector<double> shapes_cpu, shapes_wall, square_cpu;
  // Process CPU over thread CPU time of the sgemm reference and of the block: 1 when BLAS runs on
  // the calling thread alone (more would mean a second BLAS thread).
  double ref_process_cpu = 0, ref_thread_cpu = 0, block_process_cpu = 0, block_thread_cpu = 0;
  BlockRun on, off;
  for (int round = 0; round < o.rounds; ++round) {
    double cpu0 = process_cpu();
    Sample start = now();
    for (GemmCase& c : block_gemms) {
      const Sample one = now();
      run_case(c);
      c.cpu_seconds.push_back(since(one).cpu);
    }
    const Sample shapes = since(start);
    shapes_cpu.push_back(shapes.cpu);
    shapes_wall.push_back(shapes.wall);
    start = now();
    run_case(square);
    square_cpu.push_back(since(start).cpu);
    ref_process_cpu += process_cpu() - cpu0;
    ref_thread_cpu += since(start).cpu + shapes.cpu;
    for (int half = 0; half < 2; ++half) {
      const bool cache_on = (round + half) % 2 == 0;
      run_child(exe, d, o.steps, cache_on ? cache_limit : 0, cache_on ? on : off, block_process_cpu, block_thread_cpu);
    }
  }

  const double sgemm_shapes = block_flops / median(shapes_cpu) * 1e-9;
  const double sgemm_square = square.shape.flops() / median(square_cpu) * 1e-9;
  const double block_on = block_flops / median(on.cpu) * 1e-9, block_off = block_flops / median(off.cpu) * 1e-9;
  nlohmann::json per_shape = nlohmann::json::object();
  for (const GemmCase& c : block_gemms)
    per_shape[c.shape.name] = c.shape.flops() * c.repeats / median(c.cpu_seconds) * 1e-9;

  nlohmann::json report = {
      {"benchmark", "gpt_block_report"},
      {"block", {{"d_model", d}, {"heads", kHeads}, {"mlp_hidden", 4 * d}, {"batch", kBatch}, {"seq_len", kSeqLen}}},
      {"rounds", o.rounds},
      {"steps_per_round", o.steps},
      {"blas_threads", blas_threads},
      {"openblas_pool_threads", openblas_threads},
      {"process_cpu_per_thread_cpu_sgemm", ref_process_cpu / ref_thread_cpu},
      {"process_cpu_per_thread_cpu_block", block_process_cpu / block_thread_cpu},
      {"flops_fbw", block_flops},
      {"flops_fbw_linears", linear_flops},
      {"flops_fbw_attention_dense", attention_flops},
      {"flops_fbw_causal", causal_flops},
      {"sgemm_gflops_block_shapes", sgemm_shapes},
      {"sgemm_gflops_block_shapes_wall", block_flops / median(shapes_wall) * 1e-9},
      {"sgemm_gflops_1024", sgemm_square},
      {"sgemm_gflops_per_shape", per_shape},
      {"block_ms_cache_on", 1e3 * median(on.cpu)},
      {"block_ms_cache_off", 1e3 * median(off.cpu)},
      {"block_ms_wall_cache_on", 1e3 * median(on.wall)},
      {"block_ms_wall_cache_off", 1e3 * median(off.wall)},
      {"block_gflops_cache_on", block_on},
      {"block_gflops_cache_off", block_off},
      {"block_tokens_per_s_cache_on", static_cast<double>(tokens) / median(on.cpu)},
      {"block_tokens_per_s_cache_off", static_cast<double>(tokens) / median(off.cpu)},
      {"speedup_cache_on_vs_off", median(off.cpu) / median(on.cpu)},
      {"page_faults_per_step_cache_on", median(on.faults)},
      {"page_faults_per_step_cache_off", median(off.faults)},
      {"allocator_hits_per_step_cache_on", median(on.hits)},
      {"fraction_of_sgemm_block_shapes", block_on / sgemm_shapes},
      {"fraction_of_sgemm_block_shapes_cache_off", block_off / sgemm_shapes},
      {"fraction_of_sgemm_1024", block_on / sgemm_square},
      {"alloc_free_ns_1_thread_cache_on", alloc_free_ns(cache_limit, 1)},
      {"alloc_free_ns_1_thread_cache_off", alloc_free_ns(0, 1)},
      {"alloc_free_ns_2_threads_cache_on", alloc_free_ns(cache_limit, 2)},
      {"alloc_free_ns_2_threads_cache_off", alloc_free_ns(0, 2)},
  };
  std::printf("%s\n", report.dump().c_str());
  return 0;
}
