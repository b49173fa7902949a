#include "runtime/execution/step_report.h"

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "runtime/comm/world.h"
#include "runtime/core/error.h"
#include "runtime/schedules/action_kinds.h"
#include "runtime/schedules/bubbles.h"

namespace pf::exec {


std::vector<float> StepReport::losses(const std::vector<RankExecutor::StepOutput>& outputs,
                                      const sched::Schedule& s, int units) const {
  // Each pipeline's last stage recorded the losses of its micro-batches (the others are 0).
  const int per = s.micro_batches_per_pipeline();
  std::vector<float> losses(static_cast<size_t>(units), 0.0f);
  for (int k = 0; k < s.pipelines; ++k) {
    const int last = s.last_stage_of_pipeline(k);
    const std::vector<float>& got = outputs[static_cast<size_t>(s.placement.rank_of(last))].losses;
    const int begin = s.pipelines > 1 ? k * per : 0, end = s.pipelines > 1 ? (k + 1) * per : units;
    for (int i = begin; i < end && i < static_cast<int>(got.size()); ++i)
      losses[static_cast<size_t>(i)] = got[static_cast<size_t>(i)];
  }
  if (plan_->config.world) broadcast_losses(&losses, s);
  return losses;
}

// The last stage's process broadcasts the per-micro-batch losses (each pipeline's share from its
// last stage's process); data parallel: every replica's, gathered in replica (= micro-batch) order.
void StepReport::broadcast_losses(std::vector<float>* losses, const sched::Schedule& s) const {
  comm::World& world = *plan_->config.world;
  // A failure names what this process waited for (e.g. the last stage still busy past the timeout).
  const auto from = [&](int root, float* data, size_t count) {
    try {
      world.broadcast(data, count * sizeof(float), root, timeout());
    } catch (const Error& e) {
      fail(e.code(), "the step's losses from rank ", root, " (its last stage): ", e.what());
    }
  };
  if (s.pipelines > 1) {
    const int per = s.micro_batches_per_pipeline();
    for (int k = 0; k < s.pipelines; ++k)
      from(s.placement.rank_of(s.last_stage_of_pipeline(k)), losses->data() + static_cast<size_t>(k) * per,
           static_cast<size_t>(per));
    return;
  }
  from(s.placement.rank_of(s.num_stages() - 1), losses->data(), losses->size());
  if (plan_->config.base.replicas > 1) {
    const std::vector<char> all =
        plan_->config.data_parallel_world->all_gather(losses->data(), losses->size() * sizeof(float), timeout());
    losses->resize(all.size() / sizeof(float));
    std::memcpy(losses->data(), all.data(), all.size());
  }
}

void StepReport::evaluation(const std::vector<RankExecutor::StepOutput>& outputs, int last_rank, int micro_batches,
                            std::vector<float>* losses, std::vector<int64_t>* correct) const {
  *losses = outputs[static_cast<size_t>(last_rank)].losses;
  *correct = outputs[static_cast<size_t>(last_rank)].correct;
  losses->resize(static_cast<size_t>(micro_batches), 0.0f);
  correct->resize(static_cast<size_t>(micro_batches), 0);
  if (comm::World* world = plan_->config.world.get()) {  // the last stage's process has them
    world->broadcast(losses->data(), losses->size() * sizeof(float), last_rank, timeout());
    world->broadcast(correct->data(), correct->size() * sizeof(int64_t), last_rank, timeout());
  }
}

void StepReport::collect(std::vector<RankExecutor::StepOutput>& outputs,
                         const std::vector<mem::StoreStats>& store_stats, double period_us) {
  const int num_ranks = static_cast<int>(outputs.size());
  stats_ = PipelineStats();
  for (auto& out : outputs) stats_.ranks.push_back(out.stats);
  for (size_t r = 0; r < store_stats.size() && r < stats_.ranks.size(); ++r) {
    stats_.ranks[r].offloaded_bytes = store_stats[r].offloaded_bytes;
    stats_.ranks[r].host_peak_bytes = store_stats[r].host_peak;
    stats_.ranks[r].file_peak_bytes = store_stats[r].file_peak;
    stats_.offloaded_bytes += store_stats[r].offloaded_bytes;
  }
  if (comm::World* world = plan_->config.world.get()) {
    // Every process reports every rank (times measured from each process's own step start).
    static_assert(std::is_trivially_copyable<RankStats>::value, "RankStats travels as bytes");
    const int me = world->rank();
    const std::vector<char> all =
        world->all_gather(&stats_.ranks[static_cast<size_t>(me)], sizeof(RankStats), timeout());
    for (int r = 0; r < num_ranks; ++r)
      std::memcpy(&stats_.ranks[static_cast<size_t>(r)], all.data() + static_cast<size_t>(r) * sizeof(RankStats),
                  sizeof(RankStats));
    stats_.offloaded_bytes = 0;
    for (const auto& rs : stats_.ranks) stats_.offloaded_bytes += rs.offloaded_bytes;
  }
  double makespan = 0, max_busy = 0;
  for (const RankStats& rs : stats_.ranks) {
    makespan = std::max(makespan, rs.finish_us);
    max_busy = std::max(max_busy, rs.busy_us);
  }
  stats_.makespan_us = makespan;
  const double span = period_us > 0 ? period_us : makespan;
  stats_.bubble_rate = span > 0 ? std::max(0.0, span - max_busy) / span : 0.0;
  for (auto& rs : stats_.ranks) {
    rs.idle_us = std::max(0.0, span - rs.busy_us);
    rs.bubble_rate = span > 0 ? rs.idle_us / span : 0.0;
  }
  timeline_ = sched::Timeline();
  timeline_.time_unit = "us";
  for (auto& out : outputs) timeline_.ranks.push_back(std::move(out.timed));
  outputs.clear();
}

void StepReport::finish(const StepResult& result, double step_us, double optimizer_us, bool optimizer_on_workers) {
  stats_.optimizer_on_workers = optimizer_on_workers;
  stats_.step_us = step_us;
  stats_.optimizer_us = optimizer_us;
  metrics_.step += 1;
  metrics_.last_loss = result.loss;
  metrics_.last_grad_norm = result.grad_norm;
  metrics_.tokens_per_second = result.seconds > 0 ? result.tokens / result.seconds : 0.0;
  metrics_.total_tokens += result.tokens;
}

// The next step fills where this one waited (its measured timeline, in microseconds).
void StepReport::plan_bubble_fill(const std::vector<std::unique_ptr<RankExecutor>>& executors) const {
  const std::vector<sched::RankBubbles> bubbles = sched::timeline_bubbles(timeline_);
  const double k = plan_->config.bubble_fill_safety * 1e-6;
  for (size_t r = 0; r < bubbles.size() && r < executors.size(); ++r) {
    if (!executors[r]) continue;
    std::vector<double> before = bubbles[r].before;
    for (double& b : before) b *= k;
    executors[r]->instruments().set_fill_budgets(std::move(before), bubbles[r].after_last * k);
  }
}

}  // namespace pf::exec
