// A sweep as a pipeline's fill job (TrainingConfig::fill = "sweep:FILE"): the grid split into one
// packed network per rank, each trained a step at a time in its rank's bubbles (Sweep::run_for:
// a step starts only when its predicted time fits in what is left of the bubble). When a rank's
// share is done its bubbles stay empty; report() ranks the models as they stand.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "runtime/run/fill_job.h"
#include "runtime/sweep/sweep.h"

namespace pf::sweep {

class SweepFill : public FillJob {
 public:
  SweepFill(const SweepSpec& spec, int ranks);

  double run(int rank, double budget_seconds) override;
  // {"kind": "sweep", "spec", "data", "model_count", "steps_per_model", "steps_taken", "steps_total",
  //  "done", "fill_seconds", "fill_calls", "models": ranked results}
  nlohmann::json report() const override;
  std::string summary(const nlohmann::json& report) const override;

  const Sweep& sweep() const { return *sweep_; }

 private:
  SweepSpec spec_;
  std::shared_ptr<const SweepData> data_;
  std::unique_ptr<Sweep> sweep_;
  std::vector<std::atomic<double>> seconds_;  // per rank
  std::atomic<int64_t> calls_{0};
};

// Reads a sweep spec from a JSON file. A "data" path in it is taken relative to the file's folder
// and may not leave it (no absolute path, no "..", no symbolic link on the way: find_path_escape,
// runtime/core/input_file.h); kInvalidArgument naming the file otherwise.
SweepSpec read_sweep_spec_file(const std::string& path);

}  // namespace pf::sweep
