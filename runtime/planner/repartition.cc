#include "runtime/planner/repartition.h"

#include <cstring>
#include <sstream>
#include <string>

#include "runtime/comm/world.h"
#include "runtime/core/error.h"
#include "runtime/tensor/memory_tracker.h"

namespace pf::plan {
namespace {

// What this process held of one parameter before the move: a host copy of its value (the new
// trainer initialises its parameters afresh) and its optimizer slots (handles, in
// optimizer_slot_names order; undefined where the optimizer has none).
struct Held {
  Tensor value;
  std::vector<Tensor> slots;
};

struct Snapshot {
  std::vector<int> owner;  // per model parameter: its rank before the move
  std::vector<Held> held;  // per model parameter: this process's (empty where another process held it)
  int64_t step = 0, data_position = 0, optimizer_steps = 0;
};

Snapshot take_snapshot(exec::PipelineTrainer& trainer) {
  Snapshot s;
  const auto& params = trainer.model().parameters();
  const auto& slot_names = optimizer_slot_names(trainer.optimizer().config().kind);
  auto& state = trainer.optimizer().state();
  s.held.resize(params.size());
  for (size_t i = 0; i < params.size(); ++i) {
    const Parameter* p = params[i];
    s.owner.push_back(trainer.parts().ownership.owner(p));
    if (!trainer.parts().ownership.is_local_rank(s.owner.back())) continue;
    s.held[i].value = p->value.to_device(Device::cpu());
    for (const std::string& slot : slot_names) {
      auto it = state.find(p->name + "/" + slot);
      s.held[i].slots.push_back(it == state.end() ? Tensor() : it->second);
    }
  }
  s.step = trainer.metrics().step;
  s.data_position = trainer.metrics().data_position;
  s.optimizer_steps = trainer.optimizer().steps_taken();
  return s;
}

// The new owner takes what this process held (begin_step moves a slot to its parameter's device).
void take_held(exec::PipelineTrainer& to, Parameter& p, const Held& held) {
  copy_bytes(p.value.data<char>(), p.value.device(), held.value.data<char>(), Device::cpu(), p.value.nbytes(),
             "repartition");
  const auto& slot_names = optimizer_slot_names(to.optimizer().config().kind);
  for (size_t k = 0; k < held.slots.size(); ++k)
    if (held.slots[k].defined()) to.optimizer().state()[p.name + "/" + slot_names[k]] = held.slots[k];
}

// Broadcasts parameter `p` from its old owner `from` to every process; the new owner `to_rank`
// takes it. Returns what this process found wrong ("" when nothing), after making the same calls as
// every other process.
std::string move_parameter(comm::World& world, double timeout, exec::PipelineTrainer& to, Parameter& p, int from,
                           int to_rank, const Held& held) {
  const auto& slot_names = optimizer_slot_names(to.optimizer().config().kind);
  const int me = world.rank();
  std::string header;  // "<values> <slot mask> <name>"
  if (me == from) {
    uint64_t mask = 0;
    for (size_t k = 0; k < held.slots.size(); ++k)
      if (held.slots[k].defined()) mask |= uint64_t{1} << k;
    header = std::to_string(held.value.numel()) + " " + std::to_string(mask) + " " + p.name;
  }
  comm::broadcast_string(world, &header, from, timeout);
  std::istringstream in(header);
  int64_t values = -1;
  uint64_t mask = 0;
  std::string name;
  in >> values >> mask;
  in.get();
  std::getline(in, name);
  size_t slots = 0;
  for (size_t k = 0; k < slot_names.size(); ++k) slots += (mask >> k) & 1;
  const bool readable = !in.fail() && values >= 0 && (mask >> slot_names.size()) == 0;
  const std::string what = "parameter '" + p.name + "' from rank " + std::to_string(from) + " to rank " +
                           std::to_string(to_rank);
  std::string problem;
  if (!readable) {
    problem = what + ": rank " + std::to_string(from) + " sent an unreadable description '" + header + "'";
  } else if (name != p.name) {
    problem = what + ": rank " + std::to_string(from) + " sent parameter '" + name + "' in its place";
  } else if (values != shape_numel(p.shape)) {
    problem = what + ": rank " + std::to_string(from) + " has " + std::to_string(values) + " values, rank " +
              std::to_string(me) + " expects " + std::to_string(shape_numel(p.shape)) + " (shape " +
              shape_to_string(p.shape) + ")";
  }
  // Every process takes part with the root's sizes, whatever it found.
  const size_t count = readable ? static_cast<size_t>(values) : 0;
  std::vector<float> buffer(readable ? count * (1 + slots) : 0);
  if (me == from && readable) {
    std::memcpy(buffer.data(), held.value.data<char>(), count * sizeof(float));
    size_t at = count;
    for (const Tensor& slot : held.slots) {
      if (!slot.defined()) continue;
      copy_bytes(buffer.data() + at, Device::cpu(), slot.data<char>(), slot.device(), count * sizeof(float),
                 "repartition");
      at += count;
    }
  }
  world.broadcast(buffer.data(), buffer.size() * sizeof(float), from, timeout);
  if (me == to_rank && problem.empty()) {
    copy_bytes(p.value.data<char>(), p.value.device(), buffer.data(), Device::cpu(), count * sizeof(float),
               "repartition");
    MemoryCategoryScope scope(MemoryCategory::kOptimizerState);
    size_t at = count;
    for (size_t k = 0; k < slot_names.size(); ++k) {
      if (!((mask >> k) & 1)) continue;
      Tensor slot = Tensor::empty(p.shape);
      std::memcpy(slot.data<char>(), buffer.data() + at, count * sizeof(float));
      to.optimizer().state()[p.name + "/" + slot_names[k]] = slot;
      at += count;
    }
  }
  return problem;
}

// Every process learns the first problem any found: "rank <r> found: <problem>" ("" when none).
std::string agree(comm::World& world, double timeout, const std::string& problem) {
  const char ok = problem.empty() ? 1 : 0;
  const std::vector<char> all = world.all_gather(&ok, 1, timeout);
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r]) continue;
    std::string text = problem;
    comm::broadcast_string(world, &text, static_cast<int>(r), timeout);
    return "rank " + std::to_string(r) + " found: " + text;
  }
  return "";
}

std::string partition_text(const std::vector<int>& layers_per_stage) {
  std::string out;
  for (int n : layers_per_stage) out += (out.empty() ? "" : ",") + std::to_string(n);
  return "{" + out + "}";
}

}  // namespace

void repartition(std::unique_ptr<exec::PipelineTrainer>* trainer, const std::vector<int>& layers_per_stage) {
  PF_CHECK_ARG(trainer && *trainer, "repartition: no trainer");
  TrainingConfig options = (*trainer)->options();
  options.layers_per_stage = layers_per_stage;
  const std::shared_ptr<Model> model = (*trainer)->parts().model;
  Snapshot s = take_snapshot(**trainer);
  // Built before the old one goes, so that *trainer stays a trainer if this throws.
  *trainer = std::make_unique<exec::PipelineTrainer>(model, options);
  exec::PipelineTrainer& to = **trainer;
  const auto& params = model->parameters();
  comm::World* world = options.world.get();
  const double timeout = options.recv_timeout_seconds;
  const std::string move = "repartition to " + partition_text(layers_per_stage) + " at step " + std::to_string(s.step);
  // A World call that fails: this process tells the others (abort) and throws naming what it did.
  auto failed = [&](const Error& e, const std::string& doing) {
    const std::string message = "rank " + std::to_string(world->rank()) + ": " + move + ": " + doing + ": " + e.what();
    world->abort(message);
    return Error(e.code(), message);
  };
  std::string problem;
  for (size_t i = 0; i < params.size(); ++i) {
    Parameter& p = *params[i];
    const int from = s.owner[i], to_rank = to.parts().ownership.owner(&p);
    if (!world || from == to_rank) {
      if (s.held[i].value.defined()) take_held(to, p, s.held[i]);
    } else {
      try {
        const std::string found = move_parameter(*world, timeout, to, p, from, to_rank, s.held[i]);
        if (problem.empty()) problem = found;
      } catch (const Error& e) {
        throw failed(e, "moving parameter '" + p.name + "' from rank " + std::to_string(from) + " to rank " +
                            std::to_string(to_rank));
      }
    }
    s.held[i] = Held();  // what moved away is freed as the move goes
  }
  if (world) {
    std::string agreed;
    try {
      agreed = agree(*world, timeout, problem);
    } catch (const Error& e) {
      throw failed(e, "agreeing that every parameter arrived");
    }
    // Every process throws the same words; the world stays usable.
    if (!agreed.empty()) fail(ErrorCode::kInvalidArgument, move, ": ", agreed);
  }
  to.restore_progress(s.step, s.data_position);
  to.optimizer().set_steps_taken(s.optimizer_steps);
}

}  // namespace pf::plan
