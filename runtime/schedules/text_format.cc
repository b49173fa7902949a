#include "runtime/schedules/text_format.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "runtime/core/control_characters.h"
#include "runtime/core/error.h"
#include "runtime/core/output_file.h"
#include "runtime/core/limits.h"
#include "runtime/schedules/text_rows.h"

namespace pf::sched {
namespace {

constexpr const char* kMagic = "# pipeforge schedule";
constexpr const char* kVersion = "v1";

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Splits on whitespace and commas; empty fields (",,") are dropped.
std::vector<std::string> split_tokens(const std::string& s) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (c == ',' || std::isspace(static_cast<unsigned char>(c))) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

bool is_uint(const std::string& s) {
  return !s.empty() && s.size() <= 9 &&
         std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

int positive_value(const std::string& key, const std::string& value, int line, int max) {
  PF_CHECK_ARG(is_uint(value) && std::stoi(value) >= 1, "schedule text line ", line, ": ", key,
               " must be a positive integer, got '", value, "'");
  PF_CHECK_ARG(std::stoi(value) <= max, "schedule text line ", line, ": ", key, " ", value,
               " is more than the limit of ", max);
  return std::stoi(value);
}

using RankLine = ReadRank;

struct Header {
  std::optional<std::string> name;
  std::optional<int> ranks, stages, micro_batches, seq_slices, pipelines;
  std::optional<Placement::Kind> placement_kind;
  std::vector<int> custom_map;
  int placement_line = 0;
  std::map<std::string, int> seen;  // key -> line
};

void check_placement_text(const Placement& p) {
  PF_CHECK_ARG(p.num_ranks >= 1, "schedule_to_text: placement has ", p.num_ranks, " ranks");
  PF_CHECK_ARG(p.num_stages() >= 1, "schedule_to_text: placement has no stages");
  PF_CHECK_ARG(placement_matches_kind(p), "schedule_to_text: placement says ",
               placement_kind_name(p.kind), " but its stage->rank map does not follow that formula; "
               "use Placement::custom for an arbitrary map");
}

}  // namespace

std::string schedule_to_text(const Schedule& schedule) {
  const Placement& p = schedule.placement;
  PF_CHECK_ARG(schedule.name.find_first_of("\r\n") == std::string::npos &&
                   trim_blanks(schedule.name) == schedule.name,
               "schedule_to_text: the name '", schedule.name,
               "' has a line break or leading/trailing blanks, which the text form cannot carry");
  check_placement_text(p);
  PF_CHECK_ARG(static_cast<int>(schedule.ranks.size()) == p.num_ranks, "schedule_to_text: ",
               schedule.ranks.size(), " action lists for ", p.num_ranks, " ranks");
  std::ostringstream out;
  out << kMagic << ' ' << kVersion << '\n';
  out << "name:" << (schedule.name.empty() ? "" : " ") << schedule.name << '\n';
  out << "ranks: " << p.num_ranks << '\n';
  out << "stages: " << p.num_stages() << '\n';
  out << "microbatches: " << schedule.num_micro_batches << '\n';
  if (schedule.seq_slices != 1) out << "seq_slices: " << schedule.seq_slices << '\n';
  if (schedule.pipelines != 1) out << "pipelines: " << schedule.pipelines << '\n';
  out << "placement: " << placement_kind_name(p.kind);
  if (p.kind == Placement::Kind::kCustom) {
    for (int r : p.stage_to_rank) out << ' ' << r;
  }
  out << '\n';
  for (size_t r = 0; r < schedule.ranks.size(); ++r) {
    out << "rank " << r << ':';
    for (const Action& a : schedule.ranks[r]) out << ' ' << action_to_string(a);
    out << '\n';
  }
  return out.str();
}

Schedule parse_schedule(const std::string& text) {
  PF_CHECK_ARG(text.size() <= limits::kMaxScheduleTextBytes, "schedule text: ", text.size(),
               " bytes, more than the limit of ", limits::kMaxScheduleTextBytes);
  Header h;
  std::map<int, RankLine> native;  // "rank N:" lines by rank
  std::vector<RankLine> bare;      // PyTorch-style lines in order
  int native_first_line = 0;
  int bare_first_line = 0;

  std::istringstream in(text);
  std::string raw;
  int line_no = 0;
  while (std::getline(in, raw)) {
    ++line_no;
    const std::string t = trim_blanks(raw);
    if (t.empty()) continue;
    if (t[0] == '#') {
      const std::string magic = kMagic;
      if (t.compare(0, magic.size(), magic) == 0) {
        const std::string version = trim_blanks(t.substr(magic.size()));
        PF_CHECK_ARG(version == kVersion, "schedule text line ", line_no,
                     ": unsupported format version '", version, "' (this build reads ", kVersion,
                     ")");
      }
      continue;  // comment
    }
    auto parse_actions = [&](const std::string& body, RankLine& rl) {
      rl.line = line_no;
      for (const std::string& tok : split_tokens(body)) {
        if (tok == "None" || tok == "none" || tok == "_") continue;  // idle slot
        Action a;
        try {
          a = parse_action(tok);
        } catch (const Error& e) {
          fail(ErrorCode::kInvalidArgument, "schedule text line ", line_no, ", token '", tok,
               "': ", e.what());
        }
        PF_CHECK_ARG(a.stage < limits::kMaxStages && a.micro_batch < limits::kMaxMicroBatches,
                     "schedule text line ", line_no, ", token '", tok, "': stage or micro-batch beyond the limits (",
                     limits::kMaxStages, " stages, ", limits::kMaxMicroBatches, " micro-batches)");
        rl.actions.push_back(ReadAction{a, tok});
      }
    };
    const size_t colon = t.find(':');
    if (colon == std::string::npos) {
      if (bare.empty()) bare_first_line = line_no;
      PF_CHECK_ARG(native.empty(), "schedule text line ", line_no,
                   ": a bare action line after 'rank N:' lines (line ", native_first_line,
                   "); use one form throughout");
      RankLine rl;
      parse_actions(t, rl);
      bare.push_back(std::move(rl));
      continue;
    }
    const std::string key = lower(trim_blanks(t.substr(0, colon)));
    const std::string value = trim_blanks(t.substr(colon + 1));
    if (key.compare(0, 4, "rank") == 0 && key != "ranks") {
      const std::string index_text = trim_blanks(key.substr(4));
      PF_CHECK_ARG(is_uint(index_text), "schedule text line ", line_no, ": bad rank label '",
                   trim_blanks(t.substr(0, colon)), "' (expected 'rank <N>:')");
      const int r = std::stoi(index_text);
      PF_CHECK_ARG(r < limits::kMaxRanks, "schedule text line ", line_no, ": rank ", r,
                   " is beyond the limit of ", limits::kMaxRanks, " ranks");
      PF_CHECK_ARG(bare.empty(), "schedule text line ", line_no,
                   ": a 'rank N:' line after bare action lines (line ", bare_first_line,
                   "); use one form throughout");
      PF_CHECK_ARG(native.count(r) == 0, "schedule text line ", line_no, ": rank ", r,
                   " appears twice (first on line ", native.count(r) ? native[r].line : 0, ")");
      if (native.empty()) native_first_line = line_no;
      RankLine rl;
      parse_actions(value, rl);
      native[r] = std::move(rl);
      continue;
    }
    PF_CHECK_ARG(h.seen.count(key) == 0, "schedule text line ", line_no, ": '", key,
                 "' given twice (first on line ", h.seen.count(key) ? h.seen[key] : 0, ")");
    h.seen[key] = line_no;
    if (key == "name") {
      PF_CHECK_ARG(!has_control_character(value), "schedule text line ", line_no,
                   ": the name contains a control character (e.g. a carriage return)");
      h.name = value;
    } else if (key == "ranks") {
      h.ranks = positive_value(key, value, line_no, limits::kMaxRanks);
    } else if (key == "stages") {
      h.stages = positive_value(key, value, line_no, limits::kMaxStages);
    } else if (key == "microbatches" || key == "micro_batches") {
      h.micro_batches = positive_value(key, value, line_no, limits::kMaxMicroBatches);
    } else if (key == "seq_slices") {
      h.seq_slices = positive_value(key, value, line_no, limits::kMaxMicroBatches);
    } else if (key == "pipelines") {
      h.pipelines = positive_value(key, value, line_no, kMaxPipelines);
    } else if (key == "placement") {
      h.placement_line = line_no;
      const std::vector<std::string> words = split_tokens(value);
      PF_CHECK_ARG(!words.empty(), "schedule text line ", line_no,
                   ": placement needs a kind (one-per-rank, looped, v-shape or custom <ranks...>)");
      const std::string kind = lower(words[0]);
      if (kind == "one-per-rank") {
        h.placement_kind = Placement::Kind::kOnePerRank;
      } else if (kind == "looped") {
        h.placement_kind = Placement::Kind::kLooped;
      } else if (kind == "v-shape") {
        h.placement_kind = Placement::Kind::kVShape;
      } else if (kind == "custom") {
        h.placement_kind = Placement::Kind::kCustom;
        PF_CHECK_ARG(words.size() >= 2, "schedule text line ", line_no,
                     ": 'placement: custom' needs the rank of every stage, e.g. custom 0 1 1 0");
        for (size_t i = 1; i < words.size(); ++i) {
          PF_CHECK_ARG(is_uint(words[i]), "schedule text line ", line_no, ", token '", words[i],
                       "': expected the rank (a number) of stage ", i - 1);
          PF_CHECK_ARG(i <= static_cast<size_t>(limits::kMaxStages) && std::stoi(words[i]) < limits::kMaxRanks,
                       "schedule text line ", line_no, ", token '", words[i], "': beyond the limits (",
                       limits::kMaxStages, " stages, ", limits::kMaxRanks, " ranks)");
          h.custom_map.push_back(std::stoi(words[i]));
        }
      } else {
        fail(ErrorCode::kInvalidArgument, "schedule text line ", line_no, ", token '", words[0],
             "': unknown placement (one-per-rank, looped, v-shape or custom <ranks...>)");
      }
      PF_CHECK_ARG(kind == "custom" || words.size() == 1, "schedule text line ", line_no,
                   ", token '", words[1], "': placement ", kind, " takes no stage list");
    } else {
      fail(ErrorCode::kInvalidArgument, "schedule text line ", line_no, ": unknown key '", key,
           "' (known: name, ranks, stages, microbatches, seq_slices, pipelines, placement, rank <N>)");
    }
  }

  // Rank lines, indexed by rank.
  std::vector<RankLine> lines;
  if (!bare.empty()) {
    lines = std::move(bare);
  } else if (!native.empty()) {
    const int max_rank = native.rbegin()->first;
    PF_CHECK_ARG(!h.ranks || max_rank < *h.ranks, "schedule text line ", native.rbegin()->second.line,
                 ": rank ", max_rank, " but the header says ranks: ", h.ranks.value_or(0));
    lines.resize(static_cast<size_t>(max_rank) + 1);
    for (auto& [r, rl] : native) lines[static_cast<size_t>(r)] = std::move(rl);
  }
  PF_CHECK_ARG(!lines.empty() || h.ranks, "schedule text has no rank lines and no 'ranks:' header");
  const int ranks = h.ranks ? *h.ranks : static_cast<int>(lines.size());
  PF_CHECK_ARG(static_cast<int>(lines.size()) <= ranks, "schedule text line ",
               lines.empty() ? 0 : lines.back().line, ": ", lines.size(),
               " rank lines but the header says ranks: ", ranks);
  lines.resize(static_cast<size_t>(ranks));

  // Largest stage and micro-batch seen, with where.
  int max_stage = -1, max_mb = -1;
  for (const RankLine& rl : lines) {
    for (const auto& [a, tok] : rl.actions) {
      max_stage = std::max(max_stage, a.stage);
      max_mb = std::max(max_mb, a.micro_batch);
    }
  }

  // Stage count.
  int stages = 0;
  if (h.stages) {
    stages = *h.stages;
  } else if (h.placement_kind == Placement::Kind::kCustom) {
    stages = static_cast<int>(h.custom_map.size());
  } else if (h.placement_kind == Placement::Kind::kOnePerRank) {
    stages = ranks;
  } else if (h.placement_kind == Placement::Kind::kVShape) {
    stages = 2 * ranks;
  } else {
    stages = max_stage + 1;
  }
  PF_CHECK_ARG(stages >= 1, "schedule text has no actions and no 'stages:' header");
  PF_CHECK_ARG(stages <= limits::kMaxStages, "schedule text: ", stages, " stages, more than the limit of ",
               limits::kMaxStages);
  const int micro_batches = h.micro_batches ? *h.micro_batches : max_mb + 1;
  // Sizes first (a missing micro-batch count is reported below, after the placement's errors).
  check_schedule_size(ranks, stages, std::max(micro_batches, 1), "schedule text");
  for (const RankLine& rl : lines) {
    for (const auto& [a, tok] : rl.actions) {
      PF_CHECK_ARG(a.stage < stages, "schedule text line ", rl.line, ", token '", tok, "': stage ",
                   a.stage, " is out of range (stages: ", stages, ")");
    }
  }

  // Placement: stated or inferred.
  Placement placement;
  if (h.placement_kind) {
    const int pl = h.placement_line;
    switch (*h.placement_kind) {
      case Placement::Kind::kOnePerRank:
        PF_CHECK_ARG(stages == ranks, "schedule text line ", pl,
                     ": placement one-per-rank needs stages == ranks (stages: ", stages,
                     ", ranks: ", ranks, ")");
        placement = Placement::one_per_rank(ranks);
        break;
      case Placement::Kind::kLooped:
        PF_CHECK_ARG(stages % ranks == 0, "schedule text line ", pl,
                     ": placement looped needs stages to be a multiple of ranks (stages: ", stages,
                     ", ranks: ", ranks, ")");
        placement = Placement::looped(ranks, stages / ranks);
        break;
      case Placement::Kind::kVShape:
        PF_CHECK_ARG(stages == 2 * ranks, "schedule text line ", pl,
                     ": placement v-shape needs stages == 2 * ranks (stages: ", stages, ", ranks: ",
                     ranks, ")");
        placement = Placement::v_shape(ranks);
        break;
      case Placement::Kind::kCustom:
        PF_CHECK_ARG(static_cast<int>(h.custom_map.size()) == stages, "schedule text line ", pl,
                     ": custom placement lists ", h.custom_map.size(), " ranks for ", stages,
                     " stages");
        for (size_t s = 0; s < h.custom_map.size(); ++s) {
          PF_CHECK_ARG(h.custom_map[s] < ranks, "schedule text line ", pl, ", token '",
                       h.custom_map[s], "': stage ", s, " placed on rank ", h.custom_map[s],
                       " but ranks: ", ranks);
        }
        placement = Placement::custom(ranks, h.custom_map);
        break;
    }
  } else {
    placement = infer_placement(lines, stages, "schedule text", "token", "; add a 'placement:' line");
  }

  for (const RankLine& rl : lines) {
    for (const auto& [a, tok] : rl.actions) {
      PF_CHECK_ARG(a.micro_batch < micro_batches, "schedule text line ", rl.line, ", token '", tok,
                   "': micro-batch ", a.micro_batch, " is out of range (microbatches: ",
                   micro_batches, ")");
    }
  }

  PF_CHECK_ARG(micro_batches >= 1,
               "schedule text has no per-micro-batch actions and no 'microbatches:' header");
  Schedule out;
  out.name = h.name ? *h.name : "custom";
  out.num_micro_batches = micro_batches;
  out.seq_slices = h.seq_slices.value_or(1);
  out.pipelines = h.pipelines.value_or(1);
  out.placement = std::move(placement);
  out.ranks.resize(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    for (auto& [a, tok] : lines[static_cast<size_t>(r)].actions) {
      out.ranks[static_cast<size_t>(r)].push_back(a);
    }
  }
  return out;
}

Schedule read_schedule_file(const std::string& path) {
  const std::string text = read_schedule_text_file(path);
  try {
    return parse_schedule(text);
  } catch (const Error& e) {
    fail(e.code(), path, ": ", e.what());
  }
}

void write_schedule_file(const Schedule& schedule, const std::string& path) {
  const std::string text = schedule_to_text(schedule);
  write_output_file(path, text, "schedule file");
}

std::string schedule_grid(const Schedule& schedule, const std::vector<GridMark>& marks,
                          int max_slots) {
  const int ranks = static_cast<int>(schedule.ranks.size());
  int slots = 0;
  for (const auto& list : schedule.ranks) slots = std::max(slots, static_cast<int>(list.size()));
  max_slots = std::max(max_slots, 4);
  int lo = 0;
  int hi = slots;
  if (slots > max_slots) {
    int center = 0;
    for (const GridMark& m : marks) {
      if (m.index >= 0) {
        center = m.index;
        break;
      }
    }
    lo = std::clamp(center - max_slots / 2, 0, slots - max_slots);
    hi = lo + max_slots;
  }
  auto marked = [&](int r, int i) {
    for (const GridMark& m : marks) {
      if (m.rank == r && m.index == i) return true;
    }
    return false;
  };
  auto cell = [&](int r, int i) -> std::string {
    const auto& list = schedule.ranks[static_cast<size_t>(r)];
    if (i >= static_cast<int>(list.size())) return "";
    const std::string t = action_to_string(list[static_cast<size_t>(i)]);
    return marked(r, i) ? "[" + t + "]" : t;
  };
  size_t width = 3;
  for (int r = 0; r < ranks; ++r) {
    for (int i = lo; i < hi; ++i) width = std::max(width, cell(r, i).size());
  }
  std::string label_slot = "slot";
  size_t label_width = label_slot.size();
  for (int r = 0; r < ranks; ++r) {
    const std::string label = "rank " + std::to_string(r);
    bool has_mark = false;
    for (const GridMark& m : marks) has_mark = has_mark || (m.rank == r);
    label_width = std::max(label_width, label.size() + (has_mark ? 2 : 0));
  }
  auto pad_left = [](const std::string& s, size_t w) {
    return s.size() >= w ? s : std::string(w - s.size(), ' ') + s;
  };
  auto pad_right = [](const std::string& s, size_t w) {
    return s.size() >= w ? s : s + std::string(w - s.size(), ' ');
  };
  std::ostringstream out;
  auto row = [&](const std::string& label, auto&& text_of) {
    std::string line = pad_right(label, label_width) + " |";
    if (lo > 0) line += " ...";
    for (int i = lo; i < hi; ++i) line += " " + pad_left(text_of(i), width);
    if (hi < slots) line += " ...";
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << '\n';
  };
  row(label_slot, [](int i) { return std::to_string(i); });
  for (int r = 0; r < ranks; ++r) {
    bool has_mark = false;
    for (const GridMark& m : marks) has_mark = has_mark || (m.rank == r);
    row((has_mark ? "> rank " : "rank ") + std::to_string(r), [&](int i) { return cell(r, i); });
  }
  return out.str();
}

}  // namespace pf::sched
