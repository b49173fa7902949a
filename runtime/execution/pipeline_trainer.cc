#include "runtime/execution/pipeline_trainer.h"

#include "runtime/schedules/forward_only.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstring>
#include <unordered_map>
#include <type_traits>
#include <unordered_set>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/core/sha256.h"
#include "runtime/checkpoint/parameter_checksum.h"
#include "runtime/backend/cuda_backend.h"
#include "runtime/comm/gpu_transport_group.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/models/init.h"
#include "runtime/schedules/async_schedules.h"
#include "runtime/schedules/bubbles.h"
#include "runtime/schedules/forward_only.h"
#include "runtime/schedules/local_schedules.h"
#include "runtime/train/local_heads.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/schedule_request.h"
#include "runtime/schedules/stage_actions.h"
#include "runtime/schedules/text_format.h"
#include "runtime/schedules/validator.h"
#include "runtime/schedules/windowed_schedules.h"
#include "runtime/tensor/memory_tracker.h"
#include "runtime/train/micro_batches.h"

namespace pf::exec {

using clock_type = std::chrono::steady_clock;
using sched::ActionKind;

void PipelineOptions::validate() const {
  base.validate();
  PF_CHECK_ARG(std::isfinite(slow_factor) && slow_factor >= 1.0, "slow_factor must be >= 1, got ", slow_factor);
  PF_CHECK_ARG(std::isfinite(bubble_fill_safety) && bubble_fill_safety > 0 && bubble_fill_safety <= 1,
               "bubble_fill_safety must be in (0, 1], got ", bubble_fill_safety);
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
  parse_gradient_reduction(gradient_reduction);
  PF_CHECK_ARG(seq_slices >= 1, "seq_slices must be >= 1, got ", seq_slices);
  if (seq_slices > 1) {
    PF_CHECK_ARG(activation_policy == "none", "seq_slices ", seq_slices, " needs activation_policy none, got '",
                 activation_policy, "' (a slice's context holds the keys and values later slices read)");
    PF_CHECK_ARG(base.replicas == 1 && world == nullptr, "seq_slices ", seq_slices,
                 " runs every rank as a thread of one process with one replica (replicas ", base.replicas,
                 world ? ", a world of processes)" : ")");
    for (size_t i = 0; i < devices.size(); ++i)
      PF_CHECK_ARG(devices[i].kind == DeviceKind::kCpu, "seq_slices ", seq_slices, " runs on the CPU only; devices[",
                   i, "] is ", devices[i].to_string());
  }
  async.validate(schedule_text.empty() ? schedule : "custom",
                 schedule_text.empty() ? sched::schedule_traits(schedule).weights : sched::WeightVersioning::kNone);
  check_local_head_kind(local_head);
  if (base.replicas > 1) {
    PF_CHECK_ARG(world != nullptr && data_parallel_world != nullptr, "replicas ", base.replicas,
                 ": data parallelism needs one process per rank: world (the pipeline group) and data_parallel_world");
    PF_CHECK_ARG(data_parallel_world->size() == base.replicas, "data_parallel_world has ", data_parallel_world->size(),
                 " members for ", base.replicas, " replicas");
  }
  for (size_t i = 0; i < devices.size(); ++i)
    PF_CHECK_ARG(devices[i].ordinal >= 0, "devices[", i, "] (rank ", i, "): device ordinal must be >= 0, got ",
                 devices[i].ordinal);
}

struct PipelineTrainer::StepState {
  const std::vector<Batch>* micro = nullptr;
  clock_type::time_point t0;
  std::vector<RankExecutor::StepOutput> outputs;  // per rank
  bool drain = false;  // asynchronous schedules: run the drain instead of a window
  const sched::Schedule* evaluation = nullptr;  // evaluate(): run this forward-only schedule instead
  // optimizer_on_workers(): the second phase (each worker scales by clip_scale and steps its
  // parameters), and the squared gradient norms the first phase leaves [model parameter index].
  bool optimizer_phase = false;
  float clip_scale = 1.0f;
  std::vector<double> squared_norms;
  std::mutex error_mutex;
  std::exception_ptr error;
};


PipelineTrainer::PipelineTrainer(std::shared_ptr<Model> model, const PipelineOptions& options)
    : model_(std::move(model)), options_(options) {
  PF_CHECK_ARG(model_ != nullptr, "pipeline trainer: model is null");
  options_.validate();
  const int m = options_.base.micro_batches;
  sched::Schedule s;
  if (!options_.schedule_text.empty()) {
    s = sched::parse_schedule(options_.schedule_text);
    PF_CHECK_ARG(s.seq_slices == options_.seq_slices, "schedule_text has seq_slices ", s.seq_slices,
                 ", options.seq_slices is ", options_.seq_slices);
    PF_CHECK_ARG(s.num_micro_batches == m * s.seq_slices, "schedule_text has ", s.num_micro_batches,
                 s.seq_slices > 1 ? " units" : " micro-batches", ", options.base.micro_batches is ", m,
                 s.seq_slices > 1 ? " (x seq_slices " + std::to_string(s.seq_slices) + ")" : std::string());
  } else {
    sched::ScheduleRequest req;
    req.name = options_.schedule;
    req.ranks = options_.ranks;
    req.micro_batches = m;
    req.chunks = options_.chunks;
    req.seq_slices = options_.seq_slices;
    s = sched::make_schedule(req);
  }
  if (options_.seq_slices > 1) {
    const InputSpec& in = model_->input_spec();
    PF_CHECK_ARG(in.kind == InputSpec::Kind::kTokens, "seq_slices ", options_.seq_slices,
                 " slices token sequences; this model reads features (use a token model such as the GPT)");
    PF_CHECK_ARG(in.seq_len % options_.seq_slices == 0, "seq_slices ", options_.seq_slices,
                 " must divide the model's seq_len ", in.seq_len);
  }
  schedule_ = sched::is_lowered(s) ? s : sched::lower_communication(s);
  comm_ = communication_semantics(schedule_);
  policy_ = sched::parse_activation_policy(options_.activation_policy);
  local_ = schedule_.traits.local_learning();
  windowed_ = schedule_.traits.windowed();
  if (!windowed_ && (sched::is_asynchronous(schedule_) || sched::has_local_heads(schedule_)))
    fail(ErrorCode::kUnimplemented, "pipeline trainer: schedule '", schedule_.name,
         "' has UPDATE or HEAD actions: asynchronous and local-learning schedules run from their generators only (",
         "pipedream, pipedream-2bw, spectrain, pipemare, ppll, local-updates)");
  if (!local_) {
    PF_CHECK_ARG(options_.local_head == "auto", "local_head '", options_.local_head,
                 "' applies to the local-learning schedules (ppll, local-updates) only, not to '",
                 options_.schedule_text.empty() ? options_.schedule : schedule_.name, "'");
  }
  if (windowed_) make_step_windows();
  base_schedule_ = schedule_;
  if (policy_ == sched::ActivationPolicy::kSelective) {
    PF_CHECK_ARG(options_.activation_budget_bytes > 0,
                 "activation policy selective needs activation_budget_bytes > 0 (bytes per rank)");
  } else if (policy_ == sched::ActivationPolicy::kBalance) {
    // Planned from the measured per-stage context bytes (plan_activation_memory).
  } else if (policy_ != sched::ActivationPolicy::kNone) {
    schedule_ = sched::apply_activation_policy(base_schedule_, policy_, sched::CostModel());
    sched::validate_or_throw(schedule_, {comm_});
  }
  if (options_.base.replicas > 1) {
    schedule_ = sched::add_gradient_allreduce(schedule_);
    sched::validate_or_throw(schedule_, {comm_});
  }
  for (int st = 0; st < schedule_.num_stages(); ++st) {
    if (sched::weight_gradient_order(schedule_, st) != sched::reference_weight_gradient_order(schedule_, st)) {
      log(LogLevel::kWarning, "pipeline trainer: stage " + std::to_string(st) +
                                  " accumulates weight gradients out of micro-batch order; results will "
                                  "differ from the sequential reference in the last bits");
    }
  }
  check_devices();
  if (windowed_ && gpu_)
    fail(ErrorCode::kUnimplemented, "pipeline trainer: ", schedule_family(),
         " on CUDA devices is not supported yet; run it on the CPU");
  if (const auto& world = options_.world) {
    PF_CHECK_ARG(world->size() == schedule_.num_ranks(), "pipeline trainer: ", world->describe(), " is one of ",
                 world->size(), " processes but the schedule '", schedule_.name, "' has ", schedule_.num_ranks(),
                 " ranks (one process per rank: launch ", schedule_.num_ranks(), " processes, e.g. mpirun -np ",
                 schedule_.num_ranks(), ")");
    if (gpu_)
      fail(ErrorCode::kUnimplemented, "pipeline trainer: CUDA ranks in separate processes are not supported yet (",
           world->describe(), ")");
    if (policy_ == sched::ActivationPolicy::kSelective || policy_ == sched::ActivationPolicy::kBalance)
      fail(ErrorCode::kUnimplemented, "pipeline trainer: activation policy '", options_.activation_policy,
           "' is planned from every stage's measured bytes, which one process per rank cannot measure yet; use "
           "none, recompute, offload-host or offload-file");
  }
  if (schedule_.pipelines > 1) check_two_pipelines();
  make_model_stages();
  place_on_processes();
  rank_optimizer_ =
      options_.rank_optimizer && !options_.world && !gpu_ && !windowed_ && !parameters_shared_across_ranks_;
  if (rank_optimizer_) make_rank_parameter_lists();
  optimizer_ = make_optimizer(options_.base.optimizer);
  initialize_parameters(local_params_, options_.base.seed);
  if (copy_) {
    copy_optimizer_ = make_optimizer(options_.base.optimizer);
    initialize_parameters(copy_params_, options_.base.seed);
  }
  RankExecutor::Options eopts;
  eopts.timeout_seconds = options_.recv_timeout_seconds;
  eopts.record_timeline = options_.record_timeline;
  eopts.posted_receives = comm_ == sched::CommSemantics::kPosted;
  // Each unit's loss is the mean over its tokens: 1 / (m S) makes the sum the step's mean.
  eopts.loss_scale = 1.0f / static_cast<float>(options_.base.step_micro_batches() * options_.seq_slices);
  // Asynchronous schedules update with one micro-batch's gradient (2BW: one batch's).
  if (windowed_) {
    const bool per_step = schedule_.traits.update_interval == sched::UpdateInterval::kStep;
    eopts.loss_scale = per_step ? 1.0f / static_cast<float>(m) : 1.0f;
  }
  loss_scale_ = eopts.loss_scale;
  if (options_.base.replicas > 1) {
    reducer_ = std::make_unique<GradientReducer>(options_.data_parallel_world,
                                                 parse_gradient_reduction(options_.gradient_reduction),
                                                 options_.recv_timeout_seconds);
    eopts.on_allreduce = [this](int stage) {
      reducer_->submit(stage, model_stages_[static_cast<size_t>(stage)].parameters());
    };
  }
  for (int r = 0; r < schedule_.num_ranks(); ++r) {
    RankExecutor::Options rank_options = eopts;
    if (r == options_.slow_rank) rank_options.slow_factor = options_.slow_factor;
    if (options_.bubble_fill) rank_options.fill = [this, r](double seconds) { return options_.bubble_fill(r, seconds); };
    executors_.push_back(is_local_rank(r) ? std::make_unique<RankExecutor>(r, &model_stages_, rank_options) : nullptr);
  }
  make_stores();
  if (local_) make_local_heads();
  if (windowed_) make_async_weights();

  InProcessTransport::Options topts;
  topts.mailbox_capacity = options_.mailbox_capacity;
  topts.spin_seconds = options_.spin_seconds;
  if (options_.world) {
    // Every rank's endpoint is in its own process.
  } else if (!gpu_) {
    thread_world_ = std::make_unique<comm::ThreadWorld>(schedule_.num_ranks(), topts);
  } else {
    place_parameters();
    for (int r = 0; r < schedule_.num_ranks(); ++r)
      streams_.push_back(cuda_backend().new_stream(rank_device_[static_cast<size_t>(r)]));
    // NCCL pairs: the ranks on distinct devices that SEND/RECV to each other in the schedule.
    std::vector<std::pair<int, int>> pairs;
    for (int r = 0; r < schedule_.num_ranks(); ++r) {
      for (const auto& a : schedule_.ranks[r]) {
        int peer = -1;
        if (a.kind == ActionKind::kSendF || a.kind == ActionKind::kRecvB) peer = schedule_.placement.rank_of(a.stage + 1);
        if (a.kind == ActionKind::kSendB || a.kind == ActionKind::kRecvF) peer = schedule_.placement.rank_of(a.stage - 1);
        if (peer >= 0 && rank_device_[static_cast<size_t>(peer)] != rank_device_[static_cast<size_t>(r)])
          pairs.emplace_back(std::min(r, peer), std::max(r, peer));
      }
    }
    std::sort(pairs.begin(), pairs.end());
    pairs.erase(std::unique(pairs.begin(), pairs.end()), pairs.end());
    gpu_transport_ = cuda_backend().new_gpu_transport(rank_device_, pairs, topts, options_.mailbox_capacity);
  }
  state_ = std::make_unique<StepState>();
  try {
    for (int r = 0; r < schedule_.num_ranks(); ++r)
      if (is_local_rank(r)) threads_.emplace_back([this, r] { worker_main(r); });
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

void PipelineTrainer::make_step_windows() {
  const std::string family = schedule_family();
  PF_CHECK_ARG(options_.base.replicas == 1, family, " with ", options_.base.replicas,
               " data-parallel replicas is not supported (each stage updates itself; replicas 1)");
  PF_CHECK_ARG(options_.base.optimizer.clip_norm == 0.0f, "optimizer.clip_norm ", options_.base.optimizer.clip_norm,
               " cannot apply to ", family,
               ": each stage updates on its own, so there is no global gradient norm (use clip_norm 0)");
  PF_CHECK_ARG(options_.base.lr_schedule.is_constant(), "learning-rate schedule '",
               lr_schedule_kind_name(options_.base.lr_schedule.kind), "' (warm-up ",
               options_.base.lr_schedule.warmup_steps, " steps) is not supported with ", family,
               " yet: its stages update per micro-batch with their own rates (use a constant one)");
  if (local_) {
    PF_CHECK_ARG(policy_ == sched::ActivationPolicy::kNone, "activation policy '", options_.activation_policy,
                 "' cannot apply to ", family,
                 ": each stage's backward runs right after its forward and head (use activation policy none)");
    windows_ = sched::windowed_step_windows(schedule_, false);
    return;
  }
  // Recompute reruns F with the weights F used: only the stashing methods keep them. Offloads and
  // plans are per step, while micro-batches stay in flight across steps.
  const bool stashing = schedule_.traits.stashes_weights;
  PF_CHECK_ARG(policy_ != sched::ActivationPolicy::kRecompute || stashing, "activation policy 'recompute' cannot "
               "apply to ", family, ": it keeps no copy of the weights a forward used, so a recomputed forward "
               "would not rebuild its activations (recompute works with pipedream and pipedream-2bw)");
  PF_CHECK_ARG(policy_ == sched::ActivationPolicy::kNone || policy_ == sched::ActivationPolicy::kRecompute,
               "activation policy '", options_.activation_policy, "' cannot apply to ", family,
               ": its micro-batches stay in flight across steps (use none, or recompute with pipedream and "
               "pipedream-2bw)");
  windows_ = sched::windowed_step_windows(schedule_, policy_ == sched::ActivationPolicy::kRecompute);
}

void PipelineTrainer::make_local_heads() {
  // Every local stage but the last carries an auxiliary head, initialised from its own seed.
  const int S = schedule_.num_stages();
  local_heads_.clear();
  local_heads_.resize(static_cast<size_t>(S));
  head_stages_.clear();
  head_stages_.reserve(static_cast<size_t>(S));
  std::vector<const Stage*> heads(static_cast<size_t>(S), nullptr);
  for (int s = 0; s + 1 < S; ++s) {
    if (!is_local_rank(schedule_.placement.rank_of(s))) continue;
    // The option wins over the model JSON's "local_head".
    const std::string& kind = options_.local_head != "auto" ? options_.local_head : model_->local_head();
    local_heads_[static_cast<size_t>(s)] = make_local_head(*model_, s, stages_[static_cast<size_t>(s)].end, kind);
    Model& head = *local_heads_[static_cast<size_t>(s)];
    initialize_parameters(head.parameters(), local_head_seed(options_.base.seed, s));
    head_stages_.emplace_back(make_stages(head, {{0, static_cast<int>(head.layers().size())}}).front());
    heads[static_cast<size_t>(s)] = &head_stages_.back();
  }
  for (auto& e : executors_)
    if (e) e->set_local_heads(heads);
}

const Model* PipelineTrainer::local_head(int stage) const {
  if (stage < 0 || stage >= static_cast<int>(local_heads_.size())) return nullptr;
  return local_heads_[static_cast<size_t>(stage)].get();
}

void PipelineTrainer::make_async_weights() {
  StageWeightsConfig c;
  c.method = schedule_.traits.weights;
  c.options = options_.async;
  c.num_stages = schedule_.num_stages();
  c.micro_batches = options_.base.micro_batches;
  c.optimizer = options_.base.optimizer;
  stage_weights_.clear();
  stage_weights_.resize(static_cast<size_t>(schedule_.num_stages()));
  std::vector<StageWeights*> raw(stage_weights_.size(), nullptr);
  for (int s = 0; s < schedule_.num_stages(); ++s) {
    if (!is_local_rank(schedule_.placement.rank_of(s))) continue;
    c.stage = s;
    c.update_delay = windows_.update_delay[static_cast<size_t>(schedule_.placement.rank_of(s))];
    std::vector<Parameter*> head;
    if (const Model* h = local_head(s)) head = h->parameters();
    stage_weights_[static_cast<size_t>(s)] =
        std::make_unique<StageWeights>(model_stages_[static_cast<size_t>(s)], c, head);
    raw[static_cast<size_t>(s)] = stage_weights_[static_cast<size_t>(s)].get();
  }
  for (auto& e : executors_)
    if (e) e->set_async(&windows_, raw);
  mirror_stage_optimizers();
}

void PipelineTrainer::mirror_stage_optimizers() {
  auto& state = optimizer_->state();
  state.clear();
  int64_t updates = 0;
  for (const auto& w : stage_weights_) {
    if (!w) continue;
    for (const auto& [key, tensor] : w->optimizer().state()) state[key] = tensor;
    updates = w->optimizer().steps_taken();  // equal on every stage once the pipeline is empty
  }
  optimizer_->set_steps_taken(updates);
}

void PipelineTrainer::take_loaded_optimizer_state() {
  // Each stage takes its parameters' slots ("<parameter>/<slot>") and the update count.
  const auto& loaded = optimizer_->state();
  for (size_t s = 0; s < stage_weights_.size(); ++s) {
    StageWeights* w = stage_weights_[s].get();
    if (!w) continue;
    auto& state = w->optimizer().state();
    state.clear();
    for (const Parameter* p : model_stages_[s].parameters())
      for (auto it = loaded.lower_bound(p->name + "/"); it != loaded.end() && it->first.rfind(p->name + "/", 0) == 0;
           ++it)
        state[it->first] = it->second;
    w->optimizer().set_steps_taken(optimizer_->steps_taken());
    w->restore_updates(optimizer_->steps_taken());
  }
  mirror_stage_optimizers();
  async_state_loaded_ = false;
}

std::string PipelineTrainer::async_checkpoint_refusal() const {
  if (!windowed_) return "";
  if (!schedule_.traits.checkpointable())
    return "checkpoints of " + schedule_family() + " are not supported yet (" + schedule_.traits.checkpoint_refusal +
           ")";
  if (!pipeline_empty())
    return schedule_family() + " has micro-batches in flight: drain() (pf_trainer_drain) first, then save";
  return "";
}

ProcessGroups PipelineTrainer::process_groups() const {
  ProcessGroups g;
  if (!options_.world) return g;
  g.pipeline = options_.world.get();
  g.data_parallel = options_.data_parallel_world.get();
  g.timeout_seconds = options_.recv_timeout_seconds;
  g.replicas = options_.base.replicas;
  return g;
}

CheckpointRefusal PipelineTrainer::checkpoint_refusal(bool loading) const {
  const std::string why = async_checkpoint_refusal();
  if (!why.empty()) {
    // An asynchronous method's state that is not saved yet is unimplemented; local learning's heads
    // and micro-batches in flight are the trainer's state (kFailedPrecondition, as before 0.11).
    const bool unsaved = !schedule_.traits.checkpointable() && schedule_.traits.asynchronous();
    return {static_cast<int>(unsaved ? ErrorCode::kUnimplemented : ErrorCode::kFailedPrecondition), why};
  }
  if (loading && !checkpoint_load_refusal().empty())
    return {static_cast<int>(ErrorCode::kUnimplemented), checkpoint_load_refusal()};
  return {};
}

const StageWeights* PipelineTrainer::stage_weights(int stage) const {
  if (stage < 0 || stage >= static_cast<int>(stage_weights_.size())) return nullptr;
  return stage_weights_[static_cast<size_t>(stage)].get();
}

bool PipelineTrainer::pipeline_empty() const { return steps_since_fill() == 0; }

void PipelineTrainer::make_stores() {
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
  for (auto& e : executors_)
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
  mem::ActivationStore::Options so;
  so.tier = policy_ == sched::ActivationPolicy::kOffloadFile ||
                    (policy_ == sched::ActivationPolicy::kSelective && !options_.offload_dir.empty())
                ? mem::Tier::kFile
                : mem::Tier::kHost;
  if (held) so.tier = mem::Tier::kPeer;
  so.offload_dir = options_.offload_dir;
  for (int r = 0; r < schedule_.num_ranks(); ++r) {
    if (!is_local_rank(r)) {
      stores_.push_back(nullptr);
      continue;
    }
    so.name = "r" + std::to_string(r);
    if (held) {
      // The copy worker of rank r sends the packed image to the holder and receives it back.
      so.send_image = [this, r](uint64_t key, Tensor image) {
        const int s = static_cast<int>(key >> 32), mb = static_cast<int>(key & 0xffffffffu);
        endpoint(r).send(holder_[s][mb], MessageKey{MessageKind::kContextOut, mb, s}, std::move(image),
                                     options_.recv_timeout_seconds);
      };
      so.receive_image = [this, r](uint64_t key) {
        const int s = static_cast<int>(key >> 32), mb = static_cast<int>(key & 0xffffffffu);
        return endpoint(r).recv(holder_[s][mb], MessageKey{MessageKind::kContextBack, mb, s},
                                            options_.recv_timeout_seconds);
      };
    }
    stores_.push_back(std::make_unique<mem::ActivationStore>(so));
  }
}

// ---- GPUs ----

void PipelineTrainer::check_devices() {
  const int p = schedule_.num_ranks();
  if (options_.devices.size() == 1) options_.devices.assign(static_cast<size_t>(p), options_.devices.front());
  const auto& d = options_.devices;
  gpu_ = false;
  rank_device_.clear();
  used_devices_.clear();
  if (d.empty()) return;
  PF_CHECK_ARG(static_cast<int>(d.size()) == p, "devices: ", d.size(), " entries for the schedule's ", p,
               " ranks (devices[r] is rank r's device; give one per rank, or none to run on the CPU); ",
               static_cast<int>(d.size()) < p ? "rank " + std::to_string(d.size()) + " has no device"
                                              : "there is no rank " + std::to_string(p));
  int cuda_ranks = 0;
  for (const Device& dev : d) cuda_ranks += dev.kind == DeviceKind::kCuda ? 1 : 0;
  if (cuda_ranks == 0) return;  // explicitly all CPU: the CPU path, unchanged
  for (int r = 0; r < p; ++r)
    PF_CHECK_ARG(d[r].kind == DeviceKind::kCuda, "devices[", r, "] (rank ", r, ") is ", d[r].to_string(),
                 " while other ranks are on CUDA devices: all ranks must be on the CPU or all on CUDA devices");
  const CudaAvailability avail = probe_cuda();
  for (int r = 0; r < p; ++r) {
    const int ordinal = d[r].ordinal;
    require_cuda_device(ordinal, "devices[" + std::to_string(r) + "] (rank " + std::to_string(r) + ")", avail);
    rank_device_.push_back(ordinal);
    if (std::find(used_devices_.begin(), used_devices_.end(), ordinal) == used_devices_.end())
      used_devices_.push_back(ordinal);
  }
  const bool file_tier = policy_ == sched::ActivationPolicy::kOffloadFile ||
                         (policy_ == sched::ActivationPolicy::kSelective && !options_.offload_dir.empty());
  if (file_tier || policy_ == sched::ActivationPolicy::kBalance)
    fail(ErrorCode::kUnimplemented, "pipeline trainer: activation policy '", options_.activation_policy, "'",
         file_tier && policy_ == sched::ActivationPolicy::kSelective ? " with offload_dir" : "",
         " is not supported on CUDA devices yet (", d[0].to_string(),
         "): use offload-host, selective without offload_dir, recompute or none");
  gpu_ = true;
}

Device PipelineTrainer::rank_device(int rank) const {
  PF_CHECK_ARG(rank >= 0 && rank < schedule_.num_ranks(), "rank_device: no rank ", rank);
  return gpu_ ? Device::cuda(rank_device_[static_cast<size_t>(rank)]) : Device::cpu();
}

void PipelineTrainer::place_parameters() {
  if (!gpu_) return;
  if (used_devices_.size() == 1) {
    // Every rank on one device: the whole model goes there (Model::device() then says so).
    auto scope = cuda_backend().device_scope(used_devices_[0]);
    model_->to_device(Device::cuda(used_devices_[0]));
    sync_devices("moving the model to its device");
    return;
  }
  // Ranks on several devices: each stage's parameters go to its rank's device.
  std::unordered_map<const Parameter*, int> placed;
  auto place = [&](Parameter* p, int ordinal, int stage) {
    auto [it, inserted] = placed.emplace(p, ordinal);
    if (!inserted) {
      PF_CHECK_ARG(it->second == ordinal, "pipeline trainer: parameter '", p->name, "' is used by stage ", stage,
                   " on cuda:", ordinal, " and by a stage on cuda:", it->second,
                   " (parameters shared across devices are not supported)");
      return;
    }
    const Device dev = Device::cuda(ordinal);
    auto scope = cuda_backend().device_scope(ordinal);
    if (p->value.device() != dev) {
      MemoryCategoryScope category(MemoryCategory::kParameters);
      p->value = p->value.to_device(dev);
    }
    if (p->grad.device() != dev) {
      MemoryCategoryScope category(MemoryCategory::kGradients);
      p->grad = p->grad.to_device(dev);
    }
  };
  const auto& layers = model_->layers();
  for (int s = 0; s < static_cast<int>(stages_.size()); ++s) {
    const int ordinal = rank_device_[static_cast<size_t>(schedule_.placement.rank_of(s))];
    for (int i = stages_[s].begin; i < stages_[s].end; ++i)
      for (Parameter* p : layers[static_cast<size_t>(i)]->parameters()) place(p, ordinal, s);
  }
  // Anything not reached through a stage's layers (none in the built-in models) goes with the
  // last stage, where the loss runs.
  const int last = rank_device_[static_cast<size_t>(schedule_.placement.rank_of(schedule_.num_stages() - 1))];
  for (Parameter* p : model_->parameters())
    if (!placed.count(p)) place(p, last, schedule_.num_stages() - 1);
  sync_devices("moving the parameters to their devices");
}

// The main thread issues its device work (gradient zeroing, micro-batch copies, clipping, the
// optimizer) on the legacy default stream of each device; the workers' streams are non-blocking, so
// the step boundaries are host waits: before the workers start, and after they finish.
void PipelineTrainer::sync_devices(const std::string& what) {
  if (!gpu_) return;
  for (int d : used_devices_) {
    auto scope = cuda_backend().device_scope(d);
    const std::unique_ptr<DeviceEvent> done = cuda_backend().new_event(d);
    done->record(nullptr);  // the main thread has no current stream: the legacy default stream
    done->synchronize(std::max(600.0, options_.recv_timeout_seconds),
                     "pipeline trainer: " + what + " on cuda:" + std::to_string(d));
  }
}

void PipelineTrainer::sync_rank_streams() {
  for (size_t r = 0; r < streams_.size(); ++r) {
    auto scope = cuda_backend().device_scope(streams_[r]->device());
    streams_[r]->synchronize(std::max(600.0, options_.recv_timeout_seconds),
                             "pipeline trainer: rank " + std::to_string(r) + "'s compute stream on cuda:" +
                                 std::to_string(streams_[r]->device()));
  }
}

Transport& PipelineTrainer::endpoint(int rank) {
  if (options_.world) return options_.world->endpoint();
  return gpu_ ? gpu_transport_->endpoint(rank) : thread_world_->member(rank).endpoint();
}

void PipelineTrainer::cancel_transport(int rank, const std::string& what) {
  // Processes: tells every other process of the pipeline and, data parallel, this rank's replicas
  // (which then tell theirs). Threads: wakes every other rank ("rank <r> failed: <what>").
  if (options_.data_parallel_world && !options_.data_parallel_world->aborted())
    options_.data_parallel_world->abort(what);
  if (options_.world) {
    if (!options_.world->aborted()) options_.world->abort(what);
  } else if (gpu_) {
    gpu_transport_->cancel("rank " + std::to_string(rank) + " failed: " + what);
  } else {
    thread_world_->member(rank).abort(what);
  }
}

bool PipelineTrainer::transport_cancelled() const {
  if (options_.world)
    return options_.world->aborted() || (options_.data_parallel_world && options_.data_parallel_world->aborted());
  return gpu_ ? gpu_transport_->cancelled() : thread_world_->aborted();
}

std::string PipelineTrainer::cancel_cause() const {
  if (!transport_cancelled()) return std::string();
  for (const comm::World* w : {options_.world.get(), options_.data_parallel_world.get()})
    if (w && w->aborted()) return w->abort_cause();
  if (thread_world_ && thread_world_->aborted()) return thread_world_->abort_cause();
  return "another rank failed";
}

void PipelineTrainer::reset_transport() {
  if (options_.world) return;  // a failed step leaves the world aborted: later steps fail
  if (gpu_) gpu_transport_->reset();
  else thread_world_->reset();
}

void PipelineTrainer::place_on_processes() {
  for (const Stage& stage : model_stages_)
    for (Parameter* p : stage.parameters()) {
      const int rank = schedule_.placement.rank_of(stage.index());
      auto [it, inserted] = owner_.emplace(p, rank);
      if (!inserted && it->second != rank) parameters_shared_across_ranks_ = true;
      PF_CHECK_ARG(inserted || it->second == rank || !options_.world, "pipeline trainer: parameter '", p->name,
                   "' is used by stage ", stage.index(), " on rank ", rank, " and by a stage on rank ", it->second,
                   " (parameters shared across processes are not supported)");
    }
  local_params_.clear();
  copy_params_.clear();
  for (Model* m : {model_.get(), copy_.get()}) {
    if (!m) continue;
    for (Parameter* p : m->parameters()) {
      if (is_local_rank(owner_rank(p))) {
        allocate_parameter(*p);
        (m == copy_.get() ? copy_params_ : local_params_).push_back(p);
      } else {
        release_parameter(*p);
      }
    }
  }
}

void PipelineTrainer::make_rank_parameter_lists() {
  const size_t p = static_cast<size_t>(schedule_.num_ranks());
  rank_params_.assign(p, {});
  rank_copy_params_.assign(p, {});
  rank_norm_index_.assign(p, {});
  const auto& all = model_->parameters();
  for (size_t i = 0; i < all.size(); ++i) {
    const size_t r = static_cast<size_t>(owner_rank(all[i]));
    rank_params_[r].push_back(all[i]);
    rank_norm_index_[r].push_back(i);
  }
  if (copy_)
    for (Parameter* q : copy_->parameters()) rank_copy_params_[static_cast<size_t>(owner_rank(q))].push_back(q);
}

void PipelineTrainer::rank_squared_norms(int rank) {
  const auto start = clock_type::now();
  const auto& params = rank_params_[static_cast<size_t>(rank)];
  const auto& index = rank_norm_index_[static_cast<size_t>(rank)];
  for (size_t k = 0; k < params.size(); ++k) state_->squared_norms[index[k]] = grad_squared_norm(*params[k]);
  state_->outputs[static_cast<size_t>(rank)].stats.optimizer_us +=
      std::chrono::duration<double, std::micro>(clock_type::now() - start).count();
}

void PipelineTrainer::step_rank_parameters(int rank) {
  const auto start = clock_type::now();
  StepState& st = *state_;
  const auto& params = rank_params_[static_cast<size_t>(rank)];
  const auto& copies = rank_copy_params_[static_cast<size_t>(rank)];
  if (st.clip_scale != 1.0f) {
    scale_gradients(params, st.clip_scale);
    scale_gradients(copies, st.clip_scale);  // two pipelines: the copy's gradients equal the first's
  }
  optimizer_->update_parameters(params);
  if (copy_optimizer_) copy_optimizer_->update_parameters(copies);
  st.outputs[static_cast<size_t>(rank)].stats.optimizer_us +=
      std::chrono::duration<double, std::micro>(clock_type::now() - start).count();
}

void PipelineTrainer::step_on_workers(float scale) {
  // Every slot exists before the workers read the state maps concurrently.
  optimizer_->begin_step(local_params_);
  if (copy_optimizer_) copy_optimizer_->begin_step(copy_params_);
  StepState& st = *state_;
  st.clip_scale = scale;
  st.optimizer_phase = true;
  st.error = nullptr;
  run_workers();
  st.optimizer_phase = false;
  if (st.error) {
    std::exception_ptr e = st.error;
    st.error = nullptr;
    st.micro = nullptr;
    reset_transport();
    std::rethrow_exception(e);
  }
}

int PipelineTrainer::owner_rank(const Parameter* parameter) const {
  auto it = owner_.find(parameter);
  return it == owner_.end() ? 0 : it->second;
}

void PipelineTrainer::plan_activation_memory(const Batch& micro_batch) {
  const int S = base_schedule_.num_stages();
  model_->check_batch(micro_batch.inputs, micro_batch.targets, "micro-batch");
  sched::CostModel c = sched::CostModel::uniform(S);
  c.m_b.assign(static_cast<size_t>(S), 0.0);
  c.m_w.assign(static_cast<size_t>(S), 0.0);
  c.m_in.assign(static_cast<size_t>(S), 0.0);
  {
    // Two pipelines: the first copy's stages are measured; the second's run the same layers.
    const int chain = base_schedule_.stages_per_pipeline();
    std::vector<std::vector<SavedContext>> contexts(static_cast<size_t>(S));
    Tensor x = micro_batch.inputs;
    Tensor targets = micro_batch.targets;
    Tensor dy;
    // GPUs: each stage runs on its rank's device (the main thread, legacy default stream); inputs
    // and gradients move between devices like the transport would move them.
    std::unique_ptr<BackendScope> device_scope;
    auto to_stage_device = [&](int s, Tensor& t) {
      if (!gpu_) return;
      const int d = rank_device_[static_cast<size_t>(schedule_.placement.rank_of(s))];
      device_scope.reset();
      device_scope = cuda_backend().device_scope(d);
      if (t.defined() && t.device() != Device::cuda(d)) t = t.to_device(Device::cuda(d));
    };
    for (int s = 0; s < chain; ++s) {
      const Stage& stage = model_stages_[static_cast<size_t>(s)];
      to_stage_device(s, x);
      if (s == chain - 1) to_stage_device(s, targets);
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
      to_stage_device(s, dy);
      dy = model_stages_[static_cast<size_t>(s)].backward_input(contexts[s], std::move(dy));
      c.m_w[s] = static_cast<double>(context_bytes(contexts[s]));
    }
    for (int s = chain; s < S; ++s) {
      c.m_in[s] = c.m_in[s - chain];
      c.m_b[s] = c.m_b[s - chain];
      c.m_w[s] = c.m_w[s - chain];
    }
    sync_devices("measuring the activation bytes");
  }
  if ((policy_ == sched::ActivationPolicy::kSelective || policy_ == sched::ActivationPolicy::kBalance) && !planned_) {
    sched::Schedule planned =
        sched::apply_activation_policy(base_schedule_, policy_, c, options_.activation_budget_bytes);
    sched::validate_or_throw(planned, {comm_});
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
  return run_step(split_into_micro_batches(*model_, batch, options_.base.step_micro_batches()));
}

StepResult PipelineTrainer::step(DataSource& source) {
  const int64_t start = source.position();
  std::vector<Batch> micro = pull_micro_batches(*model_, source, options_.base.step_micro_batches());
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
      if (gpu_) {
        // The rank's device and compute stream for everything it issues during the step (kernels,
        // copies, the allocator's reuse events); dropped at the end of the step.
        auto device = cuda_backend().device_scope(rank_device_[static_cast<size_t>(rank)]);
        auto stream = cuda_backend().stream_scope(*streams_[static_cast<size_t>(rank)]);
        run_rank(rank);
      } else {
        run_rank(rank);
      }
    } catch (...) {
      std::exception_ptr e = std::current_exception();
      {
        std::lock_guard<std::mutex> lock(state_->error_mutex);
        if (!state_->error) state_->error = e;  // the first failure is the root cause
      }
      // The first failure stops every rank (with threads, a rank cancelled by another's failure
      // adds nothing; with processes, the cancel also reaches this rank's data-parallel group).
      // A World names the failed rank itself.
      if (options_.world || !transport_cancelled()) cancel_transport(rank, describe_exception(e));
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (--running_ == 0) done_cv_.notify_all();
    }
  }
}

void PipelineTrainer::run_rank(int rank) {
  StepState& st = *state_;
  if (st.optimizer_phase) {
    step_rank_parameters(rank);
    return;
  }
  RankExecutor& executor = *executors_[static_cast<size_t>(rank)];
  auto cancelled = [this] { return cancel_cause(); };
  if (st.evaluation) {
    executor.run_evaluation(*st.evaluation, *st.micro, st.t0, endpoint(rank), cancelled,
                            &st.outputs[static_cast<size_t>(rank)]);
    return;
  }
  if (st.drain) {
    executor.run_drain(st.t0, endpoint(rank), cancelled, &st.outputs[static_cast<size_t>(rank)]);
    return;
  }
  mem::ActivationStore* store = stores_.empty() ? nullptr : stores_[static_cast<size_t>(rank)].get();
  executor.run_step(*st.micro, st.t0, endpoint(rank), store, cancelled, &st.outputs[static_cast<size_t>(rank)]);
  // Its gradients are final: the squared norms overlap the other ranks' remaining work.
  if (rank_optimizer_ && options_.base.optimizer.clip_norm > 0.0f) rank_squared_norms(rank);
}

void PipelineTrainer::run_workers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    running_ = static_cast<int>(threads_.size());
    if (!state_->optimizer_phase) state_->t0 = clock_type::now();
    generation_ += 1;
  }
  start_cv_.notify_all();
  std::unique_lock<std::mutex> lock(mutex_);
  done_cv_.wait(lock, [&] { return running_ == 0; });
}

void PipelineTrainer::run_workers_and_wait_for_devices() {
  run_workers();
  // GPUs: every rank's device work is done before anything it used is freed or read here.
  if (!gpu_) return;
  try {
    sync_rank_streams();
  } catch (...) {
    if (!state_->error) state_->error = std::current_exception();
  }
}

std::string PipelineTrainer::schedule_family() const { return schedule_.traits.describe(schedule_.name); }

void PipelineTrainer::check_not_failed() const {
  PF_CHECK_STATE(!async_failed_, "pipeline trainer: an earlier step of ", schedule_family(),
                 " failed with micro-batches in flight; its stages' weights are mid-window: make a new trainer");
}

int64_t PipelineTrainer::steps_since_fill() const {
  for (const auto& e : executors_)
    if (e) return e->steps_since_fill();  // every rank's executor runs the same steps
  return 0;
}

void PipelineTrainer::drain() {
  if (!windowed_ || pipeline_empty()) return;
  check_not_failed();
  const std::vector<Batch> none;
  StepState& st = *state_;
  st.micro = &none;
  st.drain = true;
  st.outputs.assign(static_cast<size_t>(schedule_.num_ranks()), RankExecutor::StepOutput());
  st.error = nullptr;
  run_workers();
  st.drain = false;
  if (st.error) {
    std::exception_ptr e = st.error;
    st.error = nullptr;
    st.micro = nullptr;
    async_failed_ = true;
    std::rethrow_exception(e);
  }
  collect_stats(std::vector<mem::StoreStats>(static_cast<size_t>(schedule_.num_ranks())));
  st.micro = nullptr;
  mirror_stage_optimizers();
}

std::vector<Batch> PipelineTrainer::device_micro_batches(const std::vector<Batch>& micro_batches) const {
  const Device first = Device::cuda(rank_device_[static_cast<size_t>(schedule_.placement.rank_of(0))]);
  const Device last =
      Device::cuda(rank_device_[static_cast<size_t>(schedule_.placement.rank_of(schedule_.num_stages() - 1))]);
  std::vector<Batch> device_micro;
  device_micro.reserve(micro_batches.size());
  for (const Batch& b : micro_batches) {
    Batch d;
    {
      auto scope = cuda_backend().device_scope(first.ordinal);
      d.inputs = b.inputs.device() == first ? b.inputs : b.inputs.to_device(first);
    }
    {
      auto scope = cuda_backend().device_scope(last.ordinal);
      d.targets = b.targets.device() == last ? b.targets : b.targets.to_device(last);
    }
    device_micro.push_back(std::move(d));
  }
  return device_micro;
}

EvalResult PipelineTrainer::evaluate(DataSource& source, int micro_batches) {
  PF_CHECK_ARG(micro_batches >= 1, "evaluate: micro_batches must be >= 1, got ", micro_batches);
  PF_CHECK_STATE(!windowed_, "evaluate: ", schedule_family(),
                 " keeps micro-batches in flight between steps; evaluation runs with synchronous schedules only yet");
  // Two pipelines: the first copy of the model evaluates.
  const int chain = schedule_.stages_per_pipeline();
  const sched::Schedule forward_only = sched::forward_only_schedule(schedule_.placement, micro_batches, chain);
  const std::vector<Batch> micro = pull_micro_batches(*model_, source, micro_batches);
  std::vector<Batch> device_micro;
  if (gpu_) {
    device_micro = device_micro_batches(micro);
    sync_devices("copying the evaluation micro-batches");
  }
  StepState& st = *state_;
  st.micro = gpu_ ? &device_micro : &micro;
  st.evaluation = &forward_only;
  st.outputs.assign(static_cast<size_t>(schedule_.num_ranks()), RankExecutor::StepOutput());
  st.error = nullptr;
  reset_transport();
  run_workers_and_wait_for_devices();
  st.evaluation = nullptr;
  st.micro = nullptr;
  if (st.error) {
    std::exception_ptr e = st.error;
    st.error = nullptr;
    reset_transport();
    std::rethrow_exception(e);
  }
  const int last_rank = schedule_.placement.rank_of(chain - 1);
  std::vector<float> losses = st.outputs[static_cast<size_t>(last_rank)].losses;
  std::vector<int64_t> correct = st.outputs[static_cast<size_t>(last_rank)].correct;
  st.outputs.clear();
  losses.resize(static_cast<size_t>(micro_batches), 0.0f);
  correct.resize(static_cast<size_t>(micro_batches), 0);
  if (options_.world) {  // the last stage's process has them
    options_.world->broadcast(losses.data(), losses.size() * sizeof(float), last_rank, options_.recv_timeout_seconds);
    options_.world->broadcast(correct.data(), correct.size() * sizeof(int64_t), last_rank,
                              options_.recv_timeout_seconds);
  }
  double loss_sum = 0.0;
  int64_t right = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    loss_sum += losses[i];
    right += correct[i];
  }
  return eval_result(micro, loss_sum, right);
}

StepResult PipelineTrainer::run_step(const std::vector<Batch>& step_micro_batches) {
  const auto start = clock_type::now();
  // Data parallel: this replica's m of the step's D * m.
  const int per_replica = options_.base.micro_batches;
  const std::vector<Batch> replica_slice =
      options_.base.replicas > 1
          ? std::vector<Batch>(step_micro_batches.begin() + static_cast<ptrdiff_t>(replica()) * per_replica,
                               step_micro_batches.begin() + static_cast<ptrdiff_t>(replica() + 1) * per_replica)
          : std::vector<Batch>();
  const std::vector<Batch>& micro_batches = options_.base.replicas > 1 ? replica_slice : step_micro_batches;
  if (!planned_ && policy_ != sched::ActivationPolicy::kNone && !micro_batches.empty() && !options_.world)
    plan_activation_memory(micro_batches[0]);
  const auto& params = local_params_;
  if (copy_stale_) {
    sync_model_copy();
    copy_stale_ = false;
  }
  if (windowed_) check_not_failed();
  const int64_t window = windowed_ ? steps_since_fill() : 0;  // which window list this step runs
  // GPUs: the micro-batches on the devices of the ranks that read them (inputs: stage 0's rank,
  // targets: the last stage's); they outlive the step's device work (freed after the host waits).
  std::vector<Batch> device_micro;
  if (windowed_) {
    // Each stage zeroes its gradients at its UPDATE; micro-batches of the last step are in flight.
    if (async_state_loaded_) take_loaded_optimizer_state();
  } else if (!gpu_) {
    for (const std::vector<Parameter*>* list : {&params, &std::as_const(copy_params_)})
      for (Parameter* p : *list) std::memset(p->grad.data<char>(), 0, p->grad.nbytes());
  } else {
    for (Parameter* p : params) {
      if (p->grad.device().kind == DeviceKind::kCuda) {
        auto scope = cuda_backend().device_scope(p->grad.device().ordinal);
        zero_bytes(p->grad.data<char>(), p->grad.device(), p->grad.nbytes(), "zeroing the gradients");
      } else {
        std::memset(p->grad.data<char>(), 0, p->grad.nbytes());
      }
    }
    device_micro = device_micro_batches(micro_batches);
    sync_devices("zeroing the gradients and copying the micro-batches");
  }

  // Sequence slices: the executors run one unit (micro-batch slice) per schedule micro-batch number.
  const std::vector<Batch> units =
      options_.seq_slices > 1 ? split_into_sequence_slices(micro_batches, options_.seq_slices) : std::vector<Batch>();
  const int m = static_cast<int>(options_.seq_slices > 1 ? units.size() : micro_batches.size());
  const int num_ranks = schedule_.num_ranks();
  const int num_stages = schedule_.num_stages();
  StepState& st = *state_;
  st.micro = gpu_ ? &device_micro : options_.seq_slices > 1 ? &units : &micro_batches;
  st.outputs.assign(static_cast<size_t>(num_ranks), RankExecutor::StepOutput());
  st.error = nullptr;
  const float clip = options_.base.optimizer.clip_norm;
  if (rank_optimizer_ && clip > 0.0f) st.squared_norms.assign(model_->parameters().size(), 0.0);
  // Asynchronous schedules: messages sent at the end of the last step are still to be received.
  if (!windowed_) reset_transport();
  for (auto& store : stores_)
    if (store) store->reset_stats();
  run_workers_and_wait_for_devices();

  // Data parallel: every reduction the ALLREDUCEs started is done before the gradients are read.
  if (reducer_) {
    try {
      reducer_->wait();
    } catch (...) {
      if (!st.error) st.error = std::current_exception();
      // The pipeline's other ranks stop too.
      cancel_transport(options_.world->rank(), describe_exception(std::current_exception()));
    }
  }
  // Every copy must be finished before the contexts go; a failed step drops what the stores hold
  // (and removes its files).
  std::vector<mem::StoreStats> store_stats;
  for (auto& store : stores_) {
    if (!store) {
      store_stats.emplace_back();
      continue;
    }
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
    st.micro = nullptr;
    if (windowed_) async_failed_ = true;
    reset_transport();
    std::rethrow_exception(e);
  }

  StepResult result;
  std::vector<float> losses = last_stage_losses(m);
  const auto t_opt = clock_type::now();
  if (windowed_) {
    // Every stage updated itself during the step; the loss is the mean over the micro-batches
    // whose last-stage forward ran in this step (local learning: the last stage lags p - 1).
    if (options_.world) broadcast_losses(&losses);
    const int last_rank = schedule_.placement.rank_of(num_stages - 1);
    double sum = 0.0;
    int count = 0;
    for (const sched::Action& a : windows_.step_list(window, last_rank)) {
      if (a.kind != ActionKind::kForward || a.stage != num_stages - 1) continue;
      sum += losses[static_cast<size_t>(a.micro_batch % m)];
      ++count;
    }
    if (loss_scale_ == 1.0f) result.loss = count > 0 ? sum / count : 0.0;
    else result.loss = count == m ? sum : sum / (static_cast<double>(loss_scale_) * count);
  } else {
    // With clipping off no norm is computed (grad_norm 0). On the workers: the squared norms
    // they left, added in model order as clip_grad_norm adds them; they scale in the next phase.
    if (rank_optimizer_) {
      result.grad_norm = clip > 0.0f ? global_norm(st.squared_norms) : 0.0;
    } else {
      result.grad_norm = options_.world ? reduce_and_clip(&losses) : clip_gradients(params, clip);
      // Two pipelines: the second copy's gradients equal the first's; the same scale keeps them so.
      const float copy_scale = clip_scale(result.grad_norm, clip);
      if (copy_scale != 1.0f) scale_gradients(copy_params_, copy_scale);
    }
    for (float loss : losses) result.loss += loss;  // every replica's, in micro-batch order
  }
  for (const Batch& b : step_micro_batches) {
    result.samples += b.rows();
    result.tokens += b.targets.numel();
  }
  if (!windowed_) {
    result.lr = options_.base.lr_at(metrics_.step);
    optimizer_->set_lr(static_cast<float>(result.lr));
    if (copy_optimizer_) copy_optimizer_->set_lr(static_cast<float>(result.lr));
    if (rank_optimizer_) {
      step_on_workers(clip_scale(result.grad_norm, clip));
    } else {
      optimizer_->step(params);
      if (copy_optimizer_) copy_optimizer_->step(copy_params_);
    }
  } else {
    result.lr = options_.base.optimizer.lr;
  }
  sync_devices("the optimizer step");  // GPUs: the update is done before the next step's workers start
  const auto end = clock_type::now();
  result.seconds = std::chrono::duration<double>(end - start).count();

  collect_stats(store_stats);
  if (options_.bubble_fill && !windowed_ && !gpu_ && !options_.world) plan_bubble_fill();
  stats_.optimizer_on_workers = rank_optimizer_;
  result.bubble_rate = stats_.bubble_rate;
  for (const RankStats& rs : stats_.ranks) result.peak_activation_bytes.push_back(static_cast<int64_t>(rs.peak_activation_bytes));
  stats_.step_us = std::chrono::duration<double, std::micro>(end - start).count();
  stats_.optimizer_us = std::chrono::duration<double, std::micro>(end - t_opt).count();
  st.micro = nullptr;

  metrics_.step += 1;
  metrics_.last_loss = result.loss;
  metrics_.last_grad_norm = result.grad_norm;
  metrics_.tokens_per_second = result.seconds > 0 ? result.tokens / result.seconds : 0.0;
  metrics_.total_tokens += result.tokens;
  return result;
}

// The next step fills where this one waited (its measured timeline, in microseconds).
void PipelineTrainer::plan_bubble_fill() {
  const std::vector<sched::RankBubbles> bubbles = sched::timeline_bubbles(timeline_);
  const double k = options_.bubble_fill_safety * 1e-6;
  for (size_t r = 0; r < bubbles.size() && r < executors_.size(); ++r) {
    if (!executors_[r]) continue;
    std::vector<double> before = bubbles[r].before;
    for (double& b : before) b *= k;
    executors_[r]->set_fill_budgets(std::move(before), bubbles[r].after_last * k);
  }
}

void PipelineTrainer::collect_stats(const std::vector<mem::StoreStats>& store_stats) {
  StepState& st = *state_;
  const int num_ranks = schedule_.num_ranks();
  stats_ = PipelineStats();
  for (auto& out : st.outputs) stats_.ranks.push_back(out.stats);
  for (size_t r = 0; r < store_stats.size() && r < stats_.ranks.size(); ++r) {
    stats_.ranks[r].offloaded_bytes = store_stats[r].offloaded_bytes;
    stats_.ranks[r].host_peak_bytes = store_stats[r].host_peak;
    stats_.ranks[r].file_peak_bytes = store_stats[r].file_peak;
    stats_.offloaded_bytes += store_stats[r].offloaded_bytes;
  }
  for (int r = 0; r < num_ranks; ++r) {
    RankStats& rs = stats_.ranks[r];
    for (const auto& ta : st.outputs[static_cast<size_t>(r)].timed) {
      // An asynchronous stage's UPDATE (its optimizer step) is work on the rank's critical path.
      if (sched::is_compute(ta.action.kind) || ta.action.kind == ActionKind::kUpdate) rs.busy_us += ta.duration();
      else if (sched::is_communication(ta.action.kind)) rs.comm_us += ta.duration();
      rs.finish_us = std::max(rs.finish_us, ta.end);
    }
  }
  if (options_.world) {
    // Every process reports every rank (times measured from each process's own step start).
    static_assert(std::is_trivially_copyable<RankStats>::value, "RankStats travels as bytes");
    const int me = options_.world->rank();
    const std::vector<char> all = options_.world->all_gather(&stats_.ranks[static_cast<size_t>(me)],
                                                             sizeof(RankStats), options_.recv_timeout_seconds);
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
  stats_.bubble_rate = makespan > 0 ? (makespan - max_busy) / makespan : 0.0;
  for (auto& rs : stats_.ranks) {
    rs.idle_us = makespan - rs.busy_us;
    rs.bubble_rate = makespan > 0 ? rs.idle_us / makespan : 0.0;
  }
  timeline_ = sched::Timeline();
  timeline_.time_unit = "us";
  for (auto& out : st.outputs) timeline_.ranks.push_back(std::move(out.timed));
  st.outputs.clear();
}

// The last stage's process broadcasts the per-micro-batch losses; with clipping on, every process
// gathers every parameter's squared gradient norm from its owner and adds them in model order, as
// clip_grad_norm does in one process, so the norm (and the clipping scale) is bitwise the same
// everywhere; each process scales its own gradients (clipping off: no norm is computed). The
// per-rank stats are gathered too.
// (Data parallel: the replicas' gradients are equal by now, so the pipeline group's norm is every
// replica's; only the losses are gathered across replicas.)
std::vector<float> PipelineTrainer::last_stage_losses(int units) const {
  // Each pipeline's last stage recorded the losses of its micro-batches (the others are 0).
  const int per = schedule_.micro_batches_per_pipeline();
  std::vector<float> losses(static_cast<size_t>(units), 0.0f);
  for (int k = 0; k < schedule_.pipelines; ++k) {
    const int last = schedule_.last_stage_of_pipeline(k);
    const std::vector<float>& got = state_->outputs[static_cast<size_t>(schedule_.placement.rank_of(last))].losses;
    const int begin = schedule_.pipelines > 1 ? k * per : 0, end = schedule_.pipelines > 1 ? (k + 1) * per : units;
    for (int i = begin; i < end && i < static_cast<int>(got.size()); ++i) losses[static_cast<size_t>(i)] = got[static_cast<size_t>(i)];
  }
  return losses;
}

void PipelineTrainer::broadcast_losses(std::vector<float>* losses) {
  const double timeout = options_.recv_timeout_seconds;
  if (schedule_.pipelines > 1) {  // each pipeline's share from its last stage's process
    const int per = schedule_.micro_batches_per_pipeline();
    for (int k = 0; k < schedule_.pipelines; ++k) {
      const int last = schedule_.last_stage_of_pipeline(k);
      options_.world->broadcast(losses->data() + static_cast<size_t>(k) * per, static_cast<size_t>(per) * sizeof(float),
                                schedule_.placement.rank_of(last), timeout);
    }
    return;
  }
  options_.world->broadcast(losses->data(), losses->size() * sizeof(float),
                            schedule_.placement.rank_of(schedule_.num_stages() - 1), timeout);
  if (options_.base.replicas > 1) {  // every replica's losses, in replica (= micro-batch) order
    const std::vector<char> all =
        options_.data_parallel_world->all_gather(losses->data(), losses->size() * sizeof(float), timeout);
    losses->resize(all.size() / sizeof(float));
    std::memcpy(losses->data(), all.data(), all.size());
  }
}

double PipelineTrainer::reduce_and_clip(std::vector<float>* losses) {
  comm::World& world = *options_.world;
  const double timeout = options_.recv_timeout_seconds;
  broadcast_losses(losses);
  if (options_.base.optimizer.clip_norm <= 0.0f) return 0.0;  // clipping off: no norm
  const auto& all = model_->parameters();
  std::vector<double> partial(all.size(), 0.0);
  for (size_t i = 0; i < all.size(); ++i)
    if (is_local_rank(owner_rank(all[i]))) partial[i] = grad_squared_norm(*all[i]);
  const std::vector<char> gathered = world.all_gather(partial.data(), partial.size() * sizeof(double), timeout);
  for (size_t i = 0; i < all.size(); ++i)
    std::memcpy(&partial[i],
                gathered.data() + (static_cast<size_t>(owner_rank(all[i])) * all.size() + i) * sizeof(double),
                sizeof(double));
  const double norm = global_norm(partial);
  const float scale = clip_scale(norm, options_.base.optimizer.clip_norm);
  if (scale != 1.0f) scale_gradients(local_params_, scale);  // (run_step scales copy_params_)
  return norm;
}

std::string PipelineTrainer::parameter_checksum() const {
  if (!options_.world) return pf::parameter_checksum(model_->parameters());
  comm::World& world = *options_.world;
  Sha256 digest;
  std::vector<char> bytes;
  for (const Parameter* p : model_->parameters()) {
    const int owner = owner_rank(p);
    bytes.resize(static_cast<size_t>(shape_numel(p->shape)) * sizeof(float));
    if (is_local_rank(owner)) std::memcpy(bytes.data(), p->value.data<char>(), bytes.size());
    world.broadcast(bytes.data(), bytes.size(), owner, options_.recv_timeout_seconds);
    digest.update(bytes.data(), bytes.size());
  }
  return digest.hex();
}

void PipelineTrainer::set_recv_timeout_seconds(double seconds) {
  PF_CHECK_ARG(seconds > 0, "recv_timeout_seconds must be > 0, got ", seconds);
  options_.recv_timeout_seconds = seconds;
  for (auto& e : executors_)
    if (e) e->set_timeout_seconds(seconds);
  if (reducer_) reducer_->set_timeout_seconds(seconds);
}

void PipelineTrainer::restore_progress(int64_t step, int64_t data_position) {
  metrics_.step = step;
  metrics_.data_position = data_position;
  optimizer_->set_steps_taken(step);
  copy_stale_ = copy_ != nullptr;  // two pipelines: the second copy takes the loaded state (next step)
  // Asynchronous schedules: the checkpoint's optimizer state goes to the stages before the next step.
  if (windowed_) async_state_loaded_ = true;
}

}  // namespace pf::exec
