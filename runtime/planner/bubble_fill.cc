#include "runtime/planner/bubble_fill.h"

#include <algorithm>
#include <chrono>

#include "runtime/core/error.h"
#include "runtime/layers/saved_context.h"
#include "runtime/models/init.h"
#include "runtime/tensor/memory_tracker.h"

namespace pf::plan {

EvaluationFill::EvaluationFill(const std::function<std::shared_ptr<Model>()>& make_model, std::vector<Batch> held_out,
                               int ranks, uint64_t seed)
    : held_out_(std::move(held_out)), ranks_(static_cast<size_t>(ranks)) {
  PF_CHECK_ARG(ranks >= 1, "fill job: ranks must be >= 1, got ", ranks);
  PF_CHECK_ARG(!held_out_.empty(), "fill job: no held-out micro-batches");
  for (Rank& r : ranks_) {
    r.model = make_model();
    PF_CHECK_ARG(r.model != nullptr, "fill job: make_model returned no model");
    initialize_parameters(r.model->parameters(), seed);
    for (const Batch& b : held_out_) r.model->check_batch(b.inputs, b.targets, "fill job micro-batch");
  }
  // Passes before the job starts time it (not counted as fill work): the fastest of three, as
  // the first runs cold (its tensors' pages fault in), and an estimate above every bubble would
  // keep the job from ever running to correct it.
  constexpr int kTimingPasses = 3;
  for (Rank& r : ranks_) {
    r.mean_seconds = pass(r);
    for (int i = 1; i < kTimingPasses; ++i) r.mean_seconds = std::min(r.mean_seconds, pass(r));
    r.next = 0;
    r.passes = 0;
    r.loss_sum = 0;
  }
}

double EvaluationFill::pass(Rank& r) {
  const auto t0 = std::chrono::steady_clock::now();
  const Batch& b = held_out_[r.next];
  r.next = (r.next + 1) % held_out_.size();
  MemoryCategoryScope scope(MemoryCategory::kWorkspace);
  Tensor x = b.inputs;
  for (const auto& layer : r.model->layers()) {
    SavedContext ctx;
    x = layer->forward(x, ctx);
  }
  SavedContext loss_ctx;
  r.loss_sum += r.model->loss().forward(x, b.targets, 1.0f, loss_ctx);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

double EvaluationFill::run(int rank, double budget_seconds) {
  PF_CHECK_ARG(rank >= 0 && static_cast<size_t>(rank) < ranks_.size(), "fill job: rank ", rank, " of ",
               ranks_.size());
  Rank& r = ranks_[static_cast<size_t>(rank)];
  double used = 0;
  while (used + r.mean_seconds <= budget_seconds) {
    const int64_t rows = held_out_[r.next].rows();
    const double t = pass(r);
    used += t;
    r.passes += 1;
    r.mean_seconds += (t - r.mean_seconds) / static_cast<double>(r.passes + 1);
    passes_ += 1;
    samples_ += rows;
  }
  return used;
}

double EvaluationFill::mean_loss() const {
  double sum = 0;
  int64_t n = 0;
  for (const Rank& r : ranks_) {
    sum += r.loss_sum;
    n += r.passes;
  }
  return n > 0 ? sum / static_cast<double>(n) : 0.0;
}

}  // namespace pf::plan
