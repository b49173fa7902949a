#include "runtime/execution/activation_memory.h"

#include "runtime/core/error.h"
#include "runtime/schedules/validator.h"

namespace pf::exec {

using sched::ActionKind;

ActivationMemory::ActivationMemory(const PipelinePlan& plan,
                                   const std::vector<std::unique_ptr<RankExecutor>>* executors, comm::RankGroup* group)
    : plan_(&plan), executors_(executors), group_(group), schedule_(plan.schedule) {
  make_stores();
}

mem::ActivationStore* ActivationMemory::store(int rank) const {
  return stores_.empty() ? nullptr : stores_[static_cast<size_t>(rank)].get();
}

void ActivationMemory::reset_stats() {
  for (auto& s : stores_)
    if (s) s->reset_stats();
}

std::vector<mem::StoreStats> ActivationMemory::finish_step(std::exception_ptr* error) {
  // Every copy must be finished before the contexts go; a failed step drops what the stores hold
  // (and removes its files).
  std::vector<mem::StoreStats> stats;
  for (auto& s : stores_) {
    if (!s) {
      stats.emplace_back();
      continue;
    }
    if (!*error) {
      try {
        s->wait_all();
      } catch (...) {
        *error = std::current_exception();
      }
    }
    s->clear();
    stats.push_back(s->stats());
  }
  return stats;
}

void ActivationMemory::make_stores() {
  const int S = schedule_.num_stages(), m = schedule_.num_micro_batches;
  holder_.assign(static_cast<size_t>(S), std::vector<int>(static_cast<size_t>(m), -1));
  bool offloads = false, held = false;
  for (int r = 0; r < schedule_.num_ranks(); ++r) {
    for (const auto& a : schedule_.ranks[r]) {
      if (a.kind == ActionKind::kOffload) offloads = true;
      if (a.kind == ActionKind::kHold) {
        holder_[a.stage][a.micro_batch] = r;
        held = true;
      }
    }
  }
  stores_.clear();
  for (auto& e : *executors_)
    if (e) e->set_schedule(&schedule_);
  if (!offloads) return;
  if (held) {
    for (int r = 0; r < schedule_.num_ranks(); ++r)
      for (const auto& a : schedule_.ranks[r])
        PF_CHECK_ARG(a.kind != ActionKind::kOffload || holder_[a.stage][a.micro_batch] >= 0, "pipeline trainer: rank ",
                     r, " action ", sched::action_to_string(a),
                     ": a schedule whose partner ranks HOLD activations must send every OFFLOAD to a partner "
                     "(mixing partner, host and file offloads is not supported)");
  }
  const TrainingConfig& c = plan_->config;
  const sched::ActivationPolicy policy = plan_->policy;
  mem::ActivationStore::Options so;
  so.tier = policy == sched::ActivationPolicy::kOffloadFile ||
                    (policy == sched::ActivationPolicy::kSelective && !c.offload_dir.empty())
                ? mem::Tier::kFile
                : mem::Tier::kHost;
  if (held) so.tier = mem::Tier::kPeer;
  so.offload_dir = c.offload_dir;
  for (int r = 0; r < schedule_.num_ranks(); ++r) {
    if (!(*executors_)[static_cast<size_t>(r)]) {
      stores_.push_back(nullptr);
      continue;
    }
    so.name = "r" + std::to_string(r);
    if (held) {
      // The copy worker of rank r sends the packed image to the holder and receives it back.
      so.send_image = [this, r](uint64_t key, Tensor image) {
        const int s = static_cast<int>(key >> 32), mb = static_cast<int>(key & 0xffffffffu);
        group_->endpoint(r).send(holder_[s][mb], comm::MessageKey{comm::MessageKind::kContextOut, mb, s},
                                 std::move(image), plan_->config.recv_timeout_seconds);
      };
      so.receive_image = [this, r](uint64_t key) {
        const int s = static_cast<int>(key >> 32), mb = static_cast<int>(key & 0xffffffffu);
        return group_->endpoint(r).recv(holder_[s][mb], comm::MessageKey{comm::MessageKind::kContextBack, mb, s},
                                        plan_->config.recv_timeout_seconds);
      };
    }
    stores_.push_back(std::make_unique<mem::ActivationStore>(so));
  }
}

void ActivationMemory::plan(const Model& model, const ModelStages& stages, RankDevices& devices,
                            const Batch& micro_batch) {
  const sched::Schedule& base = plan_->base_schedule;
  const int S = base.num_stages();
  model.check_batch(micro_batch.inputs, micro_batch.targets, "micro-batch");
  sched::CostModel c = sched::CostModel::uniform(S);
  c.m_b.assign(static_cast<size_t>(S), 0.0);
  c.m_w.assign(static_cast<size_t>(S), 0.0);
  c.m_in.assign(static_cast<size_t>(S), 0.0);
  {
    // Two pipelines: the first copy's stages are measured; the second's run the same layers.
    const int chain = base.stages_per_pipeline();
    std::vector<std::vector<SavedContext>> contexts(static_cast<size_t>(S));
    Tensor x = micro_batch.inputs;
    Tensor targets = micro_batch.targets;
    Tensor dy;
    // Each stage runs on its rank's device (the main thread); inputs and gradients move between
    // devices like the transport would move them.
    std::unique_ptr<BackendScope> device_scope;
    for (int s = 0; s < chain; ++s) {
      const Stage& stage = stages.stage(s);
      const int rank = base.placement.rank_of(s);
      devices.move_to_rank(rank, x, device_scope);
      if (s == chain - 1) devices.move_to_rank(rank, targets, device_scope);
      c.m_in[s] = s == 0 ? 0.0 : static_cast<double>(x.nbytes());
      x = stage.forward(std::move(x), contexts[s]);
      if (stage.has_loss()) {
        SavedContext loss_context;
        stage.loss_forward(x, targets, 1.0f, loss_context);
        dy = stage.loss_backward(loss_context);
      }
      c.m_b[s] = static_cast<double>(context_bytes(contexts[s]));
    }
    for (int s = chain; s-- > 0;) {
      devices.move_to_rank(base.placement.rank_of(s), dy, device_scope);
      dy = stages.stage(s).backward_input(contexts[s], std::move(dy));
      c.m_w[s] = static_cast<double>(context_bytes(contexts[s]));
    }
    for (int s = chain; s < S; ++s) {
      c.m_in[s] = c.m_in[s - chain];
      c.m_b[s] = c.m_b[s - chain];
      c.m_w[s] = c.m_w[s - chain];
    }
    devices.sync("measuring the activation bytes");
  }
  if (plan_->measured_policy() && !planned_) {
    sched::Schedule planned =
        sched::apply_activation_policy(base, plan_->policy, c, plan_->config.activation_budget_bytes);
    sched::validate_or_throw(planned, {plan_->comm});
    schedule_ = std::move(planned);
    make_stores();
  }
  costs_ = c;
  predicted_peak_ = sched::activation_peak_bytes(schedule_, costs_);
  planned_ = true;
}

}  // namespace pf::exec
