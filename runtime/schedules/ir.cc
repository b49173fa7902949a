#include "runtime/schedules/ir.h"

#include <cctype>
#include <ostream>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/core/limits.h"
#include "runtime/schedules/action_kinds.h"

namespace pf::sched {
namespace {


bool valid_kind(ActionKind kind) {
  const int k = static_cast<int>(kind);
  return k >= 0 && k < kNumActionKinds;
}

std::string known_kinds() {
  std::string out;
  for (int k = 0; k < kNumActionKinds; ++k) {
    if (k > 0) out += ", ";
    out += action_kind_info(static_cast<ActionKind>(k)).name;
  }
  return out;
}

// Reads a run of decimal digits at text[pos...]; returns false when there is none. Fails on values
// that do not fit an int (more than 9 digits).
bool read_number(const std::string& text, size_t& pos, int& value) {
  const size_t begin = pos;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos == begin) return false;
  PF_CHECK_ARG(pos - begin <= 9, "invalid action '", text, "': number '",
               text.substr(begin, pos - begin), "' is too large");
  value = std::stoi(text.substr(begin, pos - begin));
  return true;
}

}  // namespace

const char* action_kind_name(ActionKind kind) {
  return valid_kind(kind) ? action_kind_info(kind).name : "?";
}

bool is_compute(ActionKind kind) {
  return valid_kind(kind) && action_kind_info(kind).action_class == ActionClass::kCompute;
}

bool is_pass(ActionKind kind) { return is_compute(kind) && kind != ActionKind::kRecompute; }

size_t next_pass(const std::vector<Action>& list, size_t i) {
  size_t j = i + 1;
  while (j < list.size() && !is_pass(list[j].kind)) ++j;
  return j;
}

bool is_background_copy(ActionKind kind) { return kind == ActionKind::kOffload || kind == ActionKind::kReload; }

bool is_communication(ActionKind kind) {
  return valid_kind(kind) && action_kind_info(kind).action_class == ActionClass::kCommunication;
}

bool uses_micro_batch(ActionKind kind) { return !valid_kind(kind) || action_kind_info(kind).per_micro_batch; }

std::string action_to_string(const Action& action) {
  std::string out = std::to_string(action.stage);
  if (valid_kind(action.kind)) {
    out += action_kind_info(action.kind).name;
  } else {
    out += "?KIND" + std::to_string(static_cast<int>(action.kind)) + "?";
  }
  // Never throws: the validator prints malformed actions too (a per-micro-batch kind with mb -1
  // prints as "0F-1", which parse_action rejects).
  if (!valid_kind(action.kind) || uses_micro_batch(action.kind) || action.micro_batch != -1) {
    out += std::to_string(action.micro_batch);
  }
  if (action.overlaps_next) out += '+';
  return out;
}

Action parse_action(const std::string& text) {
  const char* form = "expected <stage><KIND><micro-batch>, e.g. 2F0, 1B3, 3BW1, 1SEND_F2, 0STEP";
  size_t pos = 0;
  Action action;
  PF_CHECK_ARG(read_number(text, pos, action.stage), "invalid action '", text,
               "': it must start with the stage number (", form, ")");
  const size_t kind_begin = pos;
  while (pos < text.size() &&
         (std::isupper(static_cast<unsigned char>(text[pos])) || text[pos] == '_')) {
    ++pos;
  }
  const std::string kind_text = text.substr(kind_begin, pos - kind_begin);
  PF_CHECK_ARG(!kind_text.empty(), "invalid action '", text, "': no action kind after the stage (",
               form, ")");
  int kind = -1;
  for (int k = 0; k < kNumActionKinds; ++k) {
    if (kind_text == action_kind_info(static_cast<ActionKind>(k)).name) kind = k;
  }
  PF_CHECK_ARG(kind >= 0, "invalid action '", text, "': unknown kind '", kind_text,
               "' (known: ", known_kinds(), ")");
  action.kind = static_cast<ActionKind>(kind);
  if (uses_micro_batch(action.kind)) {
    PF_CHECK_ARG(read_number(text, pos, action.micro_batch), "invalid action '", text, "': ",
                 kind_text, " needs a micro-batch number after the kind (", form, ")");
  } else {
    action.micro_batch = -1;
    PF_CHECK_ARG(pos == text.size() || !std::isdigit(static_cast<unsigned char>(text[pos])),
                 "invalid action '", text, "': ", kind_text,
                 " acts on the whole stage and takes no micro-batch number");
  }
  if (pos + 1 == text.size() && text[pos] == '+') {
    PF_CHECK_ARG(action.kind == ActionKind::kForward, "invalid action '", text,
                 "': '+' (one compound action with the next backward, OVERLAP_F_B) applies to an F only");
    action.overlaps_next = true;
    ++pos;
  }
  PF_CHECK_ARG(pos == text.size(), "invalid action '", text, "': unexpected '", text.substr(pos),
               "' after ", text.substr(0, pos), " (", form, ")");
  return action;
}

void check_schedule_size(int64_t ranks, int64_t stages, int64_t micro_batches, const std::string& where) {
  PF_CHECK_ARG(ranks >= 1 && ranks <= limits::kMaxRanks, where, ": ranks must be in [1, ", limits::kMaxRanks,
               "], got ", ranks);
  PF_CHECK_ARG(stages >= 1 && stages <= limits::kMaxStages, where, ": stages (ranks x chunks) must be in [1, ",
               limits::kMaxStages, "], got ", stages);
  PF_CHECK_ARG(micro_batches >= 1 && micro_batches <= limits::kMaxMicroBatches, where,
               ": micro-batches must be in [1, ", limits::kMaxMicroBatches, "], got ", micro_batches);
  PF_CHECK_ARG(stages * micro_batches <= limits::kMaxScheduleCells, where, ": stages x micro-batches = ", stages,
               " x ", micro_batches, " is more than the limit of ", limits::kMaxScheduleCells);
}

std::vector<int> Placement::stages_of(int rank) const {
  std::vector<int> out;
  for (int s = 0; s < num_stages(); ++s) {
    if (stage_to_rank[static_cast<size_t>(s)] == rank) out.push_back(s);
  }
  return out;
}

Placement Placement::one_per_rank(int ranks) {
  PF_CHECK_ARG(ranks >= 1, "one-per-rank placement needs at least one rank, got ", ranks);
  Placement p;
  p.kind = Kind::kOnePerRank;
  p.num_ranks = ranks;
  for (int s = 0; s < ranks; ++s) p.stage_to_rank.push_back(s);
  return p;
}

Placement Placement::looped(int ranks, int chunks) {
  PF_CHECK_ARG(ranks >= 1, "looped placement needs at least one rank, got ", ranks);
  PF_CHECK_ARG(chunks >= 1, "looped placement needs at least one chunk per rank, got ", chunks);
  Placement p;
  p.kind = Kind::kLooped;
  p.num_ranks = ranks;
  for (int s = 0; s < ranks * chunks; ++s) p.stage_to_rank.push_back(s % ranks);
  return p;
}

Placement Placement::v_shape(int ranks) {
  PF_CHECK_ARG(ranks >= 1, "v-shape placement needs at least one rank, got ", ranks);
  Placement p;
  p.kind = Kind::kVShape;
  p.num_ranks = ranks;
  for (int s = 0; s < 2 * ranks; ++s) p.stage_to_rank.push_back(s < ranks ? s : 2 * ranks - 1 - s);
  return p;
}

Placement Placement::custom(int ranks, std::vector<int> stage_to_rank) {
  PF_CHECK_ARG(ranks >= 1, "custom placement needs at least one rank, got ", ranks);
  PF_CHECK_ARG(!stage_to_rank.empty(), "custom placement needs at least one stage");
  for (size_t s = 0; s < stage_to_rank.size(); ++s) {
    PF_CHECK_ARG(stage_to_rank[s] >= 0 && stage_to_rank[s] < ranks, "custom placement: stage ", s,
                 " is placed on rank ", stage_to_rank[s], ", outside [0, ", ranks, ")");
  }
  Placement p;
  p.kind = Kind::kCustom;
  p.num_ranks = ranks;
  p.stage_to_rank = std::move(stage_to_rank);
  return p;
}

const char* placement_kind_name(Placement::Kind kind) {
  switch (kind) {
    case Placement::Kind::kOnePerRank:
      return "one-per-rank";
    case Placement::Kind::kLooped:
      return "looped";
    case Placement::Kind::kVShape:
      return "v-shape";
    case Placement::Kind::kCustom:
      return "custom";
  }
  return "?";
}

namespace {

// The map `kind`'s formula gives, or an empty vector where the formula does not apply.
std::vector<int> formula_map(Placement::Kind kind, int ranks, int stages) {
  if (ranks < 1 || stages < 1) return {};
  switch (kind) {
    case Placement::Kind::kOnePerRank:
      if (stages != ranks) return {};
      return Placement::one_per_rank(ranks).stage_to_rank;
    case Placement::Kind::kLooped:
      if (stages % ranks != 0) return {};
      return Placement::looped(ranks, stages / ranks).stage_to_rank;
    case Placement::Kind::kVShape:
      if (stages != 2 * ranks) return {};
      return Placement::v_shape(ranks).stage_to_rank;
    case Placement::Kind::kCustom:
      return {};
  }
  return {};
}

}  // namespace

Placement::Kind classify_placement(int ranks, const std::vector<int>& stage_to_rank) {
  const int stages = static_cast<int>(stage_to_rank.size());
  for (Placement::Kind kind :
       {Placement::Kind::kOnePerRank, Placement::Kind::kLooped, Placement::Kind::kVShape}) {
    const std::vector<int> map = formula_map(kind, ranks, stages);
    if (!map.empty() && map == stage_to_rank) return kind;
  }
  return Placement::Kind::kCustom;
}

bool placement_matches_kind(const Placement& placement) {
  if (placement.kind == Placement::Kind::kCustom) return true;
  const std::vector<int> map =
      formula_map(placement.kind, placement.num_ranks, placement.num_stages());
  return !map.empty() && map == placement.stage_to_rank;
}

bool operator==(const Placement& a, const Placement& b) {
  return a.kind == b.kind && a.num_ranks == b.num_ranks && a.stage_to_rank == b.stage_to_rank;
}

bool operator==(const Schedule& a, const Schedule& b) {
  return a.name == b.name && a.num_micro_batches == b.num_micro_batches && a.seq_slices == b.seq_slices &&
         a.pipelines == b.pipelines && a.placement == b.placement && a.ranks == b.ranks;
}

std::ostream& operator<<(std::ostream& out, const Action& action) {
  return out << action_to_string(action);
}

}  // namespace pf::sched
