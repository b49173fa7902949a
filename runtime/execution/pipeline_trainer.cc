#include "runtime/execution/pipeline_trainer.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <unordered_set>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/models/init.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/schedule_request.h"
#include "runtime/schedules/text_format.h"
#include "runtime/schedules/validator.h"
#include "runtime/tensor/memory_tracker.h"
#include "runtime/train/micro_batches.h"

namespace pf::exec {

using clock_type = std::chrono::steady_clock;
using sched::ActionKind;

void PipelineOptions::validate() const {
  base.validate();
  if (schedule_text.empty()) {
    PF_CHECK_ARG(!schedule.empty(), "schedule: give a generator name or schedule_text");
    PF_CHECK_ARG(ranks >= 1, "ranks must be >= 1, got ", ranks);
    PF_CHECK_ARG(chunks >= 1, "chunks must be >= 1, got ", chunks);
  }
  PF_CHECK_ARG(recv_timeout_seconds > 0, "recv_timeout_seconds must be > 0, got ", recv_timeout_seconds);
  PF_CHECK_ARG(mailbox_capacity >= 1, "mailbox_capacity must be >= 1, got ", mailbox_capacity);
  PF_CHECK_ARG(spin_seconds >= 0, "spin_seconds must be >= 0, got ", spin_seconds);
  for (size_t i = 0; i < cpu_affinity.size(); ++i)
    PF_CHECK_ARG(cpu_affinity[i] >= 0, "cpu_affinity[", i, "] must be >= 0, got ", cpu_affinity[i]);
}

// What one (stage, micro-batch) holds during a step. Only the rank that owns the stage touches it.
struct Slot {
  std::vector<SavedContext> ctx;  // one per layer of the stage
  SavedContext loss_ctx;
  Tensor input;        // stage input (received, or handed over by the previous stage on this rank)
  Tensor output;       // stage output waiting for SEND_F
  Tensor grad_output;  // gradient of the stage output (received, handed over, or from the loss)
  Tensor grad_input;   // gradient of the stage input waiting for SEND_B
  Tensor kept_input;   // recomputed contexts: the stage input kept from F until RECOMPUTE
  size_t bytes = 0;    // activation bytes the contexts hold (while offloaded: what comes back)
};

struct PipelineTrainer::StepState {
  const std::vector<Batch>* micro = nullptr;
  std::vector<std::vector<Slot>> slots;  // [stage][micro-batch]
  // [stage][micro-batch]: packed activations a partner rank holds between HOLD and RETURN (policy
  // balance); only the holding rank touches its entries.
  std::vector<std::vector<Tensor>> held;
  std::vector<float> losses;             // scaled loss per micro-batch
  clock_type::time_point t0;
  std::vector<std::vector<sched::TimedAction>> timed;  // per rank
  std::vector<RankStats> rank_stats;
  std::mutex error_mutex;
  std::exception_ptr error;
};

namespace {

size_t context_bytes(const Slot& slot) {
  std::unordered_set<const Storage*> storages;
  for (const auto& c : slot.ctx) c.collect_storages(&storages);
  slot.loss_ctx.collect_storages(&storages);
  size_t n = 0;
  for (const Storage* s : storages) n += s->bytes();
  return n;
}

uint64_t context_key(int stage, int mb) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(stage)) << 32) | static_cast<uint32_t>(mb);
}

// What a recomputed context keeps between F and RECOMPUTE: the stage input (nothing for stage 0,
// whose input is the caller's micro-batch).
size_t kept_bytes(int stage, const Tensor& input) { return stage == 0 || !input.defined() ? 0 : input.nbytes(); }

std::string describe(std::exception_ptr e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& ex) {
    return ex.what();
  } catch (...) {
    return "unknown exception";
  }
}

}  // namespace

PipelineTrainer::PipelineTrainer(std::shared_ptr<Model> model, const PipelineOptions& options)
    : model_(std::move(model)), options_(options) {
  PF_CHECK_ARG(model_ != nullptr, "pipeline trainer: model is null");
  options_.validate();
  const int m = options_.base.micro_batches;
  sched::Schedule s;
  if (!options_.schedule_text.empty()) {
    s = sched::parse_schedule(options_.schedule_text);
    PF_CHECK_ARG(s.num_micro_batches == m, "schedule_text has ", s.num_micro_batches,
                 " micro-batches, options.base.micro_batches is ", m);
  } else {
    sched::ScheduleRequest req;
    req.name = options_.schedule;
    req.ranks = options_.ranks;
    req.micro_batches = m;
    req.chunks = options_.chunks;
    s = sched::make_schedule(req);
  }
  schedule_ = sched::is_lowered(s) ? s : sched::lower_communication(s);
  sched::validate_or_throw(schedule_);
  policy_ = sched::parse_activation_policy(options_.activation_policy);
  base_schedule_ = schedule_;
  if (policy_ == sched::ActivationPolicy::kSelective) {
    PF_CHECK_ARG(options_.activation_budget_bytes > 0,
                 "activation policy selective needs activation_budget_bytes > 0 (bytes per rank)");
  } else if (policy_ == sched::ActivationPolicy::kBalance) {
    // Planned from the measured per-stage context bytes (plan_activation_memory).
  } else if (policy_ != sched::ActivationPolicy::kNone) {
    schedule_ = sched::apply_activation_policy(base_schedule_, policy_, sched::CostModel());
    sched::validate_or_throw(schedule_);
  }
  for (int r = 0; r < schedule_.num_ranks(); ++r) {
    for (const auto& a : schedule_.ranks[r]) {
      switch (a.kind) {
        case ActionKind::kAllReduce:
          fail(ErrorCode::kUnimplemented, "pipeline trainer: rank ", r, " action ", sched::action_to_string(a),
               ": ", sched::action_kind_name(a.kind), " is not supported by the CPU executor yet");
        default:
          break;
      }
    }
  }
  for (int st = 0; st < schedule_.num_stages(); ++st) {
    const auto order = sched::weight_gradient_order(schedule_, st);
    for (size_t i = 0; i < order.size(); ++i) {
      if (order[i] != static_cast<int>(i)) {
        log(LogLevel::kWarning, "pipeline trainer: stage " + std::to_string(st) +
                                    " accumulates weight gradients out of micro-batch order; results will "
                                    "differ from the sequential reference in the last bits");
        break;
      }
    }
  }
  stages_ = partition_layers(static_cast<int>(model_->layers().size()), schedule_.num_stages(),
                             options_.layers_per_stage);
  optimizer_ = make_optimizer(options_.base.optimizer);
  initialize_parameters(model_->parameters(), options_.base.seed);
  make_stores();

  InProcessTransport::Options topts;
  topts.mailbox_capacity = options_.mailbox_capacity;
  topts.spin_seconds = options_.spin_seconds;
  transport_ = std::make_unique<InProcessTransport>(schedule_.num_ranks(), topts);
  state_ = std::make_unique<StepState>();
  try {
    for (int r = 0; r < schedule_.num_ranks(); ++r) threads_.emplace_back([this, r] { worker_main(r); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      shutdown_ = true;
    }
    start_cv_.notify_all();
    for (auto& t : threads_) t.join();
    throw;
  }
}

void PipelineTrainer::make_stores() {
  const int S = schedule_.num_stages(), m = schedule_.num_micro_batches;
  recomputed_.assign(static_cast<size_t>(S), std::vector<char>(static_cast<size_t>(m), 0));
  holder_.assign(static_cast<size_t>(S), std::vector<int>(static_cast<size_t>(m), -1));
  bool offloads = false, held = false;
  for (int r = 0; r < schedule_.num_ranks(); ++r) {
    for (const auto& a : schedule_.ranks[r]) {
      if (a.kind == ActionKind::kRecompute) recomputed_[a.stage][a.micro_batch] = 1;
      if (a.kind == ActionKind::kOffload) offloads = true;
      if (a.kind == ActionKind::kHold) {
        holder_[a.stage][a.micro_batch] = r;
        held = true;
      }
    }
  }
  stores_.clear();
  if (!offloads) return;
  if (held) {
    for (int r = 0; r < schedule_.num_ranks(); ++r)
      for (const auto& a : schedule_.ranks[r])
        PF_CHECK_ARG(a.kind != ActionKind::kOffload || holder_[a.stage][a.micro_batch] >= 0, "pipeline trainer: rank ",
                     r, " action ", sched::action_to_string(a),
                     ": a schedule whose partner ranks HOLD activations must send every OFFLOAD to a partner "
                     "(mixing partner, host and file offloads is not supported)");
  }
  mem::ActivationStore::Options so;
  so.tier = policy_ == sched::ActivationPolicy::kOffloadFile ||
                    (policy_ == sched::ActivationPolicy::kSelective && !options_.offload_dir.empty())
                ? mem::Tier::kFile
                : mem::Tier::kHost;
  if (held) so.tier = mem::Tier::kPeer;
  so.offload_dir = options_.offload_dir;
  for (int r = 0; r < schedule_.num_ranks(); ++r) {
    so.name = "r" + std::to_string(r);
    if (held) {
      // The copy worker of rank r sends the packed image to the holder and receives it back.
      so.send_image = [this, r](uint64_t key, Tensor image) {
        const int s = static_cast<int>(key >> 32), mb = static_cast<int>(key & 0xffffffffu);
        transport_->endpoint(r).send(holder_[s][mb], MessageKey{MessageKind::kContextOut, mb, s}, std::move(image),
                                     options_.recv_timeout_seconds);
      };
      so.receive_image = [this, r](uint64_t key) {
        const int s = static_cast<int>(key >> 32), mb = static_cast<int>(key & 0xffffffffu);
        return transport_->endpoint(r).recv(holder_[s][mb], MessageKey{MessageKind::kContextBack, mb, s},
                                            options_.recv_timeout_seconds);
      };
    }
    stores_.push_back(std::make_unique<mem::ActivationStore>(so));
  }
}

void PipelineTrainer::plan_activation_memory(const Batch& micro_batch) {
  const int S = base_schedule_.num_stages();
  const auto& layers = model_->layers();
  model_->check_batch(micro_batch.inputs, micro_batch.targets, "micro-batch");
  sched::CostModel c = sched::CostModel::uniform(S);
  c.m_b.assign(static_cast<size_t>(S), 0.0);
  c.m_w.assign(static_cast<size_t>(S), 0.0);
  c.m_in.assign(static_cast<size_t>(S), 0.0);
  {
    std::vector<Slot> slots(static_cast<size_t>(S));
    Tensor x = micro_batch.inputs;
    Tensor dy;
    for (int s = 0; s < S; ++s) {
      Slot& slot = slots[s];
      const StageRange& range = stages_[s];
      c.m_in[s] = static_cast<double>(kept_bytes(s, x));
      slot.ctx.resize(static_cast<size_t>(range.size()));
      {
        MemoryCategoryScope scope(MemoryCategory::kActivations);
        for (int i = 0; i < range.size(); ++i) x = layers[range.begin + i]->forward(x, slot.ctx[i]);
        if (s == S - 1) model_->loss().forward(x, micro_batch.targets, 1.0f, slot.loss_ctx);
      }
      if (s == S - 1) {
        MemoryCategoryScope scope(MemoryCategory::kWorkspace);
        dy = model_->loss().backward(slot.loss_ctx);
        slot.loss_ctx.clear();
      }
      c.m_b[s] = static_cast<double>(context_bytes(slot));
    }
    for (int s = S; s-- > 0;) {
      Slot& slot = slots[s];
      const StageRange& range = stages_[s];
      MemoryCategoryScope scope(MemoryCategory::kWorkspace);
      for (int i = range.size(); i-- > 0;) dy = layers[range.begin + i]->backward_input(slot.ctx[i], dy);
      c.m_w[s] = static_cast<double>(context_bytes(slot));
    }
  }
  if ((policy_ == sched::ActivationPolicy::kSelective || policy_ == sched::ActivationPolicy::kBalance) && !planned_) {
    sched::Schedule planned =
        sched::apply_activation_policy(base_schedule_, policy_, c, options_.activation_budget_bytes);
    sched::validate_or_throw(planned);
    schedule_ = std::move(planned);
    make_stores();
  }
  mem_costs_ = c;
  predicted_peak_ = sched::activation_peak_bytes(schedule_, mem_costs_);
  planned_ = true;
}

PipelineTrainer::~PipelineTrainer() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    shutdown_ = true;
  }
  start_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

StepResult PipelineTrainer::step(const Batch& batch) {
  return run_step(split_into_micro_batches(*model_, batch, options_.base.micro_batches));
}

StepResult PipelineTrainer::step(DataSource& source) {
  const int64_t start = source.position();
  std::vector<Batch> micro = pull_micro_batches(*model_, source, options_.base.micro_batches);
  StepResult r;
  try {
    r = run_step(micro);
  } catch (...) {
    rewind_after_failure(source, start);
    throw;
  }
  metrics_.data_position = source.position();
  return r;
}

void PipelineTrainer::worker_main(int rank) {
  if (!options_.cpu_affinity.empty()) {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(options_.cpu_affinity[rank % options_.cpu_affinity.size()], &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof(set), &set) != 0)
      log(LogLevel::kWarning, "pipeline trainer: could not pin rank " + std::to_string(rank));
  }
  uint64_t seen = 0;
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      start_cv_.wait(lock, [&] { return shutdown_ || generation_ != seen; });
      if (shutdown_) return;
      seen = generation_;
    }
    cpu::set_blas_threads_for_this_thread(options_.base.blas_threads);
    try {
      run_rank(rank);
    } catch (...) {
      std::exception_ptr e = std::current_exception();
      {
        std::lock_guard<std::mutex> lock(state_->error_mutex);
        if (!state_->error) state_->error = e;  // the first failure is the root cause
      }
      transport_->cancel("rank " + std::to_string(rank) + " failed: " + describe(e));
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--running_ == 0) done_cv_.notify_all();
    }
  }
}

void PipelineTrainer::run_rank(int rank) {
  StepState& st = *state_;
  const auto& actions = schedule_.ranks[rank];
  const auto& placement = schedule_.placement;
  Transport& tp = transport_->endpoint(rank);
  const int num_stages = schedule_.num_stages();
  const int m = schedule_.num_micro_batches;
  const float scale = 1.0f / static_cast<float>(m);
  const double timeout = options_.recv_timeout_seconds;
  const auto& layers = model_->layers();
  RankStats& rs = st.rank_stats[rank];
  auto& timed = st.timed[rank];
  const bool record = options_.record_timeline;
  size_t live_bytes = 0;
  int live = 0;
  mem::ActivationStore* store = stores_.empty() ? nullptr : stores_[rank].get();

  for (const sched::Action& a : actions) {
    if (transport_->cancelled()) return;  // another rank failed; its error is the step's error
    const auto t_start = clock_type::now();
    const int s = a.stage;
    const int mb = a.micro_batch;
    switch (a.kind) {
      case ActionKind::kForward: {
        Slot& slot = st.slots[s][mb];
        const StageRange& range = stages_[s];
        Tensor x;
        if (s == 0) {
          x = (*st.micro)[mb].inputs;
        } else {
          x = std::move(slot.input);
          PF_INTERNAL_CHECK(x.defined(), "rank ", rank, ": ", sched::action_to_string(a), " has no input");
        }
        const bool recompute = recomputed_[s][mb] != 0;
        if (recompute) slot.kept_input = x;
        slot.ctx.resize(static_cast<size_t>(range.size()));
        {
          MemoryCategoryScope scope(MemoryCategory::kActivations);
          for (int i = 0; i < range.size(); ++i) x = layers[range.begin + i]->forward(x, slot.ctx[i]);
          if (s == num_stages - 1)
            st.losses[mb] = model_->loss().forward(x, (*st.micro)[mb].targets, scale, slot.loss_ctx);
        }
        if (s == num_stages - 1) {
          MemoryCategoryScope scope(MemoryCategory::kWorkspace);
          slot.grad_output = model_->loss().backward(slot.loss_ctx);
          slot.loss_ctx.clear();
        } else if (placement.rank_of(s + 1) == rank) {
          st.slots[s + 1][mb].input = std::move(x);
        } else {
          slot.output = std::move(x);
        }
        if (recompute) {
          slot.ctx.clear();  // keep only the stage input; RECOMPUTE rebuilds the contexts
          slot.bytes = kept_bytes(s, slot.kept_input);
        } else {
          slot.bytes = context_bytes(slot);
        }
        live_bytes += slot.bytes;
        live += 1;
        rs.peak_activation_bytes = std::max(rs.peak_activation_bytes, live_bytes);
        rs.peak_live_micro_batches = std::max(rs.peak_live_micro_batches, live);
        break;
      }
      case ActionKind::kBackwardInput:
      case ActionKind::kBackward: {
        const bool fused = a.kind == ActionKind::kBackward;
        Slot& slot = st.slots[s][mb];
        const StageRange& range = stages_[s];
        if (store) store->restore(context_key(s, mb));  // waits for the prefetch issued by RELOAD
        Tensor dy = std::move(slot.grad_output);
        PF_INTERNAL_CHECK(dy.defined(), "rank ", rank, ": ", sched::action_to_string(a), " has no output gradient");
        PF_INTERNAL_CHECK(slot.ctx.size() == static_cast<size_t>(range.size()), "rank ", rank, ": ",
                          sched::action_to_string(a), " runs before its forward");
        {
          MemoryCategoryScope scope(MemoryCategory::kWorkspace);
          for (int i = range.size(); i-- > 0;) {
            Layer& layer = *layers[range.begin + i];
            dy = fused ? layer.backward(slot.ctx[i], dy) : layer.backward_input(slot.ctx[i], dy);
          }
        }
        if (s > 0) {
          if (placement.rank_of(s - 1) == rank) {
            st.slots[s - 1][mb].grad_output = std::move(dy);
          } else {
            slot.grad_input = std::move(dy);
          }
        }
        live -= 1;
        live_bytes -= slot.bytes;
        if (fused) {
          slot.ctx.clear();
          slot.bytes = 0;
        } else {
          slot.bytes = context_bytes(slot);
          live_bytes += slot.bytes;
        }
        break;
      }
      case ActionKind::kBackwardWeight: {
        Slot& slot = st.slots[s][mb];
        const StageRange& range = stages_[s];
        PF_INTERNAL_CHECK(slot.ctx.size() == static_cast<size_t>(range.size()), "rank ", rank, ": ",
                          sched::action_to_string(a), " runs before its forward");
        {
          MemoryCategoryScope scope(MemoryCategory::kWorkspace);
          for (int i = range.size(); i-- > 0;) layers[range.begin + i]->backward_weight(slot.ctx[i]);
        }
        live_bytes -= slot.bytes;
        slot.bytes = 0;
        slot.ctx.clear();
        break;
      }
      case ActionKind::kSendF: {
        Slot& slot = st.slots[s][mb];
        tp.send(placement.rank_of(s + 1), MessageKey{MessageKind::kActivation, mb, s + 1}, std::move(slot.output),
                timeout);
        slot.output = Tensor();
        break;
      }
      case ActionKind::kRecvF:
        st.slots[s][mb].input =
            tp.recv(placement.rank_of(s - 1), MessageKey{MessageKind::kActivation, mb, s}, timeout);
        break;
      case ActionKind::kSendB: {
        Slot& slot = st.slots[s][mb];
        tp.send(placement.rank_of(s - 1), MessageKey{MessageKind::kGradient, mb, s - 1},
                std::move(slot.grad_input), timeout);
        slot.grad_input = Tensor();
        break;
      }
      case ActionKind::kRecvB:
        st.slots[s][mb].grad_output =
            tp.recv(placement.rank_of(s + 1), MessageKey{MessageKind::kGradient, mb, s}, timeout);
        break;
      case ActionKind::kRecompute: {
        // Rerun the stage forward on the kept input: same layers, kernels and input as F, so the
        // contexts are bitwise those F built. The output (and the loss) is not needed again.
        Slot& slot = st.slots[s][mb];
        const StageRange& range = stages_[s];
        Tensor x = s == 0 ? (*st.micro)[mb].inputs : std::move(slot.kept_input);
        slot.kept_input = Tensor();
        PF_INTERNAL_CHECK(x.defined(), "rank ", rank, ": ", sched::action_to_string(a), " has no kept input");
        slot.ctx.clear();
        slot.ctx.resize(static_cast<size_t>(range.size()));
        {
          MemoryCategoryScope scope(MemoryCategory::kActivations);
          for (int i = 0; i < range.size(); ++i) x = layers[range.begin + i]->forward(x, slot.ctx[i]);
        }
        live_bytes -= slot.bytes;
        slot.bytes = context_bytes(slot);
        live_bytes += slot.bytes;
        rs.peak_activation_bytes = std::max(rs.peak_activation_bytes, live_bytes);
        rs.recomputes += 1;
        break;
      }
      case ActionKind::kOffload: {
        Slot& slot = st.slots[s][mb];
        PF_INTERNAL_CHECK(store != nullptr, "rank ", rank, ": ", sched::action_to_string(a), " without a store");
        std::vector<SavedContext*> ctxs;
        for (auto& c : slot.ctx) ctxs.push_back(&c);
        store->offload(context_key(s, mb), std::move(ctxs));
        live -= 1;
        live_bytes -= slot.bytes;
        break;
      }
      case ActionKind::kReload: {
        Slot& slot = st.slots[s][mb];
        PF_INTERNAL_CHECK(store != nullptr, "rank ", rank, ": ", sched::action_to_string(a), " without a store");
        store->prefetch(context_key(s, mb));  // asynchronous; the B/BW that needs it waits
        live += 1;
        live_bytes += slot.bytes;
        rs.peak_activation_bytes = std::max(rs.peak_activation_bytes, live_bytes);
        rs.peak_live_micro_batches = std::max(rs.peak_live_micro_batches, live);
        break;
      }
      case ActionKind::kHold: {
        // Keep the owner's packed activations until RETURN. Charged like the owner's context (its
        // Slot::bytes, written before the OFFLOAD that sent them; read after the message arrived).
        const int owner = placement.rank_of(s);
        st.held[s][mb] = tp.recv(owner, MessageKey{MessageKind::kContextOut, mb, s}, timeout);
        live += 1;
        live_bytes += st.slots[s][mb].bytes;
        rs.peak_activation_bytes = std::max(rs.peak_activation_bytes, live_bytes);
        rs.peak_live_micro_batches = std::max(rs.peak_live_micro_batches, live);
        break;
      }
      case ActionKind::kReturn: {
        const int owner = placement.rank_of(s);
        PF_INTERNAL_CHECK(st.held[s][mb].defined(), "rank ", rank, ": ", sched::action_to_string(a), " holds nothing");
        live -= 1;
        live_bytes -= st.slots[s][mb].bytes;
        tp.send(owner, MessageKey{MessageKind::kContextBack, mb, s}, std::move(st.held[s][mb]), timeout);
        st.held[s][mb] = Tensor();
        break;
      }
      case ActionKind::kStep:
        break;  // the optimizer runs once every rank has finished (PipelineTrainer::run_step)
      default:
        fail(ErrorCode::kUnimplemented, "rank ", rank, ": ", sched::action_to_string(a), " is not supported");
    }
    if (record) {
      const auto t_end = clock_type::now();
      timed.push_back({a, std::chrono::duration<double, std::micro>(t_start - st.t0).count(),
                       std::chrono::duration<double, std::micro>(t_end - st.t0).count()});
    }
    rs.actions += 1;
  }
}

StepResult PipelineTrainer::run_step(const std::vector<Batch>& micro_batches) {
  const auto start = clock_type::now();
  if (!planned_ && policy_ != sched::ActivationPolicy::kNone && !micro_batches.empty())
    plan_activation_memory(micro_batches[0]);
  const auto& params = model_->parameters();
  for (Parameter* p : params) std::memset(p->grad.data<char>(), 0, p->grad.nbytes());

  const int m = static_cast<int>(micro_batches.size());
  const int num_ranks = schedule_.num_ranks();
  const int num_stages = schedule_.num_stages();
  StepState& st = *state_;
  st.micro = &micro_batches;
  st.slots.clear();
  st.slots.resize(static_cast<size_t>(num_stages));
  for (auto& v : st.slots) v.resize(static_cast<size_t>(m));
  st.held.assign(static_cast<size_t>(num_stages), std::vector<Tensor>(static_cast<size_t>(m)));
  st.losses.assign(static_cast<size_t>(m), 0.0f);
  st.timed.assign(static_cast<size_t>(num_ranks), {});
  for (int r = 0; r < num_ranks; ++r) st.timed[r].reserve(schedule_.ranks[r].size());
  st.rank_stats.assign(static_cast<size_t>(num_ranks), RankStats());
  st.error = nullptr;
  transport_->reset();
  for (auto& store : stores_) store->reset_stats();

  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = num_ranks;
    st.t0 = clock_type::now();
    generation_ += 1;
  }
  start_cv_.notify_all();
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [&] { return running_ == 0; });
  }

  // Every copy must be finished before the contexts go; a failed step drops what the stores hold
  // (and removes its files).
  std::vector<mem::StoreStats> store_stats;
  for (auto& store : stores_) {
    if (!st.error) {
      try {
        store->wait_all();
      } catch (...) {
        st.error = std::current_exception();
      }
    }
    store->clear();
    store_stats.push_back(store->stats());
  }
  if (st.error) {
    std::exception_ptr e = st.error;
    st.error = nullptr;
    st.slots.clear();
    st.held.clear();
    st.micro = nullptr;
    transport_->reset();
    std::rethrow_exception(e);
  }

  StepResult result;
  for (int mb = 0; mb < m; ++mb) {
    result.loss += st.losses[mb];
    result.samples += micro_batches[mb].rows();
    result.tokens += micro_batches[mb].targets.numel();
  }
  const auto t_opt = clock_type::now();
  result.grad_norm = clip_grad_norm(params, options_.base.optimizer.clip_norm);
  optimizer_->step(params);
  const auto end = clock_type::now();
  result.seconds = std::chrono::duration<double>(end - start).count();

  // Measurements.
  stats_ = PipelineStats();
  stats_.step_us = std::chrono::duration<double, std::micro>(end - start).count();
  stats_.optimizer_us = std::chrono::duration<double, std::micro>(end - t_opt).count();
  stats_.ranks = st.rank_stats;
  for (size_t r = 0; r < store_stats.size() && r < stats_.ranks.size(); ++r) {
    stats_.ranks[r].offloaded_bytes = store_stats[r].offloaded_bytes;
    stats_.ranks[r].host_peak_bytes = store_stats[r].host_peak;
    stats_.ranks[r].file_peak_bytes = store_stats[r].file_peak;
    stats_.offloaded_bytes += store_stats[r].offloaded_bytes;
  }
  double makespan = 0, max_busy = 0;
  for (int r = 0; r < num_ranks; ++r) {
    RankStats& rs = stats_.ranks[r];
    for (const auto& ta : st.timed[r]) {
      if (sched::is_compute(ta.action.kind)) rs.busy_us += ta.duration();
      else if (sched::is_communication(ta.action.kind)) rs.comm_us += ta.duration();
      rs.finish_us = std::max(rs.finish_us, ta.end);
    }
    makespan = std::max(makespan, rs.finish_us);
    max_busy = std::max(max_busy, rs.busy_us);
  }
  stats_.makespan_us = makespan;
  stats_.bubble_rate = makespan > 0 ? (makespan - max_busy) / makespan : 0.0;
  for (auto& rs : stats_.ranks) {
    rs.idle_us = makespan - rs.busy_us;
    rs.bubble_rate = makespan > 0 ? rs.idle_us / makespan : 0.0;
  }
  timeline_ = sched::Timeline();
  timeline_.time_unit = "us";
  timeline_.ranks = std::move(st.timed);
  st.timed.clear();
  st.slots.clear();
  st.held.clear();
  st.micro = nullptr;

  metrics_.step += 1;
  metrics_.last_loss = result.loss;
  metrics_.last_grad_norm = result.grad_norm;
  metrics_.tokens_per_second = result.seconds > 0 ? result.tokens / result.seconds : 0.0;
  metrics_.total_tokens += result.tokens;
  return result;
}

void PipelineTrainer::set_recv_timeout_seconds(double seconds) {
  PF_CHECK_ARG(seconds > 0, "recv_timeout_seconds must be > 0, got ", seconds);
  options_.recv_timeout_seconds = seconds;
}

void PipelineTrainer::restore_progress(int64_t step, int64_t data_position) {
  metrics_.step = step;
  metrics_.data_position = data_position;
  optimizer_->set_steps_taken(step);
}

}  // namespace pf::exec
