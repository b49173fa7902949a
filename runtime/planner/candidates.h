// The planner's search: every tensor-parallel degree T, data-parallel degree D, pipeline degree P, chunks v, micro-batch
// count m, synchronous schedule and activation policy that the machines allow; each partitioned
// by dynamic programming (stage_partition.h), timed by the schedule simulator with the profiled
// costs and the cluster's links, and its memory per rank predicted. Only synchronous schedules are
// searched: they train bitwise equal to the sequential trainer, so a plan changes the speed and
// the memory, never the result.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/planner/cluster.h"
#include "runtime/planner/model_profile.h"

namespace pf::plan {

// The planner's label for the sequential trainer (no pipeline; D = P = 1): not a schedule of the
// registry, so it is compared here only, through Candidate::sequential().
inline constexpr const char* kSequentialLabel = "sequential";
// The schedule that stands for all synchronous ones on a single pipeline rank (they run the same
// passes there), so the planner lists one candidate, not one per schedule.
inline constexpr const char* kOneRankSchedule = "1f1b";

// One way to run the step. schedule kSequentialLabel is the sequential trainer (D = P = 1).
struct Candidate {
  int tensor_parallel = 1; // T members per stage (docs/PLANNING.md, "Tensor parallelism")
  // T > 1: activations between the split layers split by sequence steps (TrainingConfig::sequence_parallel).
  bool sequence_parallel = false;
  int data_parallel = 1;   // D replicas
  int ranks = 1;           // P pipeline ranks
  int chunks = 1;          // v model chunks per rank (the looped schedules; the V schedules: 2)
  int micro_batches = 1;   // m per replica
  std::string schedule = kSequentialLabel;
  std::string activation_policy = "none";
  std::vector<int> layers_per_stage;  // one pipeline's model stages; empty: chosen by the planner
  // Steps overlap (TrainingConfig::overlap_steps): set by predict() where the request allows it, the
  // trainer can (one replica, no activation policy, one pipeline) and it is faster than the barrier.
  bool overlap_steps = false;
  std::string describe() const;       // "1f1b P=2 v=1 m=4 D=1 none" (+ " overlap", + " T=2", + " SP")
  bool sequential() const { return schedule == kSequentialLabel; }
};

struct Prediction {
  Candidate candidate;
  double step_seconds = 0;      // pipeline + update; with overlap_steps, pipeline_seconds alone
  double pipeline_seconds = 0;  // the simulated makespan of the schedule (or the sequential passes), with
                                // the profile's calibrated per-step overhead; with overlap_steps the
                                // steady-state time per step of steps that overlap, the update inside
  double update_seconds = 0;    // zeroing the gradients and the optimizer, the slowest rank
  double tokens_per_second = 0;
  double bubble_rate = 0;
  int64_t micro_batch_rows = 0;
  std::vector<double> memory_bytes;         // per rank: parameters, gradients, optimizer state, activations
  std::vector<double> activation_bytes;     // per rank: the activation part
  double peak_memory_bytes = 0;             // the largest rank's
  bool fits = false;                        // peak_memory_bytes <= the limit
};

struct PlanRequest {
  ModelProfile profile;
  Cluster cluster;
  int64_t batch_rows = 0;                // rows per step, all replicas together
  std::vector<std::string> schedules;    // empty: every synchronous generator and "sequential"
  std::vector<std::string> policies;     // empty: none, recompute (and offload-host on cuda devices)
  std::vector<int> data_parallel;        // the degrees D to try; empty: every D with D x P <= devices
  std::vector<int> ranks;                // the pipeline degrees P to try; empty: likewise
  // The tensor-parallel degrees T to try; empty: 1 and every degree of the profile's
  // tensor_parallel within one node (T x D x P <= devices in any case).
  std::vector<int> tensor_parallel;
  // Also try each T > 1 with sequence parallelism where the profile measured its member bytes
  // (TensorParallelProfile::member_bytes: the model splits by sequence steps at T).
  bool sequence_parallel = true;
  int max_micro_batches = 64;
  int max_chunks = 4;
  double memory_limit_bytes = 0;         // per device; 0: the cluster's device memory
  // Predict every candidate that can overlap its steps with overlap too, and keep it where it is
  // faster (the candidate says so; the trainer then runs it with overlap_steps).
  bool overlap_steps = true;
  double limit() const;
};

struct Plan {
  std::vector<Prediction> ranked;    // fitting, fastest first (then the smaller peak memory)
  std::vector<Prediction> too_big;   // predicted but over the memory limit, smallest peak first
  int refused = 0;                   // combinations no schedule generator or trainer accepts
  std::string first_refusal;         // why the first of them was refused, for reports
};

// The synchronous schedules the planner searches by default.
std::vector<std::string> plannable_schedules();
// The micro-batch row counts the candidates need (batch / (D m)), ascending: what to profile.
std::vector<int64_t> needed_micro_batch_rows(const PlanRequest& request);
// One candidate; its layers_per_stage when given, else the planner's partition. Throws
// kInvalidArgument for a combination that cannot run (the message says why).
Prediction predict(const PlanRequest& request, const Candidate& candidate);
// Every candidate. Throws kInvalidArgument naming the request field at fault (batch_rows, schedules,
// policies) when nothing could be evaluated.
Plan make_plan(const PlanRequest& request);
// Indices into `predictions` of those no other one beats in both step time and peak memory,
// by ascending peak memory.
std::vector<size_t> pareto_front(const std::vector<Prediction>& predictions);

}  // namespace pf::plan
