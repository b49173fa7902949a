#include "runtime/schedules/generators.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "runtime/core/suggest.h"
#include "runtime/core/error.h"
#include "runtime/schedules/generator_parts.h"
#include "runtime/core/limits.h"
#include "runtime/schedules/validator.h"

namespace pf::sched {
namespace {

using gen::add_steps;
using gen::B;
using gen::BW;
using gen::F;
using gen::W;

using gen::make_schedule;

// ---- gpipe: all forwards, then all backwards (ascending, so gradients accumulate 0..m-1).
Schedule gpipe(const GeneratorOptions& o) {
  gen::require_one_chunk("gpipe", o.chunks);
  gen::require_no_reverse("gpipe", o.reverse_backward);
  const int p = o.ranks, m = o.micro_batches;
  Schedule s = make_schedule("gpipe", m, Placement::one_per_rank(p));
  for (int r = 0; r < p; ++r) {
    auto& list = s.ranks[static_cast<size_t>(r)];
    for (int i = 0; i < m; ++i) list.push_back(F(r, i));
    for (int i = 0; i < m; ++i) list.push_back(BW(r, i));
  }
  add_steps(s);
  return s;
}

// ---- 1f1b: min(p-s-1, m) warm-up forwards, (F, BW) pairs, the remaining BW.
Schedule one_f_one_b(const GeneratorOptions& o) {
  gen::require_one_chunk("1f1b", o.chunks);
  gen::require_no_reverse("1f1b", o.reverse_backward);
  const int p = o.ranks, m = o.micro_batches;
  Schedule s = make_schedule("1f1b", m, Placement::one_per_rank(p));
  for (int r = 0; r < p; ++r) {
    auto& list = s.ranks[static_cast<size_t>(r)];
    const int warm = std::min(p - r - 1, m);
    for (int i = 0; i < warm; ++i) list.push_back(F(r, i));
    for (int i = 0; i < m - warm; ++i) {
      list.push_back(F(r, warm + i));
      list.push_back(BW(r, i));
    }
    for (int i = m - warm; i < m; ++i) list.push_back(BW(r, i));
  }
  add_steps(s);
  return s;
}

// ---- interleaved-1f1b (Megatron virtual stages).
// Micro-batches go through the chunks in groups: group sizes are p when m % p == 0 (Megatron); one
// group of m when m < p; otherwise floor(m/p) groups as equal as possible, larger first (every group
// >= p; PyTorch's ScheduleInterleaved1F1B makes the same groups when they come out equal, and refuses
// the other cases). The k-th forward runs entry k of the table [group 0 x chunk 0, group 0 x chunk 1,
// ..., group 1 x chunk 0, ...]; the k-th backward runs entry k with the chunk reversed. Warm-up on rank
// s: 2(p-s-1) + (v-1)*g0 forwards (g0 = the first group's size; = p in Megatron's case), capped at v*m.
Schedule interleaved(const GeneratorOptions& o) {
  gen::require_no_reverse("interleaved-1f1b", o.reverse_backward);
  const int p = o.ranks, m = o.micro_batches, v = o.chunks;
  Schedule s = make_schedule("interleaved-1f1b", m, Placement::looped(p, v));
  const std::vector<int> groups = gen::interleave_groups(p, m);
  const std::vector<std::pair<int, int>> table = gen::interleave_table(p, m, v);  // (micro-batch, chunk)
  const int total = v * m;
  for (int r = 0; r < p; ++r) {
    auto& list = s.ranks[static_cast<size_t>(r)];
    const int warm = std::min(2 * (p - r - 1) + (v - 1) * groups.front(), total);
    int fk = 0, bk = 0;
    auto fwd = [&] {
      const auto [mb, c] = table[static_cast<size_t>(fk++)];
      list.push_back(F(c * p + r, mb));
    };
    auto bwd = [&] {
      const auto [mb, c] = table[static_cast<size_t>(bk++)];
      list.push_back(BW((v - 1 - c) * p + r, mb));
    };
    for (int i = 0; i < warm; ++i) fwd();
    for (int i = 0; i < total - warm; ++i) {
      fwd();
      bwd();
    }
    for (int i = 0; i < warm; ++i) bwd();
  }
  add_steps(s);
  return s;
}

// ---- bfs (looped breadth-first): every local chunk ascending, all m forwards; then every local
// chunk descending, all m backwards (0..m-1, or m-1..0 with reverse_backward).
Schedule bfs(const GeneratorOptions& o) {
  const int p = o.ranks, m = o.micro_batches, v = o.chunks;
  Schedule s = make_schedule("bfs", m, Placement::looped(p, v));
  for (int r = 0; r < p; ++r) {
    auto& list = s.ranks[static_cast<size_t>(r)];
    for (int c = 0; c < v; ++c) {
      for (int i = 0; i < m; ++i) list.push_back(F(c * p + r, i));
    }
    for (int c = v - 1; c >= 0; --c) {
      for (int i = 0; i < m; ++i) list.push_back(BW(c * p + r, o.reverse_backward ? m - 1 - i : i));
    }
  }
  add_steps(s);
  return s;
}

// ---- zb-h1 / zb-h2: 1F1B with B and W split. Rank s runs `warm` forwards, then (F, B) pairs and
// the remaining B's; after each B it runs the oldest pending W unless it keeps `defer` pending; the
// pending W's run at the end. W's run in B order, i.e. micro-batch order.
//   zb-h1: warm = min(p-s-1, m), defer = s     (PyTorch's zero-bubble 1F1B rank order for v = 1)
//   zb-h2: warm = min(2(p-s-1), m), defer = 2s (the first B finds 2(p-s)-1 forwards in flight; the
//          last rank ends with 2p-1 W's, which turns the trapezoid into a parallelogram)
Schedule zero_bubble_h(const GeneratorOptions& o, bool h2) {
  const char* name = h2 ? "zb-h2" : "zb-h1";
  gen::require_one_chunk(name, o.chunks);
  gen::require_no_reverse(name, o.reverse_backward);
  const int p = o.ranks, m = o.micro_batches;
  Schedule s = make_schedule(name, m, Placement::one_per_rank(p));
  for (int r = 0; r < p; ++r) {
    auto& list = s.ranks[static_cast<size_t>(r)];
    const int warm = std::min(h2 ? 2 * (p - r - 1) : p - r - 1, m);
    const int defer = h2 ? 2 * r : r;
    int nf = 0, nb = 0, nw = 0;
    for (; nf < warm; ++nf) list.push_back(F(r, nf));
    while (nb < m) {
      if (nf < m) list.push_back(F(r, nf++));
      list.push_back(B(r, nb++));
      if (nb - nw > defer) list.push_back(W(r, nw++));
    }
    while (nw < m) list.push_back(W(r, nw++));
  }
  add_steps(s);
  return s;
}

// ---- zb-v: V placement (rank s holds stage s = chunk 0 and stage 2p-1-s = chunk 1). The order is
// PyTorch's ScheduleZBVZeroBubble: it is built for n = max(2p-1, m) micro-batches and the micro-batches
// >= m are then dropped (removing the same micro-batches everywhere keeps the order valid).
//   warm-up: 2(p-s)-1 chunk-0 F; s x (chunk-1 F, chunk-0 F); (p-s) x (chunk-1 F, B, W)
//   steady:  (chunk-0 F if any left, chunk-0 B, W, chunk-1 F, B, W) until every F ran
//   drain:   s x (chunk-0 B, chunk-1 B); (p-s) x (chunk-0 B, chunk-0 W); remaining chunk-1 W's;
//            remaining chunk-0 W's (W's of a chunk always in micro-batch order)
Schedule zero_bubble_v(const GeneratorOptions& o) {
  gen::require_v_chunks("zb-v", o.chunks);
  gen::require_no_reverse("zb-v", o.reverse_backward);
  const int p = o.ranks, m = o.micro_batches;
  const int n = std::max(2 * p - 1, m);
  Schedule s = make_schedule("zb-v", m, Placement::v_shape(p));
  for (int r = 0; r < p; ++r) {
    const int c0 = r, c1 = 2 * p - 1 - r;
    std::vector<Action> ops;
    int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
    for (int i = 0; i < 2 * (p - r) - 1; ++i) ops.push_back(F(c0, f0++));
    for (int i = 0; i < r; ++i) {
      ops.push_back(F(c1, f1++));
      ops.push_back(F(c0, f0++));
    }
    for (int i = 0; i < p - r; ++i) {
      ops.push_back(F(c1, f1));
      ops.push_back(B(c1, b1));
      ops.push_back(W(c1, b1));
      ++f1;
      ++b1;
    }
    while (f1 < f0 || f0 < n) {
      if (f0 < n) ops.push_back(F(c0, f0++));
      ops.push_back(B(c0, b0));
      ops.push_back(W(c0, b0));
      ++b0;
      ops.push_back(F(c1, f1++));
      ops.push_back(B(c1, b1));
      ops.push_back(W(c1, b1));
      ++b1;
    }
    int w0 = b0, w1 = b1;
    for (int i = 0; i < r; ++i) {
      ops.push_back(B(c0, b0++));
      ops.push_back(B(c1, b1++));
    }
    for (int i = 0; i < p - r; ++i) {
      ops.push_back(B(c0, b0++));
      ops.push_back(W(c0, w0++));
    }
    while (w1 < b1) ops.push_back(W(c1, w1++));
    while (w0 < b0) ops.push_back(W(c0, w0++));
    PF_INTERNAL_CHECK(f0 == n && b0 == n && w0 == n && f1 == n && b1 == n && w1 == n,
                      "zb-v order incomplete on rank ", r);
    auto& list = s.ranks[static_cast<size_t>(r)];
    for (const Action& a : ops) {
      if (a.micro_batch < m) list.push_back(a);
    }
  }
  add_steps(s);
  return s;
}

struct Registry {
  struct Entry {
    GeneratorFn fn;
    ScheduleTraits traits;
    int order = 0;  // registration order (the built-ins first, in the order below)
  };
  std::mutex mu;
  std::map<std::string, Entry> entries;
  Registry() {
    ScheduleTraits looped;
    looped.chunks = ChunkRule::kAny;
    ScheduleTraits v_shape;
    v_shape.chunks = ChunkRule::kTwo;
    entries["gpipe"] = {gpipe, {}, 0};
    entries["1f1b"] = {one_f_one_b, {}, 1};
    entries["interleaved-1f1b"] = {interleaved, looped, 2};
    entries["bfs"] = {bfs, looped, 3};
    entries["zb-h1"] = {[](const GeneratorOptions& o) { return zero_bubble_h(o, false); }, {}, 4};
    entries["zb-h2"] = {[](const GeneratorOptions& o) { return zero_bubble_h(o, true); }, {}, 5};
    entries["zb-v"] = {zero_bubble_v, v_shape, 6};
  }
};

Registry& registry() {
  static Registry r;
  return r;
}

std::string join_names(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string joined_names() { return join_names(generator_names()); }

}  // namespace

void register_generator(const std::string& name, GeneratorFn fn, ScheduleTraits traits) {
  PF_CHECK_ARG(!name.empty(), "register_generator: empty schedule name");
  PF_CHECK_ARG(static_cast<bool>(fn), "register_generator: no function given for '", name, "'");
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  PF_CHECK_ARG(reg.entries.count(name) == 0, "register_generator: schedule '", name,
               "' is already registered");
  reg.entries[name] = {std::move(fn), std::move(traits), static_cast<int>(reg.entries.size())};
}

std::vector<std::string> generator_names() {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  std::vector<std::string> out;
  for (const auto& [name, entry] : reg.entries) out.push_back(name);
  return out;
}

bool has_generator(const std::string& name) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  return reg.entries.count(name) != 0;
}

CostModel UniformCosts::expand(int num_stages) const {
  CostModel c = CostModel::uniform(num_stages, t_f, t_b, t_w, t_comm, m_b, m_w);
  if (t_head > 0) c.t_head.assign(static_cast<size_t>(num_stages), t_head);
  c.check(num_stages);
  return c;
}

bool takes_any_chunks(const std::string& name) {
  return has_generator(name) && schedule_traits(name).chunks == ChunkRule::kAny;
}

ScheduleTraits schedule_traits(const std::string& name) {
  {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    const auto it = reg.entries.find(name);
    if (it != reg.entries.end()) return it->second.traits;
  }
  fail(ErrorCode::kInvalidArgument, "unknown schedule '", name, "'", did_you_mean(name, generator_names()),
       " (known: ", joined_names(), ")");
}

std::vector<std::string> generator_names_where(const std::function<bool(const ScheduleTraits&)>& keep) {
  Registry& reg = registry();
  std::lock_guard<std::mutex> lock(reg.mu);
  std::vector<std::pair<int, std::string>> kept;
  for (const auto& [name, entry] : reg.entries)
    if (keep(entry.traits)) kept.emplace_back(entry.order, name);
  std::sort(kept.begin(), kept.end());
  std::vector<std::string> out;
  for (auto& k : kept) out.push_back(std::move(k.second));
  return out;
}

Schedule generate_schedule(const std::string& name, const GeneratorOptions& opts) {
  GeneratorFn fn;
  ScheduleTraits traits;
  {
    Registry& reg = registry();
    std::lock_guard<std::mutex> lock(reg.mu);
    const auto it = reg.entries.find(name);
    if (it != reg.entries.end()) {
      fn = it->second.fn;
      traits = it->second.traits;
    }
  }
  PF_CHECK_ARG(static_cast<bool>(fn), "unknown schedule '", name, "'", did_you_mean(name, generator_names()),
               " (known: ", joined_names(), ")");
  PF_CHECK_ARG(opts.ranks >= 1, name, ": ranks must be >= 1, got ", opts.ranks);
  PF_CHECK_ARG(opts.micro_batches >= 1, name, ": micro_batches must be >= 1, got ",
               opts.micro_batches);
  PF_CHECK_ARG(opts.chunks >= 0, name, ": chunks must be >= 1 (or 0 for the schedule's default), got ", opts.chunks);
  PF_CHECK_ARG(opts.chunks <= limits::kMaxStages, name, ": chunks must be at most ", limits::kMaxStages, ", got ",
               opts.chunks);
  GeneratorOptions o = opts;
  if (o.chunks == 0) o.chunks = traits.default_chunks();
  PF_CHECK_ARG(o.seq_slices >= 1, name, ": seq_slices must be >= 1, got ", o.seq_slices);
  check_schedule_size(o.ranks, static_cast<int64_t>(o.ranks) * o.chunks,
                      static_cast<int64_t>(o.micro_batches) * o.seq_slices, name);
  PF_CHECK_ARG(traits.slices_sequences || o.seq_slices == 1, name,
               " does not slice sequences: seq_slices must be 1, got ", o.seq_slices, " (",
               join_names(generator_names_where([](const ScheduleTraits& t) { return t.slices_sequences; })),
               " takes seq_slices > 1)");
  PF_CHECK_ARG(o.mem_limit >= 0, name, ": mem_limit must be >= 0 (0 = the schedule's default cap), got ",
               o.mem_limit);
  Schedule s = fn(o);
  if (s.name.empty()) s.name = name;
  s.traits = std::move(traits);
  PF_INTERNAL_CHECK(s.seq_slices == o.seq_slices, "generator '", name, "' made ", s.seq_slices,
                    " sequence slices for seq_slices ", o.seq_slices);
  const ValidationReport report = validate(s);
  PF_INTERNAL_CHECK(report.ok(), "generator '", name, "' (ranks ", o.ranks, ", micro_batches ",
                    o.micro_batches, ", chunks ", o.chunks,
                    ") produced an invalid schedule: ", report.to_string());
  return s;
}

}  // namespace pf::sched
