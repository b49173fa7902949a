// Pipeline efficiency on the CPU: 2 ranks pinned one per core, single-threaded BLAS, m = 8, 1F1B.
// Prints one JSON object:
//   speedup_vs_ideal        pipeline throughput / (one-rank sequential throughput x p*m/(m+p-1))
//   overhead_us_per_action  runtime cost per action with (almost) empty compute (an MLP of tiny
//                           layers): median over steps of (step time - optimizer - makespan of the
//                           measured run replayed with zero runtime cost) / actions per rank
//   sim_vs_measured         simulated makespan of the same schedule fed the measured per-stage mean
//                           F and BW costs, divided by the measured makespan
// Usage: pipeline_efficiency [--steps N] [--d_model D] [--blocks L] [--seq S] [--rows R]
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <tuple>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/execution/partition.h"
#include "bench/bench_util.h"
#include "bench/training_bench.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/models/builders.h"
#include "runtime/schedules/simulator.h"
#include "runtime/train/sequential_trainer.h"

namespace {

using namespace pf;
using bench::median;
using bench::pin_this_thread;




Batch feature_batch(int64_t rows, int64_t dim, int64_t classes, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(rows * dim);
  std::vector<int32_t> y(rows);
  for (auto& v : x) v = d(gen);
  for (int64_t r = 0; r < rows; ++r) y[r] = static_cast<int32_t>(r % classes);
  return Batch{Tensor::from_vector({rows, dim}, x), Tensor::from_ints({rows}, y)};
}

// Makespan of the measured run replayed with zero runtime cost: every compute action keeps its
// measured duration, SEND/RECV/STEP take none, a RECV completes when its SEND does, ranks run their
// lists in order. (The executor's lists are lowered, so same-rank handovers are already in order.)
double replay_makespan(const sched::Timeline& tl) {
  const int R = tl.num_ranks();
  std::vector<size_t> next(R, 0);
  std::vector<double> clock(R, 0.0);
  std::map<std::tuple<int, int, int>, double> sent;  // (kind F/B, stage, mb) of the SEND -> time
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < R; ++r) {
      while (next[r] < tl.ranks[r].size()) {
        const auto& ta = tl.ranks[r][next[r]];
        const auto k = ta.action.kind;
        double t = clock[r];
        if (k == sched::ActionKind::kRecvF || k == sched::ActionKind::kRecvB) {
          const bool f = k == sched::ActionKind::kRecvF;
          auto it = sent.find({f ? 0 : 1, f ? ta.action.stage - 1 : ta.action.stage + 1, ta.action.micro_batch});
          if (it == sent.end()) break;  // wait for the peer
          t = std::max(t, it->second);
        } else if (k == sched::ActionKind::kSendF || k == sched::ActionKind::kSendB) {
          sent[{k == sched::ActionKind::kSendF ? 0 : 1, ta.action.stage, ta.action.micro_batch}] = t;
        } else if (sched::is_compute(k)) {
          t += ta.duration();
        }
        clock[r] = t;
        ++next[r];
        progress = true;
      }
    }
  }
  double makespan = 0;
  for (double c : clock) makespan = std::max(makespan, c);
  return makespan;
}

}  // namespace

int main(int argc, char** argv) {
  bench::GptPipelineBench bench;
  int swap = 0;
  if (!bench.parse(argc, argv, {{"--swap_cores", &swap}})) return 2;
  const int steps = bench.steps, d_model = bench.d_model, blocks = bench.blocks, seq = bench.seq, rows = bench.rows;
  const int p = 2, m = bench::GptPipelineBench::kMicroBatches;
  try {
    pin_this_thread(0);
    cpu::set_blas_threads_for_this_thread(1);
    const GptConfig gc = bench.gpt();
    const TrainerOptions base = bench.options();
    const std::vector<Batch> data = bench.batches();

    // Balanced partition from measured per-layer times.
    std::vector<int> counts;
    std::vector<double> layer_ms;
    {
      std::shared_ptr<Model> probe = build_gpt(gc);
      const auto t = exec::measure_layer_times(*probe, data[0].micro_batch(0, m), 3);
      counts = exec::layer_counts(exec::partition_balanced(t, p));
      layer_ms.clear();
      for (double x : t) layer_ms.push_back(x * 1e3);
    }

    // One-rank sequential reference (pinned to core 0).
    std::vector<double> seq_s;
    {
      SequentialTrainer ref(build_gpt(gc), base);
      ref.step(data[0]);  // warm-up
      for (int s = 1; s <= steps; ++s) seq_s.push_back(ref.step(data[s]).seconds);
    }

    // The pipeline: ranks pinned to cores 0 and 1 (the main thread only waits).
    exec::PipelineOptions po;
    po.base = base;
    po.schedule = "1f1b";
    po.ranks = p;
    po.layers_per_stage = counts;
    po.cpu_affinity = swap ? std::vector<int>{1, 0} : std::vector<int>{0, 1};
    std::vector<double> pipe_s, makespans, sims, bubbles, busy, opt_ms;
    {
      exec::PipelineTrainer pipe(build_gpt(gc), po);
      pipe.step(data[0]);
      for (int s = 1; s <= steps; ++s) {
        pipe_s.push_back(pipe.step(data[s]).seconds);
        const auto& st = pipe.last_stats();
        // Per-stage mean F and BW costs -> simulator (blocking receives, as the executor has them).
        const sched::CostModel cm =
            bench::measured_cost_model(bench::mean_action_costs(pipe, nullptr), pipe.schedule().num_stages());
        sched::SimulationOptions so;
        so.blocking_recv = true;
        const auto sim = sched::simulate(pipe.schedule(), cm, so);
        makespans.push_back(st.makespan_us);
        sims.push_back(sim.makespan / st.makespan_us);
        bubbles.push_back(st.bubble_rate);
        opt_ms.push_back(st.optimizer_us / 1e3);
        busy.assign(st.ranks.size(), 0.0);
        for (size_t r = 0; r < st.ranks.size(); ++r) busy[r] = st.ranks[r].busy_us / 1e3;
      }
    }
    const double t_seq = median(seq_s), t_pipe = median(pipe_s);
    const double ideal = double(p) * m / (m + p - 1);
    const double speedup = t_seq / t_pipe;

    // Runtime overhead with (almost) empty compute: a model of many tiny layers.
    std::vector<double> overhead, step_us;
    int actions_per_step = 0;
    {
      MlpConfig mc;
      mc.input_dim = 4;
      mc.hidden.assign(6, 4);
      mc.classes = 2;
      exec::PipelineOptions to = po;
      to.layers_per_stage.clear();
      exec::PipelineTrainer tiny(build_mlp(mc), to);
      const Batch b = feature_batch(m, 4, 2, 3);
      for (int s = 0; s < 20; ++s) tiny.step(b);
      for (int s = 0; s < 200; ++s) {
        tiny.step(b);
        const auto& st = tiny.last_stats();
        size_t actions = 0;
        for (const auto& r : tiny.last_timeline().ranks) actions = std::max(actions, r.size());
        actions_per_step = static_cast<int>(actions);
        step_us.push_back(st.step_us - st.optimizer_us);
        overhead.push_back((st.step_us - st.optimizer_us - replay_makespan(tiny.last_timeline())) / actions);
      }
    }

    nlohmann::json out;
    out["config"] = {{"ranks", p},         {"micro_batches", m}, {"schedule", "1f1b"}, {"d_model", d_model},
                     {"blocks", blocks},   {"seq_len", seq},     {"rows_per_micro_batch", rows},
                     {"layers_per_stage", counts}, {"steps", steps}, {"blas_threads", 1}};
    out["sequential_step_ms"] = t_seq * 1e3;
    out["pipeline_step_ms"] = t_pipe * 1e3;
    out["speedup"] = speedup;
    out["ideal_speedup"] = ideal;
    out["speedup_vs_ideal"] = speedup / ideal;
    out["measured_bubble_rate"] = median(bubbles);
    out["measured_makespan_ms"] = median(makespans) / 1e3;
    out["sim_vs_measured"] = median(sims);
    out["pipeline_busy_ms_per_rank_last_step"] = busy;
    out["layer_ms_one_micro_batch"] = layer_ms;
    out["optimizer_ms"] = median(opt_ms);
    out["overhead_us_per_action"] = median(overhead);
    out["overhead_actions_per_rank"] = actions_per_step;
    out["overhead_model_step_us"] = median(step_us);
    std::cout << out.dump() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "pipeline_efficiency: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
