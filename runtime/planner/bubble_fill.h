// A fill job for a pipeline's bubbles (PipeFill; PipelineOptions::bubble_fill, docs/PLANNING.md
// "Filling the bubbles"): forward passes, with the loss, of held-out micro-batches through a model
// of its own, one copy per rank, whole passes only. A pass starts only when it is predicted to fit
// in what is left of the budget (the rank's mean pass time so far, starting from the fastest of
// three passes timed when the job is made), so the pipeline's own actions start when they would have.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <vector>

#include "runtime/models/model.h"
#include "runtime/train/batch.h"

namespace pf::plan {

class EvaluationFill {
 public:
  // `make_model` builds the fill model (once per rank; its parameters initialised from `seed`);
  // `held_out` are the micro-batches it evaluates, round robin.
  EvaluationFill(const std::function<std::shared_ptr<Model>()>& make_model, std::vector<Batch> held_out, int ranks,
                 uint64_t seed = 0);

  // PipelineOptions::bubble_fill: passes on `rank` while the next fits in `budget_seconds`;
  // returns the seconds taken.
  double run(int rank, double budget_seconds);

  int64_t passes() const { return passes_.load(); }
  int64_t samples() const { return samples_.load(); }
  // Mean loss over every pass so far (each rank's model is the same, so every pass of one
  // micro-batch gives the same loss).
  double mean_loss() const;

 private:
  struct Rank {
    std::shared_ptr<Model> model;
    size_t next = 0;
    double mean_seconds = 0;
    int64_t passes = 0;
    double loss_sum = 0;
  };
  double pass(Rank& r);  // one forward + loss; its seconds

  std::vector<Batch> held_out_;
  std::vector<Rank> ranks_;
  std::atomic<int64_t> passes_{0}, samples_{0};
};

}  // namespace pf::plan
