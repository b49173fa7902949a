// "dualpipe-v": DeepSeek's DualPipe folded onto the V placement (PyTorch's ScheduleDualPipeV;
// rank s holds stage s = chunk 0 and stage 2p-1-s = chunk 1). Its steady state pairs the forward of
// one micro-batch on one chunk with the full backward of another on the other chunk — PyTorch's
// OVERLAP_F_B compound action, which its runtime and this executor run back to back (F, then BW):
// the F carries Action::overlaps_next. Rank s, with n micro-batches:
//   1. 2(p-s-1) chunk-0 F
//   2. s+1 x (chunk-0 F, chunk-1 F)
//   3. p-s-1 x (chunk-1 B, the oldest pending W, chunk-1 F)
//   4. n-2p+s+1 x ((chunk-0 F; chunk-1 BW), (chunk-1 F; chunk-0 BW)) — the last rank's first pair
//      is not overlapped, which keeps the same two actions in the same order
//   5. p-s-1 x (chunk-1 BW, (chunk-1 F; chunk-0 BW))
//   6. s+1 x (chunk-1, chunk-0 backward): BW until halfway, then B (odd ranks switch one action
//      earlier than even ones)
//   7. p-s-1 x (the oldest pending W, chunk-0 backward as in 6)
//   8. the pending W's.
// PyTorch needs m >= 2p; for smaller m the order is built for n = 2p and the micro-batches >= m are
// dropped (a micro-batch's actions depend only on its own, so the rest stays valid). Each stage runs
// its BW's before its B's and its W's in B order, so weight gradients accumulate in micro-batch order.
#include <algorithm>
#include <deque>
#include <map>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/schedules/generator_parts.h"
#include "runtime/schedules/generators.h"

namespace pf::sched {
namespace {

class RankOrder {
 public:
  explicit RankOrder(std::vector<Action>& out) : out_(out) {}

  void forward(int stage) { out_.push_back(gen::F(stage, next_f_[stage]++)); }
  // The input-gradient backward, its W queued.
  void backward_input(int stage) {
    const int mb = next_b_[stage]++;
    out_.push_back(gen::B(stage, mb));
    pending_w_.push_back(gen::W(stage, mb));
  }
  void full_backward(int stage) { out_.push_back(gen::BW(stage, next_b_[stage]++)); }
  void backward(int stage, bool split) { split ? backward_input(stage) : full_backward(stage); }
  void oldest_weight() {
    if (pending_w_.empty()) return;
    out_.push_back(pending_w_.front());
    pending_w_.pop_front();
  }
  // OVERLAP_F_B: a forward and a full backward as one compound action, run back to back.
  void overlapped(int forward_stage, int backward_stage) {
    forward(forward_stage);
    out_.back().overlaps_next = true;
    full_backward(backward_stage);
  }
  bool complete(int stage, int n) const {
    return count(next_f_, stage) == n && count(next_b_, stage) == n;
  }
  bool weights_done() const { return pending_w_.empty(); }

 private:
  static int count(const std::map<int, int>& c, int stage) {
    const auto it = c.find(stage);
    return it == c.end() ? 0 : it->second;
  }
  std::vector<Action>& out_;
  std::map<int, int> next_f_, next_b_;
  std::deque<Action> pending_w_;
};

std::vector<Action> dualpipe_v_rank(int p, int n, int r) {
  const int c0 = r, c1 = 2 * p - 1 - r;
  std::vector<Action> ops;
  RankOrder o(ops);
  for (int i = 0; i < 2 * (p - r - 1); ++i) o.forward(c0);
  for (int i = 0; i < r + 1; ++i) {
    o.forward(c0);
    o.forward(c1);
  }
  for (int i = 0; i < p - r - 1; ++i) {
    o.backward_input(c1);
    o.oldest_weight();
    o.forward(c1);
  }
  for (int i = 0; i < n - 2 * p + r + 1; ++i) {
    if (i == 0 && r == p - 1) {  // the last rank's first pair is not overlapped
      o.forward(c0);
      o.full_backward(c1);
    } else {
      o.overlapped(c0, c1);
    }
    o.overlapped(c1, c0);
  }
  for (int i = 0; i < p - r - 1; ++i) {
    o.full_backward(c1);
    o.overlapped(c1, c0);
  }
  const int pairs = r + 1;
  bool split = false;
  for (int i = 0; i < pairs; ++i) {
    if (i == pairs / 2 && r % 2 == 1) split = true;
    o.backward(c1, split);
    if (i == pairs / 2 && r % 2 == 0) split = true;
    o.backward(c0, split);
  }
  for (int i = 0; i < p - r - 1; ++i) {
    o.oldest_weight();
    o.backward(c0, split);
  }
  while (!o.weights_done()) o.oldest_weight();
  PF_INTERNAL_CHECK(o.complete(c0, n) && o.complete(c1, n), "dualpipe-v order incomplete on rank ", r);
  return ops;
}

Schedule dualpipe_v(const GeneratorOptions& o) {
  gen::require_v_chunks("dualpipe-v", o.chunks);
  gen::require_no_reverse("dualpipe-v", o.reverse_backward);
  const int p = o.ranks, m = o.micro_batches;
  const int n = std::max(2 * p, m);
  Schedule s = gen::make_schedule("dualpipe-v", m, Placement::v_shape(p));
  for (int r = 0; r < p; ++r) {
    auto& list = s.ranks[static_cast<size_t>(r)];
    const std::vector<Action> all = dualpipe_v_rank(p, n, r);
    for (size_t i = 0; i < all.size(); ++i) {
      if (all[i].micro_batch >= m) continue;
      list.push_back(all[i]);
      // An overlap whose backward was dropped is a plain F.
      if (all[i].overlaps_next && all[i + 1].micro_batch >= m) list.back().overlaps_next = false;
    }
  }
  gen::add_steps(s);
  return s;
}

// The library is built with alwayslink, so this initialiser runs in every binary that links it.
ScheduleTraits v_shape() {
  ScheduleTraits t;
  t.chunks = ChunkRule::kTwo;
  return t;
}

const bool kRegistered = (register_generator("dualpipe-v", dualpipe_v, v_shape()), true);

}  // namespace
}  // namespace pf::sched
