#include "runtime/schedules/pytorch_format.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include "runtime/core/error.h"
#include "runtime/core/limits.h"
#include "runtime/schedules/text_rows.h"

namespace pf::sched {
namespace {

constexpr const char* kSource = "PyTorch CSV";

// PyTorch's _ComputationType values (torch/distributed/pipelining/schedules.py) and what each one
// is here. OVERLAP_F_B is a container, handled by expand_overlap.
struct PytorchKind {
  const char* name;
  std::optional<ActionKind> kind;  // nullopt: read and dropped
  bool per_micro_batch;
  const char* dropped_because;
};

const PytorchKind kPytorchKinds[] = {
    {"F", ActionKind::kForward, true, nullptr},
    {"I", ActionKind::kBackwardInput, true, nullptr},
    {"W", ActionKind::kBackwardWeight, true, nullptr},
    {"B", ActionKind::kBackward, true, nullptr},
    {"SEND_F", ActionKind::kSendF, true, nullptr},
    {"RECV_F", ActionKind::kRecvF, true, nullptr},
    {"SEND_B", ActionKind::kSendB, true, nullptr},
    {"RECV_B", ActionKind::kRecvB, true, nullptr},
    {"REDUCE_GRAD", ActionKind::kAllReduce, false, nullptr},
    {"UNSHARD", std::nullopt, false, "an FSDP parameter gather; PipeForge stages keep their whole parameters"},
    {"RESHARD", std::nullopt, false, "an FSDP parameter free; PipeForge stages keep their whole parameters"},
};

constexpr const char* kOverlapFB = "OVERLAP_F_B";

const PytorchKind* find_pytorch_kind(const std::string& name) {
  for (const PytorchKind& k : kPytorchKinds)
    if (name == k.name) return &k;
  return nullptr;
}

const char* pytorch_name(ActionKind kind) {
  for (const PytorchKind& k : kPytorchKinds)
    if (k.kind == kind) return k.name;
  return nullptr;
}

// Where a cell is, for messages: "PyTorch CSV line 2 (rank 1), cell 3 '1I0'".
struct CellAt {
  int line;
  int cell;
  const std::string& text;
};

std::string where(const CellAt& at) {
  return std::string(kSource) + " line " + std::to_string(at.line) + " (rank " + std::to_string(at.line - 1) +
         "), cell " + std::to_string(at.cell) + " '" + at.text + "'";
}

// Reads at most 9 digits at text[pos...] into value (-1 when there are none).
void read_digits(const std::string& text, size_t& pos, int& value, const CellAt& at) {
  const size_t begin = pos;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  PF_CHECK_ARG(pos - begin <= 9, where(at), ": number '", text.substr(begin, pos - begin), "' is too large");
  value = pos == begin ? -1 : std::stoi(text.substr(begin, pos - begin));
}

// One simple action `<stage><type>[<micro-batch>]` (no overlap container). Returns nullopt for a kind
// that is dropped, after noting it in `dropped`.
std::optional<Action> parse_simple(const std::string& text, const CellAt& at, std::vector<std::string>& dropped) {
  const char* form = "expected <stage><type>[<micro-batch>], e.g. 0F0, 1I3, 2W1, 0B2, 0SEND_F1, 0UNSHARD";
  size_t pos = 0;
  int stage = -1, mb = -1;
  read_digits(text, pos, stage, at);
  PF_CHECK_ARG(stage >= 0, where(at), ": '", text, "' must start with the stage number (", form, ")");
  const size_t kind_begin = pos;
  while (pos < text.size() && (std::isupper(static_cast<unsigned char>(text[pos])) || text[pos] == '_')) ++pos;
  const std::string kind_text = text.substr(kind_begin, pos - kind_begin);
  const PytorchKind* kind = find_pytorch_kind(kind_text);
  if (!kind) {
    std::string known;
    for (const PytorchKind& k : kPytorchKinds) known += std::string(known.empty() ? "" : ", ") + k.name;
    fail(ErrorCode::kInvalidArgument, where(at), ": unknown action type '", kind_text, "' in '", text,
         "' (PyTorch's: ", known, ", and (...;...)", kOverlapFB, ")");
  }
  read_digits(text, pos, mb, at);
  PF_CHECK_ARG(pos == text.size(), where(at), ": unexpected '", text.substr(pos), "' after ", text.substr(0, pos),
               " (", form, ")");
  if (kind->per_micro_batch) {
    PF_CHECK_ARG(mb >= 0, where(at), ": ", kind_text, " needs a micro-batch number after the type (", form, ")");
  } else {
    PF_CHECK_ARG(mb < 0, where(at), ": ", kind_text, " acts on the whole stage and takes no micro-batch number");
  }
  PF_CHECK_ARG(stage < limits::kMaxStages && mb < limits::kMaxMicroBatches, where(at),
               ": stage or micro-batch beyond the limits (", limits::kMaxStages, " stages, ",
               limits::kMaxMicroBatches, " micro-batches)");
  if (!kind->kind) {
    dropped.push_back("line " + std::to_string(at.line) + " (rank " + std::to_string(at.line - 1) + "), cell " +
                      std::to_string(at.cell) + " '" + text + "': " + kind->dropped_because);
    return std::nullopt;
  }
  return Action{*kind->kind, stage, mb};
}

// `(a;b)OVERLAP_F_B`: the forward and the backward PyTorch's runtime overlaps (dualpipe-v): two
// adjacent actions run one after the other, in the order written; a forward followed by a B or BW
// is the compound action (Action::overlaps_next on the F).
std::vector<Action> expand_overlap(std::vector<Action> sub_actions, const CellAt& at) {
  PF_CHECK_ARG(sub_actions.size() == 2, where(at), ": ", kOverlapFB, " needs two sub-actions (a forward and a "
               "backward), got ", sub_actions.size());
  for (const Action& a : sub_actions) {
    PF_CHECK_ARG(is_compute(a.kind), where(at), ": ", kOverlapFB, " overlaps compute actions; '",
                 pytorch_name(a.kind), "' is not one");
  }
  const ActionKind second = sub_actions[1].kind;
  sub_actions[0].overlaps_next = sub_actions[0].kind == ActionKind::kForward &&
                                 (second == ActionKind::kBackwardInput || second == ActionKind::kBackward);
  return sub_actions;
}

// The actions of one cell: none (idle, dropped), one, or an overlap's sub-actions.
std::vector<Action> parse_cell(const std::string& raw, const CellAt& at, std::vector<std::string>& dropped) {
  std::string text = trim_blanks(raw);
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') text = trim_blanks(text.substr(1, text.size() - 2));
  if (text.empty() || text == "None") return {};
  if (text.front() != '(') {
    const std::optional<Action> a = parse_simple(text, at, dropped);
    return a ? std::vector<Action>{*a} : std::vector<Action>{};
  }
  const size_t close = text.find(')');
  PF_CHECK_ARG(close != std::string::npos, where(at), ": '(' without ')'");
  const std::string type = text.substr(close + 1);
  PF_CHECK_ARG(type == kOverlapFB, where(at), ": unknown compound type '", type, "' (PyTorch's: ", kOverlapFB, ")");
  std::vector<Action> subs;
  const std::string inner = text.substr(1, close - 1);
  size_t pos = 0;
  while (pos <= inner.size()) {
    size_t end = inner.find(';', pos);
    if (end == std::string::npos) end = inner.size();
    const std::string sub = trim_blanks(inner.substr(pos, end - pos));
    PF_CHECK_ARG(!sub.empty(), where(at), ": empty sub-action");
    PF_CHECK_ARG(sub.front() != '(', where(at), ": nested compound actions");
    if (const std::optional<Action> a = parse_simple(sub, at, dropped)) subs.push_back(*a);
    pos = end + 1;
  }
  return expand_overlap(subs, at);
}

}  // namespace

PytorchCsv parse_pytorch_csv(const std::string& text) {
  PF_CHECK_ARG(text.size() <= limits::kMaxScheduleTextBytes, kSource, ": ", text.size(),
               " bytes, more than the limit of ", limits::kMaxScheduleTextBytes);
  PytorchCsv out;
  std::vector<ReadRank> rows;
  size_t pos = 0;
  int line = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    std::string row = text.substr(pos, end - pos);
    if (!row.empty() && row.back() == '\r') row.pop_back();
    pos = end + 1;
    ++line;
    PF_CHECK_ARG(line <= limits::kMaxRanks, kSource, " line ", line, ": more rows (ranks) than the limit of ",
                 limits::kMaxRanks);
    ReadRank rank;
    rank.line = line;
    size_t cell_begin = 0;
    for (int cell = 1;; ++cell) {
      size_t cell_end = row.find(',', cell_begin);
      if (cell_end == std::string::npos) cell_end = row.size();
      const std::string cell_text = trim_blanks(row.substr(cell_begin, cell_end - cell_begin));
      for (const Action& a : parse_cell(cell_text, CellAt{line, cell, cell_text}, out.dropped))
        rank.actions.push_back(ReadAction{a, cell_text});
      if (cell_end == row.size()) break;
      cell_begin = cell_end + 1;
    }
    rows.push_back(std::move(rank));
  }
  // Trailing empty rows are line ends, not ranks.
  while (!rows.empty() && rows.back().actions.empty()) rows.pop_back();
  PF_CHECK_ARG(!rows.empty(), kSource, " has no actions");
  int max_stage = -1, max_mb = -1;
  for (const ReadRank& r : rows) {
    for (const auto& [a, tok] : r.actions) {
      max_stage = std::max(max_stage, a.stage);
      max_mb = std::max(max_mb, a.micro_batch);
    }
  }
  PF_CHECK_ARG(max_mb >= 0, kSource, " has no per-micro-batch actions, so its micro-batch count is unknown");
  check_schedule_size(static_cast<int64_t>(rows.size()), max_stage + 1, max_mb + 1, kSource);
  Schedule& s = out.schedule;
  s.name = "custom";
  s.num_micro_batches = max_mb + 1;
  s.placement = infer_placement(rows, max_stage + 1, kSource, "cell", "");
  s.ranks.resize(rows.size());
  for (size_t r = 0; r < rows.size(); ++r)
    for (const auto& [a, tok] : rows[r].actions) s.ranks[r].push_back(a);
  return out;
}

PytorchCsv read_pytorch_csv_file(const std::string& path) {
  const std::string text = read_schedule_text_file(path);
  try {
    return parse_pytorch_csv(text);
  } catch (const Error& e) {
    fail(e.code(), path, ": ", e.what());
  }
}

std::string schedule_to_pytorch_csv(const Schedule& schedule, bool with_comms) {
  PF_CHECK_ARG(static_cast<int>(schedule.ranks.size()) == schedule.num_ranks(), "schedule_to_pytorch_csv: ",
               schedule.ranks.size(), " action lists for ", schedule.num_ranks(), " ranks");
  PF_CHECK_ARG(schedule.pipelines == 1, "schedule_to_pytorch_csv: schedule '", schedule.name, "' has ",
               schedule.pipelines, " pipelines (two copies of the model), which PyTorch's CSV cannot carry");
  std::string out;
  for (size_t r = 0; r < schedule.ranks.size(); ++r) {
    const std::vector<Action>& list = schedule.ranks[r];
    std::vector<std::string> cells;
    auto cell = [&](size_t i) {
      const Action& a = list[i];
      const char* name = pytorch_name(a.kind);
      PF_CHECK_ARG(name != nullptr, "schedule_to_pytorch_csv: rank ", r, ", action ", i, " (", action_to_string(a),
                   "): PyTorch's schedule format has no ", action_kind_name(a.kind));
      return std::to_string(a.stage) + name + (uses_micro_batch(a.kind) ? std::to_string(a.micro_batch) : "");
    };
    auto written = [&](const Action& a) {
      return a.kind != ActionKind::kStep &&
             (with_comms || !(is_communication(a.kind) || a.kind == ActionKind::kAllReduce));
    };
    for (size_t i = 0; i < list.size(); ++i) {
      if (!written(list[i])) continue;
      if (!list[i].overlaps_next) {
        cells.push_back(cell(i));
        continue;
      }
      // OVERLAP_F_B: the F and its backward in one cell; the transfers between them go around it
      // as PyTorch's lowering puts them, receives before and sends after.
      const size_t j = next_pass(list, i);
      PF_CHECK_ARG(j < list.size(), "schedule_to_pytorch_csv: rank ", r, ", action ", i, " (",
                   action_to_string(list[i]), ") overlaps a next backward that the rank does not have");
      std::vector<std::string> after;
      for (size_t k = i + 1; k < j; ++k) {
        if (!written(list[k])) continue;
        const bool recv = list[k].kind == ActionKind::kRecvF || list[k].kind == ActionKind::kRecvB;
        (recv ? cells : after).push_back(cell(k));
      }
      cells.push_back("(" + cell(i) + ";" + cell(j) + ")" + kOverlapFB);
      cells.insert(cells.end(), after.begin(), after.end());
      i = j;
    }
    for (size_t c = 0; c < cells.size(); ++c) out += (c ? "," : "") + cells[c];
    out += '\n';
  }
  return out;
}

}  // namespace pf::sched
