// What `pipeforge train` prints about a run: the line before it starts, and after it the summary
// or (--json) one JSON object; and the totals the training loop adds up for them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/comm/world.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/neuron_groups/neuron_group_trainer.h"
#include "runtime/planner/fail_slow.h"
#include "runtime/train/trainer.h"
#include "tools/cli/train_command.h"

namespace pf::cli {

// Added up over the steps of a run (and a few facts of its end).
struct TrainTotals {
  int64_t first_step = 0;
  int ranks = 1;
  std::vector<double> losses;
  std::vector<double> peak_bytes;   // per rank: the most activation bytes at once over the run
  std::vector<int> peak_versions;   // per rank: asynchronous schedules' weight versions
  // Per rank, summed over the steps: compute time and idle time (the step's makespan less the
  // compute: waiting for peers, communication, the bubble), in microseconds; and the sum of the
  // steps' idle shares (idle / makespan), which idle_share() averages as the headline averages.
  std::vector<double> busy_us, idle_us, idle_share_sum;
  // Per rank, the last step's: bytes of the activations and input gradients sent to other stages.
  std::vector<int64_t> sent_bytes;
  double bubble_sum = 0.0, offloaded_bytes = 0.0, seconds = 0.0;
  int64_t tokens = 0;
  nlohmann::json evaluations = nlohmann::json::array();
  std::vector<std::string> checkpoints;
  bool diverged = false, saved = false;
  std::string divergence;  // StepReport::divergence of the step that ended the run, "" if none
  int stopped_by = 0;  // the signal that ended the run early (SIGINT, SIGTERM), else 0
  std::string checksum;
  nlohmann::json memory;  // per process: parameter, gradient and optimizer-state bytes

  // One step's result (and the pipeline's stats, null for the sequential trainer).
  void add_step(const StepResult& r, const exec::PipelineTrainer* pipeline);
  double tokens_per_s() const { return seconds > 0 ? static_cast<double>(tokens) / seconds : 0.0; }
  // The mean wall time of the steps run (0 before any).
  double mean_step_seconds() const { return losses.empty() ? 0.0 : seconds / static_cast<double>(losses.size()); }
  // A rank's idle share of the step, mean over the steps (0 before any pipelined step): the
  // headline bubble rate is the same mean of the busiest rank's, so it is at most every rank's.
  double idle_share(int rank) const;
};

struct TrainReport {
  const TrainArgs& args;
  const Trainer& trainer;
  const exec::PipelineTrainer* pipeline;  // null for the sequential trainer
  const plan::AdaptiveTrainer* adaptive;  // null without --adapt
  const groups::NeuronGroupTrainer* groups;  // null without --neuron-groups
  const comm::World* world;               // null in one process
  const nlohmann::json& model_description;
  const std::string& resumed_from;
  const std::vector<double>& layer_seconds;  // what --partition balanced split by; empty otherwise
  const TrainTotals& totals;
};

void print_run_start(const TrainArgs& a, const Trainer& trainer, const std::string& resumed_from);
void print_json_report(const TrainReport& r);
void print_summary(const TrainReport& r);
// On stderr: a warning when the partition leaves a rank idle most of the step while another is
// kept busy (the headline bubble rate, the busiest rank's idle share, does not show it), with the
// options that would spread the work. Nothing for the sequential trainer or a balanced run.
void warn_idle_ranks(const TrainReport& r);

// A JSON number, or null for NaN and infinities.
nlohmann::json finite_or_null(double x);
// Numbers joined by `separator`: layers per stage as "5+4", ranks as "0, 1".
std::string join_numbers(const std::vector<int>& values, const char* separator = "+");

}  // namespace pf::cli
