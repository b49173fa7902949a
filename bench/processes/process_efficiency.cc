// One process per rank on the CPU, measured against the same pipeline as threads of one process.
// Run under `mpirun -np 2` (bench/processes/run.sh): 2 processes, each pinned to its own core,
// single-threaded BLAS, 1F1B, m = 8, the GPT of bench/pipeline (d_model 256, 4 blocks, seq 64,
// 8 rows per micro-batch), partition balanced by measured layer time. Rank 0 prints one JSON object:
//   speedup_vs_ideal        processes' throughput / (sequential throughput x p*m/(m+p-1))
//   processes_vs_threads    processes' throughput / the same pipeline's as 2 threads of one process
//   sim_vs_measured         the simulator fed each stage's measured mean F and BW cost, divided by
//                           the measured makespan of the processes
//   data_parallel           2 replicas of the whole model on the 2 processes, the same global batch:
//                           step time, speed-up over sequential, the measured gradient all-reduce,
//                           and the simulator (F, BW and that all-reduce) over the measured step
//                           (without the optimizer)
// The sequential and threaded references run on rank 0 while rank 1 sleeps.
// Usage: process_efficiency [--steps N] [--d_model D] [--blocks L] [--seq S] [--rows R]
#include <pthread.h>
#include <sched.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "runtime/comm/mpi_world.h"
#include "runtime/comm/process_grid.h"
#include "runtime/core/error.h"
#include "runtime/execution/partition.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/models/builders.h"
#include "runtime/schedules/simulator.h"
#include "runtime/train/sequential_trainer.h"

namespace {

using namespace pf;
using bench::median;
using bench::pin_this_thread;




}  // namespace

int main(int argc, char** argv) {
  bench::GptPipelineBench bench;
  if (!bench.parse(argc, argv)) return 2;
  const int steps = bench.steps, d_model = bench.d_model, blocks = bench.blocks, seq = bench.seq, rows = bench.rows;
  const int p = 2, m = bench::GptPipelineBench::kMicroBatches;
  const double timeout = 600;
  try {
    auto world = comm::MpiWorld::world();
    PF_CHECK_ARG(world->size() == p, "run under mpirun -np ", p, ", got ", world->size(), " processes");
    const int me = world->rank();
    pin_this_thread(me);
    cpu::set_blas_threads_for_this_thread(1);
    const GptConfig gc = bench.gpt();
    const TrainerOptions base = bench.options();
    const std::vector<Batch> data = bench.batches();

    // Rank 0 alone: the balanced partition, the sequential reference and the threaded pipeline.
    std::vector<int> counts(static_cast<size_t>(p), 0);
    std::vector<double> seq_s, thread_s;
    exec::PipelineOptions po;
    po.base = base;
    po.schedule = "1f1b";
    po.ranks = p;
    po.cpu_affinity = {0, 1};
    // Rank 1 must not take CPU from them: it sleeps until rank 0 leaves a file (an MPI wait
    // would poll).
    std::string done_file = me == 0 ? std::string(std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp") +
                                          "/pf-process-efficiency." + std::to_string(::getpid())
                                    : std::string();
    comm::broadcast_string(*world, &done_file, 0, timeout);
    if (me == 0) {
      std::shared_ptr<Model> probe = build_gpt(gc);
      counts = exec::layer_counts(exec::partition_balanced(
          exec::measure_layer_times(*probe, data[0].micro_batch(0, m), 3), p));
      SequentialTrainer ref(build_gpt(gc), base);
      ref.step(data[0]);
      for (int s = 1; s <= steps; ++s) seq_s.push_back(ref.step(data[s]).seconds);
      po.layers_per_stage = counts;
      exec::PipelineTrainer threads(build_gpt(gc), po);
      threads.step(data[0]);
      for (int s = 1; s <= steps; ++s) thread_s.push_back(threads.step(data[s]).seconds);
      std::ofstream(done_file) << "done\n";
    } else {
      while (::access(done_file.c_str(), F_OK) != 0) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    world->barrier(timeout);
    if (me == 0) std::remove(done_file.c_str());
    world->broadcast(counts.data(), counts.size() * sizeof(int), 0, timeout);
    po.layers_per_stage = counts;

    // Both: one process per rank.
    po.world = world;
    std::shared_ptr<Model> model;
    {
      DeferParameterAllocation defer;
      model = build_gpt(gc);
    }
    exec::PipelineTrainer procs(model, po);
    procs.step(data[0]);
    std::vector<double> proc_s, sims, bubbles;
    for (int s = 1; s <= steps; ++s) {
      proc_s.push_back(procs.step(data[s]).seconds);
      // Each process's stages' mean F and BW, gathered, into the simulator.
      const int S = procs.schedule().num_stages();
      std::vector<double> mine(static_cast<size_t>(2 * S), 0.0);
      std::vector<int> n(static_cast<size_t>(2 * S), 0);
      for (const auto& rank : procs.last_timeline().ranks)
        for (const auto& ta : rank) {
          const bool f = ta.action.kind == sched::ActionKind::kForward;
          if (!f && ta.action.kind != sched::ActionKind::kBackward) continue;
          const size_t i = static_cast<size_t>(2 * ta.action.stage + (f ? 0 : 1));
          mine[i] += ta.duration();
          n[i] += 1;
        }
      for (size_t i = 0; i < mine.size(); ++i) mine[i] /= std::max(1, n[i]);
      const std::vector<double> all = comm::all_gather_doubles(*world, mine, timeout);
      sched::CostModel cm = sched::CostModel::uniform(S);
      for (int st = 0; st < S; ++st) {
        const size_t owner = static_cast<size_t>(procs.schedule().placement.rank_of(st));
        cm.t_f[st] = all[owner * mine.size() + 2 * st];
        cm.t_b[st] = all[owner * mine.size() + 2 * st + 1];
        cm.t_w[st] = 0;
      }
      sched::SimulationOptions so;
      so.blocking_recv = true;
      sims.push_back(sched::simulate(procs.schedule(), cm, so).makespan / procs.last_stats().makespan_us);
      bubbles.push_back(procs.last_stats().bubble_rate);
    }
    // Data parallel, 2 replicas of the whole model (P = 1) on the 2 processes: the simulator fed
    // the measured F and BW costs and the measured time of one all-reduce of the gradients,
    // against the measured step.
    std::vector<double> dp_s, dp_sims;
    {
      const comm::ProcessGrid grid = comm::make_process_grid(*world, 1, 2, 1);
      exec::PipelineOptions dpo;
      dpo.base = base;
      dpo.base.replicas = 2;
      dpo.base.micro_batches = m / 2;  // the same global batch
      dpo.schedule = "1f1b";
      dpo.ranks = 1;
      dpo.world = grid.pipeline;
      dpo.data_parallel_world = grid.data_parallel;
      exec::PipelineTrainer dp(build_gpt(gc), dpo);
      size_t grad_floats = 0;
      for (const Parameter* p : dp.local_parameters()) grad_floats += static_cast<size_t>(p->grad.numel());
      std::vector<float> buffer(grad_floats, 1.0f);
      std::vector<double> reduce_us;
      for (int i = 0; i < 5; ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        grid.data_parallel->all_reduce_sum(buffer.data(), buffer.size(), timeout);
        reduce_us.push_back(std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      }
      dp.step(data[0]);
      for (int s = 1; s <= steps; ++s) {
        dp_s.push_back(dp.step(data[s]).seconds);
        double f = 0, bw = 0;
        int nf = 0, nbw = 0;
        for (const auto& rank : dp.last_timeline().ranks)
          for (const auto& ta : rank) {
            if (ta.action.kind == sched::ActionKind::kForward) f += ta.duration(), ++nf;
            if (ta.action.kind == sched::ActionKind::kBackward) bw += ta.duration(), ++nbw;
          }
        sched::CostModel cm = sched::CostModel::uniform(1);
        cm.t_f[0] = f / std::max(1, nf);
        cm.t_b[0] = bw / std::max(1, nbw);
        cm.t_w[0] = 0;
        cm.t_allreduce_stage = {median(reduce_us)};
        dp_sims.push_back(sched::simulate(dp.schedule(), cm).makespan / (dp.last_stats().step_us - dp.last_stats().optimizer_us));
      }
      if (me == 0) {
        dp_s.push_back(median(reduce_us));  // reported below
      }
    }
    if (me != 0) return 0;
    const double allreduce_us = dp_s.back();
    dp_s.pop_back();
    const double t_seq = median(seq_s), t_threads = median(thread_s), t_procs = median(proc_s);
    const double ideal = double(p) * m / (m + p - 1);
    nlohmann::json out;
    out["config"] = {{"ranks", p},         {"micro_batches", m}, {"schedule", "1f1b"}, {"d_model", d_model},
                     {"blocks", blocks},   {"seq_len", seq},     {"rows_per_micro_batch", rows},
                     {"layers_per_stage", counts}, {"steps", steps}, {"processes", world->size()}};
    out["sequential_step_ms"] = t_seq * 1e3;
    out["threads_step_ms"] = t_threads * 1e3;
    out["processes_step_ms"] = t_procs * 1e3;
    out["ideal_speedup"] = ideal;
    out["speedup_vs_ideal"] = t_seq / t_procs / ideal;
    out["threads_speedup_vs_ideal"] = t_seq / t_threads / ideal;
    out["processes_vs_threads"] = t_threads / t_procs;
    out["sim_vs_measured"] = median(sims);
    out["measured_bubble_rate"] = median(bubbles);
    out["data_parallel"] = {{"replicas", 2},
                            {"step_ms", median(dp_s) * 1e3},
                            {"speedup_vs_sequential", t_seq / median(dp_s)},
                            {"gradient_allreduce_ms", allreduce_us / 1e3},
                            {"sim_vs_measured", median(dp_sims)}};
    std::cout << out.dump() << std::endl;
  } catch (const std::exception& e) {
    std::cerr << "process_efficiency: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
