// `pipeforge plan`: profiles the model (or reads a saved profile), takes a cluster description
// (a JSON file, or --measure for this machine), searches every data-parallel degree, pipeline
// degree, chunks, micro-batch count, synchronous schedule and activation policy with a partition
// for each (runtime/planner), prints the ranked table, and writes plan.json, which `pipeforge train
// --plan plan.json` runs as is, and an SVG of step time against peak memory (docs/PLANNING.md).
#pragma once

#include "tools/cli/cli_fwd.h"
#include <cstdint>
#include <string>
#include <vector>

#include "tools/cli/train_command.h"

namespace pf::cli {

struct PlanArgs {
  TrainArgs model;                // the model, data, optimizer, seed and BLAS threads options
  int64_t batch_size = 8;         // rows per step, all replicas together
  std::string cluster;            // a cluster JSON file
  bool measure = false;           // or this machine
  int devices = 0;                // --measure: devices (0: one per core)
  double memory_limit_gib = 0;    // per device; 0: the cluster's
  std::string profile;            // a saved profile instead of profiling
  std::string save_profile;       // write the profile here
  std::vector<std::string> schedules;
  std::vector<std::string> policies;
  std::vector<int> data_parallel;  // degrees to try (empty: all)
  std::vector<int> ranks;          // pipeline degrees to try (empty: all)
  std::vector<int> tensor_parallel;  // tensor-parallel degrees to try (empty: 1 and the model's within a node)
  int max_micro_batches = 16;
  int max_chunks = 2;
  bool no_overlap_steps = false;   // predict with a barrier after every step
  bool no_sequence_parallel = false;  // T > 1 without sequence parallelism only
  int repeats = 3;
  int calibration_steps = 5;      // steps of each calibration run (0: none)
  int top = 15;
  std::string out = "plan.json";
  std::string svg = "plan.svg";
  bool json = false;
  bool quiet = false;
  // A GPU cluster file (runtime/gpu_model/cluster_search.h): the GPT model's precision and
  // attention, and the recompute modes and micro-batch sizes to search. Its vocabulary is the
  // model options' --vocab, kGpuPlanVocab when not given.
  static constexpr int kGpuPlanVocab = 51200;
  std::string precision = "bf16";
  std::string attention = "flash";
  std::vector<std::string> recompute;
  std::vector<int64_t> micro_batch_sizes;
  std::string chakra;  // the choice's Chakra traces
};

CLI::App* add_plan_command(CLI::App& app, PlanArgs& args);
// Returns the process exit code (2 for bad arguments or input files, 1 when nothing fits).
int run_plan(const PlanArgs& args);

}  // namespace pf::cli
