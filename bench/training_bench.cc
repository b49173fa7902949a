#include "bench/training_bench.h"

#include <algorithm>

#include "runtime/train/stage.h"

namespace pf::bench {

using sched::ActionKind;

std::pair<double, double> evaluate(const Model& model, const std::vector<Batch>& batches) {
  const std::vector<Stage> whole = make_stages(model, {{0, static_cast<int>(model.layers().size())}});
  double loss = 0, correct = 0, rows = 0;
  for (const Batch& b : batches) {
    std::vector<SavedContext> ctx;
    const Tensor out = whole[0].forward(b.inputs, ctx);
    SavedContext lc;
    loss += whole[0].loss_forward(out, b.targets, 1.0f, lc);
    if (model.input_spec().kind == InputSpec::Kind::kFeatures) {
      const int64_t n = out.shape()[0], c = out.shape()[1];
      for (int64_t i = 0; i < n; ++i) {
        const float* row = out.f32() + i * c;
        correct += (std::max_element(row, row + c) - row) == b.targets.i32()[i] ? 1 : 0;
      }
      rows += static_cast<double>(n);
    }
  }
  return {loss / static_cast<double>(batches.size()), rows > 0 ? correct / rows : -1.0};
}

namespace {
const std::vector<ActionKind> kTimedKinds = {ActionKind::kForward, ActionKind::kBackward, ActionKind::kHead,
                                             ActionKind::kUpdate};
}  // namespace

std::map<std::pair<int, int>, double> mean_action_costs(const exec::PipelineTrainer& t, comm::World* world) {
  const size_t S = static_cast<size_t>(t.schedule().num_stages());
  std::vector<double> sum(kTimedKinds.size() * S, 0.0), n(sum.size(), 0.0);
  for (const auto& rank : t.last_timeline().ranks)
    for (const auto& ta : rank)
      for (size_t k = 0; k < kTimedKinds.size(); ++k)
        if (ta.action.kind == kTimedKinds[k]) {
          sum[k * S + static_cast<size_t>(ta.action.stage)] += ta.duration();
          n[k * S + static_cast<size_t>(ta.action.stage)] += 1;
        }
  if (world) {
    const std::vector<double> all_sum = comm::all_gather_doubles(*world, sum, 600);
    const std::vector<double> all_n = comm::all_gather_doubles(*world, n, 600);
    for (size_t i = 0; i < sum.size(); ++i) {
      sum[i] = n[i] = 0;
      for (int r = 0; r < world->size(); ++r) {
        sum[i] += all_sum[static_cast<size_t>(r) * sum.size() + i];
        n[i] += all_n[static_cast<size_t>(r) * sum.size() + i];
      }
    }
  }
  std::map<std::pair<int, int>, double> out;
  for (size_t k = 0; k < kTimedKinds.size(); ++k)
    for (size_t s = 0; s < S; ++s)
      out[{static_cast<int>(kTimedKinds[k]), static_cast<int>(s)}] = n[k * S + s] > 0 ? sum[k * S + s] / n[k * S + s] : 0.0;
  return out;
}

sched::CostModel measured_cost_model(const std::map<std::pair<int, int>, double>& c, int num_stages) {
  sched::CostModel cm = sched::CostModel::uniform(num_stages);
  cm.t_head.assign(static_cast<size_t>(num_stages), 0.0);
  double update = 0;
  for (int s = 0; s < num_stages; ++s) {
    cm.t_f[s] = c.at({static_cast<int>(ActionKind::kForward), s});
    cm.t_b[s] = c.at({static_cast<int>(ActionKind::kBackward), s});
    cm.t_w[s] = 0;
    cm.t_head[s] = c.at({static_cast<int>(ActionKind::kHead), s});
    update = std::max(update, c.at({static_cast<int>(ActionKind::kUpdate), s}));
  }
  cm.t_step = update;  // the simulator has one UPDATE cost: the slower stage's
  return cm;
}

}  // namespace pf::bench
