// Overlapping steps in wall time (docs/EXECUTION.md, "Overlapping steps"): the GPT of bench/pipeline
// (d_model 256, 4 blocks, seq 64, 8 rows x m = 8 micro-batches, AdamW) on 2 ranks, for 1F1B, ZB-H1, ZB-H2, ZB-V and zb-auto, each trained with a barrier after every step and
// with overlap_steps, in alternating rounds of back-to-back steps on the same data. Per schedule:
// the steady-state time per step of each (wall time of a round / its steps, median over the
// rounds), the simulator's time per step with and without overlap and its span under the costs the
// barrier trainer measured (per step the mean F, B, W, BW of each stage and the slower rank's
// update as UPDATE; the median over its steps), the
// ratios, and whether both trainers ended bitwise equal. Then the schedules ordered by measured
// and by simulated time per step with overlap. Prints one JSON object.
// Usage: overlap_steps [--steps N (per round)] [--rounds R] [--pin 0|1] [--d_model D] [--blocks L] [--seq S] [--rows R]
#include <algorithm>
#include <chrono>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "bench/training_bench.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/models/builders.h"
#include "runtime/schedules/validator.h"
#include "runtime/schedules/overlapped_steps.h"

namespace {

using namespace pf;

// Micro-batch `position` of a fixed token stream.
class TokenStream : public DataSource {
 public:
  TokenStream(const bench::GptPipelineBench& b) : b_(b) {}
  Batch next() override { return bench::token_batch(b_.rows, b_.seq, b_.gpt().vocab, 1000 + position_++); }
  int64_t position() const override { return position_; }
  void seek(int64_t position) override { position_ = position; }

 private:
  bench::GptPipelineBench b_;
  int64_t position_ = 0;
};

// --pin 1: the ranks' threads pinned to cores 0 and 1. Off by default: with overlap the main thread
// works (the next step's data, the last step's report) while both ranks compute, and a rank pinned
// to the core it lands on cannot move away from it (measured: 1-20% slower than unpinned).
int pin = 0;

std::unique_ptr<exec::PipelineTrainer> trainer(const bench::GptPipelineBench& b, const std::string& schedule,
                                               bool overlap) {
  exec::PipelineOptions po;
  po.base = b.options();
  po.schedule = schedule;
  po.ranks = 2;
  if (pin) po.cpu_affinity = {0, 1};
  po.overlap_steps = overlap;
  return std::make_unique<exec::PipelineTrainer>(build_gpt(b.gpt()), po);
}

using Costs = std::map<std::pair<int, int>, double>;

// Wall seconds per step of `steps` back-to-back steps; with `costs`, each step's mean action
// costs (and, under key {-1, 0}, its slower rank's update) are appended.
double round_seconds(exec::PipelineTrainer& t, DataSource& source, int steps, bool overlap,
                     std::vector<Costs>* costs = nullptr) {
  t.expect_steps(overlap ? steps : 0);
  double seconds = 0;
  for (int s = 0; s < steps; ++s) {
    const auto start = std::chrono::steady_clock::now();
    t.step(source);
    seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (!costs) continue;
    costs->push_back(bench::mean_action_costs(t, nullptr));
    double update_us = 0;
    for (const exec::RankStats& rs : t.last_stats().ranks) update_us = std::max(update_us, rs.optimizer_us);
    costs->back()[{-1, 0}] = update_us;
  }
  return seconds / steps;
}

// The median of every entry over the steps.
Costs median_costs(const std::vector<Costs>& steps) {
  Costs out;
  for (const auto& [key, value] : steps.front()) {
    std::vector<double> v;
    for (const Costs& c : steps) v.push_back(c.at(key));
    out[key] = bench::median(v);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  bench::GptPipelineBench b;
  b.steps = 6;
  int rounds = 3;
  if (!b.parse(argc, argv, {{"--rounds", &rounds}, {"--pin", &pin}})) return 2;
  nlohmann::json rows = nlohmann::json::array();
  std::vector<std::pair<double, std::string>> measured_order, simulated_order;
  for (const std::string schedule : {"1f1b", "zb-h1", "zb-h2", "zb-v", "zb-auto"}) {
    auto barrier = trainer(b, schedule, false), overlapped = trainer(b, schedule, true);
    TokenStream barrier_data(b), overlapped_data(b);
    round_seconds(*barrier, barrier_data, 1, false);  // warm-up: allocations, the activation plan
    round_seconds(*overlapped, overlapped_data, 1, true);
    std::vector<double> with_barrier, with_overlap;
    std::vector<Costs> step_costs;
    for (int r = 0; r < rounds; ++r) {
      with_barrier.push_back(round_seconds(*barrier, barrier_data, b.steps, false, &step_costs));
      with_overlap.push_back(round_seconds(*overlapped, overlapped_data, b.steps, true));
    }
    // The barrier trainer's action costs, the median over its steps of each step's means; UPDATE:
    // the slower rank's optimizer time.
    const Costs median = median_costs(step_costs);
    sched::CostModel costs = bench::measured_cost_model(median, barrier->schedule().num_stages());
    costs.t_step = median.at({-1, 0});
    sched::SimulationOptions so;
    so.comm = sched::communication_semantics(barrier->schedule());
    const sched::StepTimes sim = sched::simulate_step_times(barrier->schedule(), costs, so);
    const double measured_barrier = bench::median(with_barrier), measured_overlap = bench::median(with_overlap);
    const double sim_overlap_s = sim.overlapped * 1e-6, sim_span_s = sim.span * 1e-6, sim_barrier_s = sim.barrier * 1e-6;
    auto spread = [](const std::vector<double>& v) {
      return nlohmann::json{*std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
    };
    rows.push_back({{"schedule", schedule},
                    {"measured_step_s", {{"barrier", measured_barrier}, {"overlap", measured_overlap}}},
                    {"rounds_min_max_s", {{"barrier", spread(with_barrier)}, {"overlap", spread(with_overlap)}}},
                    {"simulated_step_s", {{"barrier", sim_barrier_s}, {"overlap", sim_overlap_s}, {"span", sim_span_s}}},
                    {"measured_gain", measured_barrier / measured_overlap},
                    {"simulated_gain", sim.barrier / sim.overlapped},
                    {"overlap_measured_over_simulated", measured_overlap / sim_overlap_s},
                    {"overlap_measured_over_span", measured_overlap / sim_span_s},
                    {"barrier_measured_over_simulated", measured_barrier / sim_barrier_s},
                    {"steps_begun_early", overlapped->steps_begun_early()},
                    {"bitwise_equal", barrier->parameter_checksum() == overlapped->parameter_checksum()}});
    measured_order.push_back({measured_overlap, schedule});
    simulated_order.push_back({sim_overlap_s, schedule});
  }
  auto names = [](std::vector<std::pair<double, std::string>> v) {
    std::sort(v.begin(), v.end());
    std::vector<std::string> out;
    for (const auto& [t, n] : v) out.push_back(n);
    return out;
  };
  const nlohmann::json out = {{"benchmark", "overlap_steps"},
                              {"ranks", 2},
                              {"d_model", b.d_model},
                              {"blocks", b.blocks},
                              {"seq", b.seq},
                              {"rows", b.rows},
                              {"micro_batches", bench::GptPipelineBench::kMicroBatches},
                              {"steps_per_round", b.steps},
                              {"rounds", rounds},
                              {"pinned", pin != 0},
                              {"schedules", rows},
                              {"fastest_first_measured", names(measured_order)},
                              {"fastest_first_simulated", names(simulated_order)},
                              {"same_order", names(measured_order) == names(simulated_order)}};
  std::cout << out.dump(2) << std::endl;
  return 0;
}
