// Activation offload on the CPU: does prefetching hide the copies? For a compute-bound GPT, 1F1B
// (p = 4, m = 8) and ZB-V (p = 4, m = 8), runs no offload, offload-host and offload-file (and
// recompute for reference), steps interleaved round-robin, and prints one JSON object with, per
// schedule and policy: median step seconds, throughput relative to no offload (target >= 0.90 for
// the offload policies), bytes moved per step, peak device activation bytes per rank (measured) and
// peak host/file bytes per rank; and for offload-host the bubble rate measured against the
// simulator's prediction from the measured per-stage costs, with the copies on the copy lane at the
// host's measured copy bandwidth ("offload_bubble").
// Usage: offload_overlap [--steps N] [--d_model D] [--blocks L] [--seq S] [--rows R] [--offload-dir DIR]
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <thread>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "bench/training_bench.h"
#include "runtime/schedules/simulator.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/models/builders.h"

namespace {

using namespace pf;
using bench::median;
using bench::token_batch;

// Host copy bandwidth in bytes per microsecond: the best of 5 memcpys of 32 MiB.
double copy_bytes_per_us() {
  const size_t n = size_t{32} << 20;
  std::vector<char> from(n, 1), to(n, 0);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    std::memcpy(to.data(), from.data(), n);
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(n) / us);
  }
  return best;
}

// A policy's measured bubble rate against the simulator's prediction from the measured costs:
// per-stage mean F/B/W, each stage's bytes per OFFLOAD, the host's copy bandwidth, the copies on
// the rank's copy lane (beside its compute, as the activation store's copy worker runs them).
nlohmann::json bubble_prediction(const std::string& schedule, const std::string& policy, int p, int m,
                                 const GptConfig& gc, int64_t rows, int steps) {
  exec::PipelineOptions o;
  o.schedule = schedule;
  o.ranks = p;
  o.chunks = schedule == "zb-v" ? 2 : 1;
  o.base.micro_batches = m;
  o.base.seed = 1;
  o.base.blas_threads = 1;
  o.activation_policy = policy;
  exec::PipelineTrainer t(build_gpt(gc), o);
  const double bandwidth = copy_bytes_per_us();
  std::vector<double> measured, predicted, copy_share;
  for (int s = 0; s <= steps; ++s) {
    t.step(token_batch(rows * m, gc.seq_len, gc.vocab, 200 + static_cast<uint64_t>(s)));
    if (s == 0) continue;  // warm-up
    const int S = t.schedule().num_stages();
    sched::CostModel cm = bench::measured_cost_model(bench::mean_action_costs(t, nullptr), S);
    // Bytes per OFFLOAD: each rank's offloaded bytes over its OFFLOADs, for its stages.
    cm.m_b.assign(static_cast<size_t>(S), 0.0);
    for (int r = 0; r < t.schedule().num_ranks(); ++r) {
      int offloads = 0;
      for (const auto& a : t.schedule().ranks[static_cast<size_t>(r)]) offloads += a.kind == sched::ActionKind::kOffload;
      for (int st = 0; st < S; ++st)
        if (t.schedule().placement.rank_of(st) == r && offloads > 0)
          cm.m_b[static_cast<size_t>(st)] = static_cast<double>(t.last_stats().ranks[static_cast<size_t>(r)].offloaded_bytes) / offloads;
    }
    cm.transfer_bandwidth = bandwidth;
    sched::SimulationOptions so;
    so.blocking_recv = true;
    const sched::SimulationResult sim = sched::simulate(t.schedule(), cm, so);
    double copies = 0;
    for (const auto& a : sim.timeline.ranks[0])
      if (sched::is_background_copy(a.action.kind)) copies += a.duration();
    measured.push_back(t.last_stats().bubble_rate);
    predicted.push_back(sim.bubble_rate);
    copy_share.push_back(sim.makespan > 0 ? copies / sim.makespan : 0.0);
  }
  return {{"measured_bubble_rate", median(measured)},
          {"predicted_bubble_rate", median(predicted)},
          {"predicted_minus_measured", median(predicted) - median(measured)},
          {"rank0_copy_lane_share_of_makespan", median(copy_share)},
          {"copy_bandwidth_bytes_per_us", bandwidth}};
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 8;
  GptConfig gc;
  gc.d_model = 256;
  gc.layers = 8;
  gc.seq_len = 32;
  gc.heads = 4;
  int64_t rows = 4;
  std::string dir;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--steps") steps = std::atoi(v);
    else if (k == "--d_model") gc.d_model = std::atoll(v);
    else if (k == "--blocks") gc.layers = std::atoll(v);
    else if (k == "--seq") gc.seq_len = std::atoll(v);
    else if (k == "--rows") rows = std::atoll(v);
    else if (k == "--offload-dir") dir = v;
    else {
      std::cerr << "unknown option " << k << "\n";
      return 2;
    }
  }
  const int m = 8, p = 4;
  cpu::set_blas_threads_for_this_thread(1);
  const std::vector<std::string> policies = {"none", "offload-host", "offload-file", "recompute", "balance"};
  nlohmann::json out;
  out["config"] = {{"model", "gpt"},        {"d_model", gc.d_model}, {"blocks", gc.layers},
                   {"seq", gc.seq_len},     {"rows_per_micro_batch", rows}, {"ranks", p},
                   {"micro_batches", m},    {"steps_measured", steps},      {"blas_threads", 1},
                   {"hardware_threads", std::to_string(std::thread::hardware_concurrency())}};
  double worst_ratio = 1e9;
  for (const std::string schedule : {"1f1b", "zb-v"}) {
    std::vector<std::unique_ptr<exec::PipelineTrainer>> trainers;
    for (const auto& pol : policies) {
      exec::PipelineOptions o;
      o.schedule = schedule;
      o.ranks = p;
      o.chunks = schedule == std::string("zb-v") ? 2 : 1;
      o.base.micro_batches = m;
      o.base.seed = 1;
      o.base.blas_threads = 1;
      o.activation_policy = pol;
      o.offload_dir = dir;
      o.record_timeline = false;
      trainers.push_back(std::make_unique<exec::PipelineTrainer>(build_gpt(gc), o));
    }
    std::vector<std::vector<double>> secs(policies.size());
    for (int s = 0; s <= steps; ++s) {
      const Batch batch = token_batch(rows * m, gc.seq_len, gc.vocab, 100 + static_cast<uint64_t>(s));
      for (size_t i = 0; i < trainers.size(); ++i) {
        const double t = trainers[i]->step(batch).seconds;
        if (s > 0) secs[i].push_back(t);  // step 0 is warm-up (and plans the policy)
      }
    }
    nlohmann::json js;
    const double base = median(secs[0]);
    for (size_t i = 0; i < policies.size(); ++i) {
      const auto& st = trainers[i]->last_stats();
      nlohmann::json peak = nlohmann::json::array(), host = nlohmann::json::array(), file = nlohmann::json::array(),
                     units = nlohmann::json::array(), moved = nlohmann::json::array();
      for (const auto& rs : st.ranks) {
        peak.push_back(rs.peak_activation_bytes);
        units.push_back(rs.peak_live_micro_batches);
        host.push_back(rs.host_peak_bytes);
        file.push_back(rs.file_peak_bytes);
        moved.push_back(rs.offloaded_bytes);
      }
      const double med = median(secs[i]);
      const double ratio = med > 0 ? base / med : 0.0;
      if (policies[i] == "offload-host" || policies[i] == "offload-file") worst_ratio = std::min(worst_ratio, ratio);
      js[policies[i]] = {{"step_seconds_median", med},
                         {"throughput_vs_none", ratio},
                         {"offloaded_bytes_per_step", st.offloaded_bytes},
                         {"offloaded_bytes_per_rank", moved},
                         {"peak_activation_bytes_per_rank", peak},
                         {"peak_live_micro_batches_per_rank", units},
                         {"host_peak_bytes_per_rank", host},
                         {"file_peak_bytes_per_rank", file},
                         {"step_seconds", secs[i]}};
    }
    // What the copies add to the bubble, predicted and measured: offload-host against none (on 2
    // cores the p = 4 ranks share the cores, which the simulator does not model, so the two
    // policies' difference is the comparison that isolates the copies).
    const nlohmann::json none = bubble_prediction(schedule, "none", p, m, gc, rows, steps);
    const nlohmann::json host = bubble_prediction(schedule, "offload-host", p, m, gc, rows, steps);
    js["offload_bubble"] = {
        {"none", none},
        {"offload-host", host},
        {"copies_add_predicted", host["predicted_bubble_rate"].get<double>() - none["predicted_bubble_rate"].get<double>()},
        {"copies_add_measured", host["measured_bubble_rate"].get<double>() - none["measured_bubble_rate"].get<double>()}};
    out[schedule] = js;
  }
  out["worst_offload_throughput_vs_none"] = worst_ratio;
  out["target"] = 0.90;
  out["meets_target"] = worst_ratio >= 0.90;
  std::cout << out.dump(2) << std::endl;
  return 0;
}
