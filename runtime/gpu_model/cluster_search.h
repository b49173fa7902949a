// `pipeforge plan --cluster FILE` for a GPU cluster (docs/PREDICT.md, "Planning a cluster"): every
// tensor (T) x pipeline (P) x data (D) factorisation of the cluster's GPUs, with chunks, micro-batch
// size, schedule, recompute and sequence parallelism, predicted by predict_step and ranked. The
// search is exact but prunes: each candidate's step_bounds (no schedule generated) orders them,
// the simulator runs in that order, and stops once the next lower bound cannot beat the top rows
// found; a candidate whose memory lower bound does not fit is never simulated.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/gpu_model/gpt_step.h"
#include "runtime/gpu_model/gpu_system.h"

namespace pf::gpu {

// {"gpu": "h100-sxm" or a preset-format object, "nodes": N, optional "gpus_per_node",
//  "network" and "node" objects that override the GPU system's (degraded links), and
//  "slowest_gpu_speed" in (0, 1] (one fail-slow GPU)}.
struct GpuCluster {
  GpuSystem system;
  int nodes = 1;
  double slowest_gpu_speed = 1;
  int gpus() const { return nodes * system.gpus_per_node; }
};

// A JSON object with a "gpu" field: what tells a GPU cluster from the CPU planner's cluster file.
bool is_gpu_cluster(const nlohmann::json& value);
// kInvalidArgument naming `where` and the JSON path.
GpuCluster gpu_cluster_from_json(const nlohmann::json& value, const std::string& where);

struct ClusterSearch {
  GpuCluster cluster;
  GptShape model;
  int64_t global_batch = 0;
  Precision precision = Precision::kBf16;
  Attention attention = Attention::kFlash;
  std::vector<std::string> schedules;          // empty: 1f1b, interleaved-1f1b, zb-h1, zb-v
  std::vector<Recompute> recomputes;           // empty: none, selective, full
  std::vector<int64_t> micro_batches;          // empty: 1, 2, 4, 8
  int max_chunks = 4;                          // interleaved schedules: v = 2 .. max_chunks
  bool tensor_across_nodes = false;            // T may exceed a node's GPUs
  size_t top = 15;
};

struct ClusterPlan {
  std::vector<std::pair<StepRequest, StepPrediction>> ranked;  // fitting, fastest first, at most top
  int64_t candidates = 0;   // enumerated
  int64_t simulated = 0;    // run through predict_step
  int64_t pruned = 0;       // never simulated: their lower bound could not reach the ranked rows
  int64_t too_big = 0;      // over the memory (by their bound, or simulated)
  int64_t refused = 0;      // combinations a schedule or the model refuses
  std::string first_refusal;
  double seconds = 0;       // the search's wall time
};

// kInvalidArgument naming the field when nothing could be evaluated.
ClusterPlan search_cluster(const ClusterSearch& search);

std::string cluster_plan_table(const ClusterPlan& plan, size_t rows);
nlohmann::json cluster_plan_to_json(const ClusterSearch& search, const ClusterPlan& plan);
// Step time against memory per GPU of the ranked rows, the choice marked, the usable memory drawn.
std::string cluster_plan_svg(const ClusterPlan& plan, const std::string& title);

}  // namespace pf::gpu
