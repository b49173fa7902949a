#include "runtime/neuron_groups/neuron_group_trainer.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "runtime/core/error.h"
#include "runtime/kernels/cpu/blas.h"
#include "runtime/layers/parameter.h"
#include "runtime/models/init.h"
#include "runtime/neuron_groups/diversity.h"
#include "runtime/train/micro_batches.h"

namespace pf::groups {

namespace {

constexpr double kTimeoutSeconds = 60.0;

// Columns [offset, offset + width) of a [rows, cols] tensor, copied.
Tensor columns(const Tensor& t, int64_t offset, int64_t width) {
  const int64_t rows = t.dim(0), cols = t.dim(1);
  if (offset == 0 && width == cols) return t;
  Tensor out = Tensor::empty({rows, width});
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.f32() + r * width, t.f32() + r * cols + offset, static_cast<size_t>(width) * sizeof(float));
  return out;
}

// The parts ([rows, w_i] each, in group order) side by side.
Tensor side_by_side(const std::vector<Tensor>& parts) {
  if (parts.size() == 1) return parts[0];
  const int64_t rows = parts[0].dim(0);
  int64_t cols = 0;
  for (const Tensor& p : parts) cols += p.dim(1);
  Tensor out = Tensor::empty({rows, cols});
  int64_t at = 0;
  for (const Tensor& p : parts) {
    const int64_t w = p.dim(1);
    for (int64_t r = 0; r < rows; ++r)
      std::memcpy(out.f32() + r * cols + at, p.f32() + r * w, static_cast<size_t>(w) * sizeof(float));
    at += w;
  }
  return out;
}

void zero_gradients(const std::vector<Parameter*>& params) {
  for (Parameter* p : params) std::memset(p->grad.data<char>(), 0, p->grad.nbytes());
}

}  // namespace

struct NeuronGroupTrainer::RankRun {
  std::vector<float> losses;  // the last stage's scaled losses
  GroupTraffic traffic;
  std::exception_ptr error;   // what stopped the rank
};

NeuronGroupTrainer::NeuronGroupTrainer(std::shared_ptr<Model> model, const TrainerOptions& options,
                                       const NeuronGroupOptions& groups, int update_every,
                                       std::shared_ptr<comm::World> processes)
    : options_(options), update_every_(update_every), processes_(std::move(processes)) {
  options_.validate();
  groups.validate();
  PF_CHECK_ARG(model != nullptr, "neuron groups: model is null");
  PF_CHECK_ARG(options_.replicas == 1, "neuron groups: replicas must be 1, got ", options_.replicas);
  PF_CHECK_ARG(options_.lr_schedule.is_constant(),
               "neuron groups: the learning rate must be constant (each rank updates on its own schedule of micro-batches)");
  PF_CHECK_ARG(options_.optimizer.clip_norm <= 0.0f,
               "neuron groups: clip_norm must be 0: each rank updates on its own, no global gradient norm exists");
  PF_CHECK_ARG(update_every == 1 || update_every == options_.micro_batches, "neuron groups: update_every must be 1 or ",
               "micro_batches (", options_.micro_batches, "), got ", update_every);
  PF_CHECK_ARG(options_.micro_batches >= groups.stages - 1, "neuron groups: micro_batches (", options_.micro_batches,
               ") must be >= stages - 1 (", groups.stages - 1,
               "): stage k works k micro-batches behind, on what stage k - 1 forwarded");
  scale_ = 1.0f / static_cast<float>(update_every);
  if (processes_) {
    PF_CHECK_ARG(processes_->size() == groups.ranks(), "neuron groups: ", processes_->describe(), " is one of ",
                 processes_->size(), " processes but ", groups.stages, " stages of ", groups.groups,
                 " groups take (stages - 1) x groups + 1 = ", groups.ranks(),
                 " ranks (one process per rank: launch ", groups.ranks(), " processes, e.g. mpirun -np ",
                 groups.ranks(), ")");
  } else {
    threads_ = std::make_unique<comm::ThreadWorld>(groups.ranks());
  }
  // Every process holds the whole MLP (the groups are cut from it, evaluation runs it).
  for (Parameter* p : model->parameters()) allocate_parameter(*p);
  initialize_parameters(model->parameters(), options_.seed);
  network_ = std::make_unique<GroupNetwork>(std::move(model), groups, options_.seed);
  for (int r = 0; r < network_->ranks(); ++r) optimizers_.push_back(make_optimizer(options_.optimizer));
}

NeuronGroupTrainer::~NeuronGroupTrainer() = default;

Model& NeuronGroupTrainer::model() const {
  // In processes the other ranks' parts are current only after a drain or an evaluation.
  if (!written_back_) {
    network_->write_back();
    written_back_ = true;
  }
  return network_->model();
}

const Batch& NeuronGroupTrainer::batch_of(int64_t e) const {
  const int64_t m = options_.micro_batches;
  const int64_t current_step = trained_ / m - 1;  // trained_ counts the current step's micro-batches too
  const int64_t step = e / m;
  const std::vector<Batch>& from = step == current_step ? current_ : previous_;
  PF_INTERNAL_CHECK(step == current_step || step == current_step - 1, "neuron groups: micro-batch ", e,
                    " is not of the last two steps");
  return from[static_cast<size_t>(e % m)];
}

void NeuronGroupTrainer::train_micro_batch(int rank, int64_t e, comm::Transport& transport, RankRun& out) {
  GroupNetwork& net = *network_;
  RankPart& part = net.part(rank);
  const int k = part.stage, G = net.groups();
  const Batch& batch = batch_of(e);
  const int mb = static_cast<int>(e);
  // The stage input: the batch, or every group of the stage before side by side.
  Tensor x;
  if (k == 0) {
    x = batch.inputs;
  } else {
    std::vector<Tensor> parts;
    const int from_groups = net.grouped(k - 1) ? G : 1;
    for (int g = 0; g < from_groups; ++g)
      parts.push_back(transport.recv(net.rank_of(k - 1, g), {comm::MessageKind::kActivation, mb, k}, kTimeoutSeconds));
    x = side_by_side(parts);
  }
  std::vector<SavedContext> contexts;
  Tensor y = part.body_stage->forward(std::move(x), contexts);
  Tensor dy;
  if (!net.grouped(k)) {
    SavedContext loss_context;
    out.losses.push_back(part.body_stage->loss_forward(y, batch.targets, scale_, loss_context));
    dy = part.body_stage->loss_backward(loss_context);
  } else {
    // Hand the group's output on: to the next stage and to the other groups of this one.
    const int64_t bytes = static_cast<int64_t>(y.nbytes());
    for (int r : net.ranks_of(k)) {
      transport.send(r, {comm::MessageKind::kActivation, mb, k + 1}, y, kTimeoutSeconds);
      out.traffic.stage_outputs += bytes;
      ++out.traffic.messages;
    }
    for (int g = 0; g < G; ++g) {
      if (g == part.group) continue;
      transport.send(net.rank_of(k, g), {comm::MessageKind::kGroupOutput, mb, k}, y, kTimeoutSeconds);
      out.traffic.group_outputs += bytes;
      ++out.traffic.messages;
    }
    // The stage output (the other groups' units are values only: no gradient goes to them).
    std::vector<Tensor> stage_output;
    for (int g = 0; g < G; ++g)
      stage_output.push_back(g == part.group ? y
                                             : transport.recv(net.rank_of(k, g), {comm::MessageKind::kGroupOutput, mb, k},
                                                              kTimeoutSeconds));
    const Stage& head = *part.head_stage;
    std::vector<SavedContext> head_contexts;
    SavedContext loss_context;
    const Tensor logits = head.forward(side_by_side(stage_output), head_contexts);
    head.loss_forward(logits, batch.targets, scale_, loss_context);
    Tensor dlogits = head.loss_backward(loss_context);
    const float weight = net.options().diversity_weight;
    if (weight > 0.0f && G > 1) {
      for (int g = 0; g < G; ++g) {
        if (g == part.group) continue;
        transport.send(net.rank_of(k, g), {comm::MessageKind::kGroupLogits, mb, k}, logits, kTimeoutSeconds);
        out.traffic.logits += static_cast<int64_t>(logits.nbytes());
        ++out.traffic.messages;
      }
      std::vector<Tensor> all;
      std::vector<const float*> pointers;
      for (int g = 0; g < G; ++g)
        all.push_back(g == part.group ? logits
                                      : transport.recv(net.rank_of(k, g), {comm::MessageKind::kGroupLogits, mb, k},
                                                       kTimeoutSeconds));
      for (const Tensor& t : all) pointers.push_back(t.f32());
      Tensor grad = Tensor::empty(logits.shape());
      diversity_loss<float>(pointers, batch.targets.i32(), logits.dim(0), logits.dim(1),
                            net.options().diversity_temperature, part.group, grad.f32());
      // Owned by this rank (loss_backward's result): add weight * scale * d div / d logits.
      float* d = dlogits.f32();
      const float* gd = grad.f32();
      const float factor = weight * scale_;
      for (int64_t i = 0; i < dlogits.numel(); ++i) d[i] += factor * gd[i];
    }
    const Tensor dstage = head.backward(head_contexts, std::move(dlogits));
    dy = columns(dstage, part.output_offset, part.output_width);
  }
  part.body_stage->backward(contexts, std::move(dy));  // the input gradient goes nowhere
  if ((e + 1) % update_every_ == 0) {
    Optimizer& opt = *optimizers_[static_cast<size_t>(rank)];
    opt.set_lr(options_.optimizer.lr);
    opt.step(part.parameters);
    zero_gradients(part.parameters);
  }
}

void NeuronGroupTrainer::run_rank(int rank, int64_t begin, int64_t end, comm::World& world, RankRun& out) {
  try {
    cpu::set_blas_threads_for_this_thread(options_.blas_threads);
    const int64_t lag = network_->part(rank).stage;
    const int64_t from = std::max<int64_t>(0, begin - lag);
    const int64_t to = begin == end ? end : end - lag;  // a drain trains every stage up to the end
    for (int64_t e = from; e < to; ++e) train_micro_batch(rank, e, world.endpoint(), out);
  } catch (...) {
    out.error = std::current_exception();
    std::string why = "unknown error";
    try {
      throw;
    } catch (const std::exception& ex) {
      why = ex.what();
    } catch (...) {
    }
    world.abort(why);  // the others' waits end (kCancelled naming this rank) instead of timing out
  }
}

void NeuronGroupTrainer::add_traffic(const GroupTraffic& t) {
  traffic_.stage_outputs += t.stage_outputs;
  traffic_.group_outputs += t.group_outputs;
  traffic_.logits += t.logits;
  traffic_.messages += t.messages;
}

std::vector<float> NeuronGroupTrainer::run(int64_t begin, int64_t end) {
  const int R = network_->ranks();
  const bool draining = begin == end;
  written_back_ = false;
  gathered_ = false;
  if (processes_) {
    // One rank per process: this one's, on this thread.
    comm::World& world = *processes_;
    RankRun mine;
    run_rank(world.rank(), begin, end, world, mine);
    if (mine.error) std::rethrow_exception(mine.error);
    if (!draining) {
      traffic_ = GroupTraffic();
      const std::vector<int64_t> all = comm::all_gather_int64s(
          world, {mine.traffic.stage_outputs, mine.traffic.group_outputs, mine.traffic.logits, mine.traffic.messages},
          kTimeoutSeconds);
      for (size_t at = 0; at < all.size(); at += 4) add_traffic({all[at], all[at + 1], all[at + 2], all[at + 3]});
    }
    // The last rank's losses, on every process.
    int64_t count = static_cast<int64_t>(mine.losses.size());
    world.broadcast(&count, sizeof(count), R - 1, kTimeoutSeconds);
    mine.losses.resize(static_cast<size_t>(count));
    if (count > 0) world.broadcast(mine.losses.data(), mine.losses.size() * sizeof(float), R - 1, kTimeoutSeconds);
    return mine.losses;
  }
  std::vector<RankRun> runs(static_cast<size_t>(R));
  std::vector<std::thread> threads;
  for (int r = 0; r < R; ++r)
    threads.emplace_back([&, r] { run_rank(r, begin, end, threads_->member(r), runs[static_cast<size_t>(r)]); });
  for (auto& t : threads) t.join();
  if (!draining) {
    traffic_ = GroupTraffic();
    for (const RankRun& run : runs) add_traffic(run.traffic);
  }
  // The rank that failed first (the others were cancelled by it) goes to the caller.
  const std::string cause = threads_->abort_cause();
  std::exception_ptr first;
  for (int r = 0; r < R; ++r) {
    const std::exception_ptr& e = runs[static_cast<size_t>(r)].error;
    if (e && (!first || cause.rfind("rank " + std::to_string(r) + " ", 0) == 0)) first = e;
  }
  if (first) {
    threads_->reset();
    std::rethrow_exception(first);
  }
  gathered_ = true;  // every rank's parameters are in this process
  return runs.back().losses;
}

void NeuronGroupTrainer::gather_parameters() {
  if (gathered_) return;
  // Every rank's parameters from the process that trained them, in rank order (a collective).
  for (int r = 0; r < network_->ranks(); ++r)
    for (Parameter* p : network_->part(r).parameters)
      processes_->broadcast(p->value.f32(), p->value.nbytes(), r, kTimeoutSeconds);
  gathered_ = true;
  written_back_ = false;
}

StepResult NeuronGroupTrainer::finish_step(const std::vector<Batch>& micro, const std::vector<float>& losses,
                                           double seconds) {
  StepResult r;
  double sum = 0.0;
  for (float l : losses) sum += l;
  // The mean of the (unscaled) losses the last stage reached in this step: the scaled losses of
  // one update's micro-batches add up to it (as ppll reports it).
  const size_t count = losses.size();
  if (count == static_cast<size_t>(update_every_)) r.loss = sum;
  else if (count > 0) r.loss = sum / (static_cast<double>(scale_) * static_cast<double>(count));
  for (const Batch& b : micro) {
    r.samples += b.rows();
    r.tokens += b.targets.numel();
  }
  r.seconds = seconds;
  r.lr = options_.optimizer.lr;
  metrics_.step += 1;
  metrics_.last_loss = r.loss;
  metrics_.tokens_per_second = seconds > 0 ? static_cast<double>(r.tokens) / seconds : 0.0;
  metrics_.total_tokens += r.tokens;
  return r;
}

StepResult NeuronGroupTrainer::run_step(const std::vector<Batch>& micro) {
  const auto start = std::chrono::steady_clock::now();
  previous_ = std::move(current_);
  current_ = micro;
  const int64_t begin = trained_;
  trained_ += options_.micro_batches;
  std::vector<float> losses;
  try {
    losses = run(begin, trained_);
  } catch (...) {
    // The ranks stopped part-way through: the pipeline's state is lost with them.
    trained_ = begin;
    current_ = std::move(previous_);
    previous_.clear();
    throw;
  }
  return finish_step(micro, losses, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
}

StepResult NeuronGroupTrainer::step(const Batch& batch) {
  return run_step(split_into_micro_batches(network_->model(), batch, options_.micro_batches));
}

StepResult NeuronGroupTrainer::step(DataSource& source) {
  const StepResult r = step_on_source(network_->model(), source, options_.micro_batches,
                                      [&](const std::vector<Batch>& micro) { return run_step(micro); });
  metrics_.data_position = source.position();
  return r;
}

void NeuronGroupTrainer::drain() {
  if (trained_ > 0) {
    run(trained_, trained_);
    // Nothing is in flight any more: the next step starts from an empty pipeline.
    previous_.clear();
    current_.clear();
    trained_ = 0;
  }
  if (processes_) gather_parameters();
}

EvalResult NeuronGroupTrainer::evaluate(DataSource& source, int micro_batches) {
  PF_CHECK_ARG(micro_batches >= 1, "evaluate: micro_batches must be >= 1, got ", micro_batches);
  if (processes_) gather_parameters();
  Model& whole = model();
  const std::vector<Batch> micro = pull_micro_batches(whole, source, micro_batches);
  cpu::set_blas_threads_for_this_thread(options_.blas_threads);
  const Stage all(whole, 0, 1, 0, static_cast<int>(whole.layers().size()));
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (const Batch& batch : micro) {
    std::vector<SavedContext> contexts;
    SavedContext loss_context;
    const Tensor y = all.forward(batch.inputs, contexts);
    loss_sum += all.loss_forward(y, batch.targets, 1.0f, loss_context);
    correct += all.count_correct(y, batch.targets);
  }
  return eval_result(micro, loss_sum, correct);
}

void NeuronGroupTrainer::restore_progress(int64_t step, int64_t data_position) {
  metrics_.step = step;
  metrics_.data_position = data_position;
}

CheckpointRefusal NeuronGroupTrainer::checkpoint_refusal(bool loading) const {
  (void)loading;
  return {static_cast<int>(ErrorCode::kFailedPrecondition),
          "checkpoints of neuron groups are not supported yet (the groups' auxiliary heads and each rank's optimizer "
          "state are not saved)"};
}

}  // namespace pf::groups
