#include "runtime/schedules/validator.h"

#include "runtime/schedules/dependencies.h"

#include <utility>

#include <algorithm>
#include <sstream>

#include "runtime/core/error.h"
#include "runtime/schedules/action_kinds.h"
#include "runtime/schedules/text_format.h"

namespace pf::sched {
namespace {

std::string act(ActionKind kind, int stage, int mb) {
  return action_to_string(Action{kind, stage, mb});
}

std::string at(const ActionSlot& slot) {
  return "rank " + std::to_string(slot.rank) + ", action " + std::to_string(slot.index);
}

class Checker {
 public:
  Checker(const Schedule& s, const ValidationOptions& options, ValidationReport& report)
      : s_(s), options_(options), report_(report) {}

  void run() {
    check_shape();
    if (!report_.ok()) return;
    report_.lowered = false;
    for (const auto& list : s_.ranks) {
      for (const Action& a : list) report_.lowered = report_.lowered || is_communication(a.kind);
    }
    check_actions();
    if (!report_.ok()) return;
    ActionIndex index(s_);
    check_duplicates(index);
    check_micro_batches(index);
    if (report_.ok() && s_.seq_slices > 1) check_slice_order(index);
    check_stage_actions(index);
    if (!report_.ok()) return;
    if (report_.lowered) check_communication(index);
    if (!report_.ok()) return;
    check_deadlock(index);
    if (!report_.ok()) return;
    add_notes();
  }

  std::vector<GridMark> marks;

 private:
  const Action& action_at(int rank, int index) const {
    return s_.ranks[static_cast<size_t>(rank)][static_cast<size_t>(index)];
  }

  void error(int rank, int index, const std::string& message) {
    if (static_cast<int>(report_.errors.size()) >= ValidationReport::kMaxErrors) {
      ++report_.more_errors;
      return;
    }
    ValidationIssue issue;
    issue.rank = rank;
    issue.index = index;
    if (rank >= 0 && index >= 0) issue.action = action_to_string(action_at(rank, index));
    issue.message = message;
    if (report_.errors.empty() && rank >= 0 && index >= 0) marks.push_back(GridMark{rank, index});
    report_.errors.push_back(std::move(issue));
  }
  void error(const ActionSlot& slot, const std::string& message) {
    error(slot.rank, slot.index, message);
  }
  // The same with the message built only when it is kept (the per-cell checks run millions of
  // times on a large schedule; most messages would be dropped past kMaxErrors).
  template <typename MessageFn, typename = decltype(std::declval<MessageFn&>()())>
  void error(int rank, int index, MessageFn message) {
    if (static_cast<int>(report_.errors.size()) >= ValidationReport::kMaxErrors) {
      ++report_.more_errors;
      return;
    }
    error(rank, index, std::string(message()));
  }
  template <typename MessageFn, typename = decltype(std::declval<MessageFn&>()())>
  void error(const ActionSlot& slot, MessageFn message) {
    error(slot.rank, slot.index, message);
  }

  int S() const { return s_.num_stages(); }
  int M() const { return s_.num_micro_batches; }
  int rank_of(int stage) const { return s_.placement.rank_of(stage); }

  void check_shape() {
    const Placement& p = s_.placement;
    if (p.num_ranks < 1) error(-1, -1, "the placement has " + std::to_string(p.num_ranks) + " ranks");
    if (static_cast<int>(s_.ranks.size()) != p.num_ranks) {
      error(-1, -1,
            "the schedule has " + std::to_string(s_.ranks.size()) + " action lists but the placement has " +
                std::to_string(p.num_ranks) + " ranks");
    }
    if (p.num_stages() < 1) error(-1, -1, "the placement has no stages");
    for (int st = 0; st < p.num_stages(); ++st) {
      const int r = p.stage_to_rank[static_cast<size_t>(st)];
      if (r < 0 || r >= p.num_ranks) {
        error(-1, -1, "stage " + std::to_string(st) + " is placed on rank " + std::to_string(r) +
                          ", outside [0, " + std::to_string(p.num_ranks) + ")");
      }
    }
    if (report_.ok() && !placement_matches_kind(p)) {
      error(-1, -1, std::string("the placement says ") + placement_kind_name(p.kind) +
                        " but its stage->rank map does not follow that formula");
    }
    if (s_.num_micro_batches < 1) {
      error(-1, -1, "num_micro_batches is " + std::to_string(s_.num_micro_batches) +
                        "; a schedule needs at least one");
    }
    if (s_.pipelines < 1 || s_.pipelines > kMaxPipelines) {
      error(-1, -1, "pipelines is " + std::to_string(s_.pipelines) + "; it must be 1 or " + std::to_string(kMaxPipelines));
    } else if (s_.pipelines > 1) {
      if (p.num_stages() % s_.pipelines != 0 || s_.num_micro_batches % s_.pipelines != 0)
        error(-1, -1, "pipelines is " + std::to_string(s_.pipelines) + "; it must divide the stages (" +
                          std::to_string(p.num_stages()) + ") and the micro-batches (" +
                          std::to_string(s_.num_micro_batches) + ")");
      if (s_.seq_slices > 1) error(-1, -1, "pipelines > 1 with seq_slices > 1 is not supported");
    }
    if (s_.seq_slices < 1 || (s_.num_micro_batches >= 1 && s_.num_micro_batches % s_.seq_slices != 0)) {
      error(-1, -1, "seq_slices is " + std::to_string(s_.seq_slices) + "; it must be >= 1 and divide num_micro_batches (" +
                        std::to_string(s_.num_micro_batches) + " units = micro-batches x seq_slices)");
    }
  }

  // Sliced schedules (seq_slices > 1): on its stage's rank, F of slice j of a micro-batch runs after
  // F of slice j - 1 (it reads that slice's keys and values), and the backward of slice j before the
  // backward of slice j - 1 (it adds the gradient of slice j - 1's keys and values).
  void check_slice_order(const ActionIndex& index) {
    for (int st = 0; st < S(); ++st) {
      for (int u = 0; u < M(); ++u) {
        if (s_.slice_of(u) == 0) continue;
        const ActionSlot* f = index.find(ActionKind::kForward, st, u);
        const ActionSlot* f_prev = index.find(ActionKind::kForward, st, u - 1);
        if (f && f_prev && f->index < f_prev->index) {
          error(*f, [&] { return "runs before " + act(ActionKind::kForward, st, u - 1) + " (" + at(*f_prev) +
                                 "): a sequence slice's forward needs the keys and values of the slice before it"; });
        }
        const ActionSlot* b = backward(index, st, u);
        const ActionSlot* b_prev = backward(index, st, u - 1);
        if (b && b_prev && b_prev->index < b->index) {
          const Action& later = action_at(b->rank, b->index);
          error(*b_prev, [&] { return "runs before " + action_to_string(later) + " (" + at(*b) +
                                      "): a sequence slice's backward needs the key/value gradients of the slices "
                                      "after it (backwards run in reverse slice order)"; });
        }
      }
    }
  }

  void check_actions() {
    for (int r = 0; r < static_cast<int>(s_.ranks.size()); ++r) {
      const auto& list = s_.ranks[static_cast<size_t>(r)];
      for (int i = 0; i < static_cast<int>(list.size()); ++i) {
        check_action(r, i, list[static_cast<size_t>(i)]);
        if (list[static_cast<size_t>(i)].overlaps_next) check_overlap(r, i);
      }
    }
  }

  // OVERLAP_F_B: an F and the rank's next compute action, a B or BW.
  void check_overlap(int r, int i) {
    const auto& list = s_.ranks[static_cast<size_t>(r)];
    if (list[static_cast<size_t>(i)].kind != ActionKind::kForward) {
      error(r, i, "only an F can overlap the next backward (OVERLAP_F_B)");
      return;
    }
    const size_t j = next_pass(list, static_cast<size_t>(i));
    if (j == list.size()) {
      error(r, i, "overlaps the next compute action (OVERLAP_F_B), but it is the rank's last");
    } else if (list[j].kind != ActionKind::kBackwardInput && list[j].kind != ActionKind::kBackward) {
      error(r, i, "overlaps the next compute action (OVERLAP_F_B), which must be a B or BW, not " +
                      action_to_string(list[j]));
    }
  }

  void check_action(int r, int i, const Action& a) {
    const int k = static_cast<int>(a.kind);
    if (k < 0 || k >= kNumActionKinds) {
      error(r, i, "unknown action kind " + std::to_string(k));
      return;
    }
    if (a.stage < 0 || a.stage >= S()) {
      error(r, i, "stage " + std::to_string(a.stage) + " is out of range (the schedule has " +
                      std::to_string(S()) + " stages)");
      return;
    }
    if (uses_micro_batch(a.kind)) {
      if (a.micro_batch < 0 || a.micro_batch >= M()) {
        error(r, i, "micro-batch " + std::to_string(a.micro_batch) +
                        " is out of range (the schedule has " + std::to_string(M()) +
                        " micro-batches)");
        return;
      }
      if (s_.pipelines > 1 && s_.pipeline_of_micro_batch(a.micro_batch) != s_.pipeline_of_stage(a.stage)) {
        error(r, i, [&] {
          return "micro-batch " + std::to_string(a.micro_batch) + " belongs to pipeline " +
                 std::to_string(s_.pipeline_of_micro_batch(a.micro_batch)) + " but stage " + std::to_string(a.stage) +
                 " to pipeline " + std::to_string(s_.pipeline_of_stage(a.stage)) + " (each pipeline takes " +
                 std::to_string(s_.micro_batches_per_pipeline()) + " consecutive micro-batches)";
        });
        return;
      }
    } else if (a.micro_batch != -1) {
      error(r, i, std::string(action_kind_name(a.kind)) +
                      " acts on the whole stage: its micro_batch must be -1, not " +
                      std::to_string(a.micro_batch));
      return;
    }
    if (a.kind == ActionKind::kHold || a.kind == ActionKind::kReturn) {
      if (rank_of(a.stage) == r) {
        error(r, i, std::string(action_kind_name(a.kind)) + " runs on a partner rank, but stage " +
                        std::to_string(a.stage) + " is placed on this rank " + std::to_string(r));
      }
      return;
    }
    if (rank_of(a.stage) != r) {
      error(r, i, "stage " + std::to_string(a.stage) + " is placed on rank " +
                      std::to_string(rank_of(a.stage)) + ", not on rank " + std::to_string(r));
      return;
    }
    auto peer = [&](int stage, const char* what) {
      if (stage < 0 || stage >= S() || s_.pipeline_of_stage(stage) != s_.pipeline_of_stage(a.stage)) {
        error(r, i, std::string("stage ") + std::to_string(a.stage) + " has no " + what);
        return;
      }
      if (rank_of(stage) == r) {
        error(r, i, "stages " + std::to_string(std::min(stage, a.stage)) + " and " +
                        std::to_string(std::max(stage, a.stage)) + " are both on rank " +
                        std::to_string(r) +
                        ": data between them is handed over locally, not sent or received");
      }
    };
    const ActionKindInfo& info = action_kind_info(a.kind);
    if (info.action_class == ActionClass::kCommunication) peer(a.stage + info.peer_stage_offset, info.peer_role);
  }

  void check_duplicates(const ActionIndex& index) {
    for (int r = 0; r < static_cast<int>(s_.ranks.size()); ++r) {
      const auto& list = s_.ranks[static_cast<size_t>(r)];
      for (int i = 0; i < static_cast<int>(list.size()); ++i) {
        const auto& occ = index.occurrences(list[static_cast<size_t>(i)].kind,
                                            list[static_cast<size_t>(i)].stage,
                                            list[static_cast<size_t>(i)].micro_batch);
        if (occ.size() > 1 && (occ[0].rank != r || occ[0].index != i)) {
          error(r, i, "duplicate: the same action already runs at " + at(occ[0]));
        }
      }
    }
  }

  // The backward (B, else BW) slot of (mb, stage), or nullptr.
  static const ActionSlot* backward(const ActionIndex& index, int stage, int mb) {
    const ActionSlot* b = index.find(ActionKind::kBackwardInput, stage, mb);
    return b ? b : index.find(ActionKind::kBackward, stage, mb);
  }

  void check_micro_batches(const ActionIndex& index) {
    const int per = s_.micro_batches_per_pipeline();
    for (int st = 0; st < S(); ++st) {
      const int first_mb = s_.first_micro_batch(st);
      for (int mb = first_mb; mb < first_mb + per; ++mb) {
        const ActionSlot* f = index.find(ActionKind::kForward, st, mb);
        const ActionSlot* b = index.find(ActionKind::kBackwardInput, st, mb);
        const ActionSlot* w = index.find(ActionKind::kBackwardWeight, st, mb);
        const ActionSlot* bw = index.find(ActionKind::kBackward, st, mb);
        // Action names, built only for a message that is kept.
        auto F = [&] { return act(ActionKind::kForward, st, mb); };
        auto B = [&] { return act(ActionKind::kBackwardInput, st, mb); };
        auto W = [&] { return act(ActionKind::kBackwardWeight, st, mb); };
        auto BW = [&] { return act(ActionKind::kBackward, st, mb); };
        if (!f) {
          error(rank_of(st), -1, [&] { return "missing " + F() + ": micro-batch " + std::to_string(mb) +
                                     " never runs forward on stage " + std::to_string(st); });
        }
        if (bw) {
          if (b) error(*b, [&] { return "mixes split " + B() + " with fused " + BW() + " (" + at(*bw) + "); use one form"; });
          if (w) error(*w, [&] { return "mixes split " + W() + " with fused " + BW() + " (" + at(*bw) + "); use one form"; });
          if (f && bw->index < f->index) {
            error(*bw, [&] { return "runs before its forward " + F() + " (" + at(*f) + ")"; });
          }
        } else {
          if (!b && !w) {
            error(rank_of(st), -1, [&] { return "missing the backward of micro-batch " + std::to_string(mb) +
                                       " on stage " + std::to_string(st) + ": neither " + B() +
                                       " + " + W() + " nor " + BW(); });
          } else if (!b) {
            error(*w, [&] { return "missing " + B() + ": " + W() + " has no input-gradient backward before it"; });
          } else if (!w) {
            error(*b, [&] { return "missing " + W() + ": the weight gradient of " + B() + " never runs"; });
          }
          if (f && b && b->index < f->index) {
            error(*b, [&] { return "runs before its forward " + F() + " (" + at(*f) + ")"; });
          }
          if (b && w && w->index < b->index) {
            error(*w, [&] { return "runs before its input-gradient backward " + B() + " (" + at(*b) + ")"; });
          } else if (f && w && !b && w->index < f->index) {
            error(*w, [&] { return "runs before its forward " + F() + " (" + at(*f) + ")"; });
          }
        }
        const ActionSlot* back = b ? b : bw;
        auto back_text = [&] { return b ? B() : BW(); };
        auto between = [&](ActionKind kind, const ActionSlot* after, auto after_text) {
          const ActionSlot* x = index.find(kind, st, mb);
          if (!x) return;
          if (after && x->index < after->index) {
            error(*x, [&] { return "runs before " + after_text() + " (" + at(*after) + ")"; });
          } else if (back && x->index > back->index) {
            error(*x, [&] { return "runs after the backward " + back_text() + " (" + at(*back) + ") that needs it"; });
          }
        };
        between(ActionKind::kRecompute, f, F);
        between(ActionKind::kOffload, f, F);
        between(ActionKind::kHead, f, F);
        if (s_.last_in_pipeline(st)) {
          if (const ActionSlot* head = index.find(ActionKind::kHead, st, mb))
            error(*head, [&] { return std::string("the last stage has the model's own loss: it has no local head"); });
        }
        const ActionSlot* off = index.find(ActionKind::kOffload, st, mb);
        const ActionSlot* rel = index.find(ActionKind::kReload, st, mb);
        if (off && !rel) {
          error(*off, [&] { return "offloads activations that are never reloaded (no " +
                          act(ActionKind::kReload, st, mb) + ")"; });
        }
        if (rel && !off) {
          error(*rel, [&] { return "reloads activations that were never offloaded (no " +
                          act(ActionKind::kOffload, st, mb) + ")"; });
        }
        if (off && rel) between(ActionKind::kReload, off, [&] { return act(ActionKind::kOffload, st, mb); });
        check_partner_hold(index, st, mb, off, rel);
      }
    }
  }

  // HOLD/RETURN of (mb, st) (policy balance): both on one partner rank, HOLD first, and only for a
  // context that is offloaded and reloaded.
  void check_partner_hold(const ActionIndex& index, int st, int mb, const ActionSlot* off, const ActionSlot* rel) {
    const ActionSlot* hold = index.find(ActionKind::kHold, st, mb);
    const ActionSlot* ret = index.find(ActionKind::kReturn, st, mb);
    if (!hold && !ret) return;
    const std::string hold_text = act(ActionKind::kHold, st, mb), ret_text = act(ActionKind::kReturn, st, mb);
    if (hold && !ret) error(*hold, [&] { return "keeps activations that it never returns (no " + ret_text + ")"; });
    if (ret && !hold) error(*ret, [&] { return "returns activations that it never received (no " + hold_text + ")"; });
    if (!hold || !ret) return;
    if (ret->rank != hold->rank) {
      error(*ret, [&] { return "must run on the rank that holds the activations (" + hold_text + " is on rank " +
                      std::to_string(hold->rank) + ")"; });
    } else if (ret->index < hold->index) {
      error(*ret, [&] { return "runs before " + hold_text + " (" + at(*hold) + ")"; });
    }
    if (!off || !rel) {
      error(*hold, [&] { return "holds activations of a context that is not offloaded and reloaded (needs " +
                       act(ActionKind::kOffload, st, mb) + " and " + act(ActionKind::kReload, st, mb) + ")"; });
    }
  }

  void check_stage_actions(const ActionIndex& index) {
    for (int st = 0; st < S(); ++st) {
      int last = -1;  // index of the stage's last W/BW on its rank
      std::string last_text;
      for (int mb = 0; mb < M(); ++mb) {
        for (ActionKind k : {ActionKind::kBackwardWeight, ActionKind::kBackward}) {
          const ActionSlot* x = index.find(k, st, mb);
          if (x && x->index > last) {
            last = x->index;
            last_text = act(k, st, mb);
          }
        }
      }
      const ActionSlot* step = index.find(ActionKind::kStep, st, -1);
      const ActionSlot* ar = index.find(ActionKind::kAllReduce, st, -1);
      for (const ActionSlot* x : {ar, step}) {
        if (x && x->index < last) {
          error(*x, "runs before the last weight gradient of stage " + std::to_string(st) + " (" +
                        last_text + ", " + at(ActionSlot{x->rank, last}) + ")");
        }
      }
      if (s_.pipelines > 1 && !ar) {
        error(rank_of(st), -1, "stage " + std::to_string(st) + " has no " + act(ActionKind::kAllReduce, st, -1) +
                                   ": with " + std::to_string(s_.pipelines) +
                                   " pipelines every stage sends its weight gradients to its sibling stage " +
                                   std::to_string(s_.sibling_stage(st)) + " after its last weight gradient");
      }
      if (ar && step && step->index < ar->index) {
        error(*ar, "runs after the optimizer step " + act(ActionKind::kStep, st, -1) + " (" +
                       at(*step) + ")");
      }
      // Asynchronous schedules: UPDATE(mb, st) after that micro-batch's weight gradient, and no
      // STEP on a stage that updates per micro-batch.
      for (int mb = 0; mb < M(); ++mb) {
        const ActionSlot* up = index.find(ActionKind::kUpdate, st, mb);
        if (!up) continue;
        if (step) {
          error(*up, "mixes per-micro-batch updates with the optimizer step " + act(ActionKind::kStep, st, -1) +
                         " (" + at(*step) + "); an asynchronous stage has no STEP");
        }
        const ActionSlot* w = index.find(ActionKind::kBackwardWeight, st, mb);
        if (!w) w = index.find(ActionKind::kBackward, st, mb);
        if (w && up->index < w->index) {
          error(*up, "runs before the weight gradient of micro-batch " + std::to_string(mb) + " on stage " +
                         std::to_string(st) + " (" + at(*w) + ")");
        }
      }
    }
  }

  void check_communication(const ActionIndex& index) {
    const int per = s_.micro_batches_per_pipeline();
    for (int st = 0; st + 1 < S(); ++st) {
      if (s_.last_in_pipeline(st) || rank_of(st) == rank_of(st + 1)) continue;
      const int first_mb = s_.first_micro_batch(st);
      for (int mb = first_mb; mb < first_mb + per; ++mb) {
        // Forward: F(mb, st) -> SEND_F(mb, st) ... RECV_F(mb, st+1) -> F(mb, st+1).
        check_pair(index.find(ActionKind::kForward, st, mb), act(ActionKind::kForward, st, mb),
                   ActionKind::kSendF, st, index.find(ActionKind::kForward, st + 1, mb),
                   ActionKind::kRecvF, st + 1, mb, index, "activation");
        // Local learning: stage st trains on its own head; no gradient may come from st+1.
        if (const ActionSlot* head = index.find(ActionKind::kHead, st, mb)) {
          for (const ActionSlot* x : {index.find(ActionKind::kSendB, st + 1, mb), index.find(ActionKind::kRecvB, st, mb)})
            if (x)
              error(*x, "stage " + std::to_string(st) + " trains on its local head " + act(ActionKind::kHead, st, mb) +
                            " (" + at(*head) + "): no gradient crosses ranks");
          continue;
        }
        // Backward: B/BW(mb, st+1) -> SEND_B(mb, st+1) ... RECV_B(mb, st) -> B/BW(mb, st).
        const ActionSlot* prod = backward(index, st + 1, mb);
        const std::string prod_text =
            index.find(ActionKind::kBackwardInput, st + 1, mb) ? act(ActionKind::kBackwardInput, st + 1, mb)
                                                               : act(ActionKind::kBackward, st + 1, mb);
        check_pair(prod, prod_text, ActionKind::kSendB, st + 1, backward(index, st, mb),
                   ActionKind::kRecvB, st, mb, index, "gradient");
      }
    }
  }

  void check_pair(const ActionSlot* producer, const std::string& producer_text, ActionKind send_kind,
                  int send_stage, const ActionSlot* consumer, ActionKind recv_kind, int recv_stage,
                  int mb, const ActionIndex& index, const char* what) {
    const ActionSlot* send = index.find(send_kind, send_stage, mb);
    const ActionSlot* recv = index.find(recv_kind, recv_stage, mb);
    const std::string send_text = act(send_kind, send_stage, mb);
    const std::string recv_text = act(recv_kind, recv_stage, mb);
    const int send_rank = rank_of(send_stage);
    const int recv_rank = rank_of(recv_stage);
    if (!send && !recv) {
      if (consumer) {
        error(*consumer, std::string("needs the ") + what + " of " + producer_text + " from rank " +
                             std::to_string(send_rank) + " but the lowered schedule has no " +
                             send_text + " / " + recv_text + " pair for it");
      }
      return;
    }
    if (!send) {
      error(*recv, "has no matching " + send_text + " on rank " + std::to_string(send_rank));
      return;
    }
    if (!recv) {
      error(*send, "has no matching " + recv_text + " on rank " + std::to_string(recv_rank));
      return;
    }
    if (producer && send->index < producer->index) {
      error(*send, std::string("sends the ") + what + " before " + producer_text + " (" +
                       at(*producer) + ") produces it");
    }
    if (consumer && recv->index > consumer->index) {
      error(*consumer, std::string("runs before its ") + what + " arrives: " + recv_text +
                           " is at " + at(*recv));
    }
  }

  void check_deadlock(const ActionIndex& index) {
    const int R = static_cast<int>(s_.ranks.size());
    const bool posted = options_.comm == CommSemantics::kPosted;
    const std::vector<int> ptr = progress_until_blocked(s_, index, options_.comm);
    auto len = [&](int r) { return static_cast<int>(s_.ranks[static_cast<size_t>(r)].size()); };
    // Who waits for whom.
    std::vector<int> waits_for(static_cast<size_t>(R), -1);
    std::vector<std::string> why(static_cast<size_t>(R));
    int first = -1;
    for (int r = 0; r < R; ++r) {
      const int p = ptr[static_cast<size_t>(r)];
      if (p >= len(r)) continue;
      if (first < 0) first = r;
      const Action& a = action_at(r, p);
      const ActionSlot* x = nullptr;
      std::string target;
      if (is_communication(a.kind)) {
        PF_INTERNAL_CHECK(!posted, "a posted ", action_to_string(a), " blocked in the deadlock check");
        x = index.find(message_partner(a));
        PF_INTERNAL_CHECK(x != nullptr, "unpaired ", action_to_string(a), " reached the deadlock check");
        target = "waits for rank " + std::to_string(x->rank) + " to post " +
                 action_to_string(message_partner(a)) + " (its action " + std::to_string(x->index) + ")";
      } else {
        const Action dep = *(posted ? posted_waits_for(index, a, r) : waits_for_action(index, a));
        x = index.find(dep);
        PF_INTERNAL_CHECK(x != nullptr, "missing producer of ", action_to_string(a));
        target = std::string(is_communication(dep.kind) ? "waits for the data of " : "waits for ") +
                 action_to_string(dep) + " (rank " + std::to_string(x->rank) + ", action " +
                 std::to_string(x->index) + ")";
      }
      waits_for[static_cast<size_t>(r)] = x->rank;
      const int q = x->rank;
      const int qp = ptr[static_cast<size_t>(q)];
      if (q == r) {
        target += ", which comes later on this rank";
      } else {
        target += ", but rank " + std::to_string(q) + " is blocked at action " +
                  std::to_string(qp) + " (" + action_to_string(action_at(q, qp)) + ")";
      }
      why[static_cast<size_t>(r)] = target;
    }
    if (first < 0) return;
    // Follow the waits from the first blocked rank until a rank repeats: that is the cycle.
    std::vector<int> order;
    std::vector<int> pos(static_cast<size_t>(R), -1);
    int r = first;
    while (pos[static_cast<size_t>(r)] < 0) {
      pos[static_cast<size_t>(r)] = static_cast<int>(order.size());
      order.push_back(r);
      r = waits_for[static_cast<size_t>(r)];
    }
    std::vector<int> cycle(order.begin() + pos[static_cast<size_t>(r)], order.end());
    std::string chain;
    for (int c : cycle) chain += "rank " + std::to_string(c) + " -> ";
    chain += "rank " + std::to_string(cycle.front());
    for (size_t i = 0; i < cycle.size(); ++i) {
      const int c = cycle[i];
      const std::string prefix =
          i == 0 ? "deadlock (" + chain + ", " +
                       (!report_.lowered ? "compute dependencies"
                                         : posted ? "posted send/recv" : "blocking send/recv") +
                       "): "
                 : "deadlock: ";
      error(c, ptr[static_cast<size_t>(c)], prefix + why[static_cast<size_t>(c)]);
      if (i > 0) marks.push_back(GridMark{c, ptr[static_cast<size_t>(c)]});
    }
  }

  void add_notes() {
    for (int st = 0; st < S(); ++st) {
      const std::vector<int> order = weight_gradient_order(s_, st);
      const std::vector<int> reference = reference_weight_gradient_order(s_, st);
      if (order != reference) {
        auto text = [](const std::vector<int>& v) {
          std::string list;
          for (size_t i = 0; i < v.size() && i < 12; ++i) list += (i ? " " : "") + std::to_string(v[i]);
          return v.size() > 12 ? list + " ..." : list;
        };
        report_.notes.push_back("stage " + std::to_string(st) + " accumulates weight gradients out of micro-batch order (" +
                                text(order) + "); bitwise equality with the sequential reference needs " +
                                text(reference));
      }
    }
  }

  const Schedule& s_;
  const ValidationOptions& options_;
  ValidationReport& report_;
};

}  // namespace

std::string ValidationIssue::to_string() const {
  std::string out;
  if (rank >= 0 && index >= 0) {
    out = "rank " + std::to_string(rank) + ", action " + std::to_string(index) + " (" + action + "): ";
  } else if (rank >= 0) {
    out = "rank " + std::to_string(rank) + ": ";
  }
  return out + message;
}

std::string ValidationReport::to_string() const {
  std::ostringstream out;
  if (ok()) {
    out << "ok";
    if (lowered) out << (comm == CommSemantics::kPosted ? " (lowered; deadlock-free with posted send/recv)" : " (lowered)");
    out << '\n';
  } else {
    const size_t n = errors.size() + static_cast<size_t>(more_errors);
    out << n << (n == 1 ? " error" : " errors") << ":\n";
    for (const ValidationIssue& e : errors) out << "  " << e.to_string() << '\n';
    if (more_errors > 0) out << "  ... and " << more_errors << " more\n";
  }
  for (const std::string& n : notes) out << "note: " << n << '\n';
  if (!grid.empty()) out << grid;
  return out.str();
}

ValidationReport validate(const Schedule& schedule, const ValidationOptions& options) {
  ValidationReport report;
  report.comm = options.comm;
  Checker checker(schedule, options, report);
  checker.run();
  if (!report.ok()) report.grid = schedule_grid(schedule, checker.marks);
  return report;
}

void validate_or_throw(const Schedule& schedule, const ValidationOptions& options) {
  const ValidationReport report = validate(schedule, options);
  if (!report.ok()) {
    fail(ErrorCode::kInvalidArgument, "invalid schedule '", schedule.name, "': ", report.to_string());
  }
}

CommSemantics communication_semantics(const Schedule& schedule) {
  const ValidationReport rendezvous = validate(schedule, {CommSemantics::kRendezvous});
  if (rendezvous.ok()) return CommSemantics::kRendezvous;
  if (validate(schedule, {CommSemantics::kPosted}).ok()) return CommSemantics::kPosted;
  fail(ErrorCode::kInvalidArgument, "invalid schedule '", schedule.name, "': ", rendezvous.to_string());
}

ActionIndex::ActionIndex(const Schedule& schedule)
    : stages_(std::max(0, schedule.num_stages())),
      micro_batches_(std::max(0, schedule.num_micro_batches)),
      pipelines_(std::max(1, schedule.pipelines)),
      per_pipeline_(std::max(1, schedule.stages_per_pipeline())) {
  slots_.resize(static_cast<size_t>(kNumActionKinds) * static_cast<size_t>(stages_) *
                (static_cast<size_t>(micro_batches_) + 1));
  for (size_t r = 0; r < schedule.ranks.size(); ++r) {
    const auto& list = schedule.ranks[r];
    for (size_t i = 0; i < list.size(); ++i) {
      const Action& a = list[i];
      const int k = static_cast<int>(a.kind);
      if (k < 0 || k >= kNumActionKinds || a.stage < 0 || a.stage >= stages_ ||
          a.micro_batch < -1 || a.micro_batch >= micro_batches_) {
        continue;
      }
      slots_[key(a.kind, a.stage, a.micro_batch)].push_back(
          ActionSlot{static_cast<int>(r), static_cast<int>(i)});
    }
  }
}

size_t ActionIndex::key(ActionKind kind, int stage, int micro_batch) const {
  return (static_cast<size_t>(kind) * static_cast<size_t>(stages_) + static_cast<size_t>(stage)) *
             (static_cast<size_t>(micro_batches_) + 1) +
         static_cast<size_t>(micro_batch + 1);
}

const std::vector<ActionSlot>& ActionIndex::occurrences(ActionKind kind, int stage,
                                                        int micro_batch) const {
  static const std::vector<ActionSlot> kNone;
  const int k = static_cast<int>(kind);
  if (k < 0 || k >= kNumActionKinds || stage < 0 || stage >= stages_ || micro_batch < -1 ||
      micro_batch >= micro_batches_) {
    return kNone;
  }
  return slots_[key(kind, stage, micro_batch)];
}

const ActionSlot* ActionIndex::find(ActionKind kind, int stage, int micro_batch) const {
  const auto& occ = occurrences(kind, stage, micro_batch);
  return occ.empty() ? nullptr : &occ.front();
}

std::vector<int> progress_until_blocked(const Schedule& schedule, const ActionIndex& index,
                                        CommSemantics comm) {
  const bool posted = comm == CommSemantics::kPosted;
  const int R = static_cast<int>(schedule.ranks.size());
  std::vector<int> ptr(static_cast<size_t>(R), 0);
  auto len = [&](int r) { return static_cast<int>(schedule.ranks[static_cast<size_t>(r)].size()); };
  auto done = [&](const ActionSlot& x) { return ptr[static_cast<size_t>(x.rank)] > x.index; };
  bool progress = true;
  while (progress) {
    progress = false;
    for (int r = 0; r < R; ++r) {
      int& p = ptr[static_cast<size_t>(r)];
      while (p < len(r)) {
        const Action& a = schedule.ranks[static_cast<size_t>(r)][static_cast<size_t>(p)];
        if (is_communication(a.kind) && !posted) {
          const ActionSlot* other = index.find(message_partner(a));
          if (!other || ptr[static_cast<size_t>(other->rank)] != other->index) break;
          ++ptr[static_cast<size_t>(other->rank)];
          ++p;
          progress = true;
          continue;
        }
        const std::optional<Action> dep = posted ? posted_waits_for(index, a, r) : waits_for_action(index, a);
        if (dep) {
          const ActionSlot* x = index.find(*dep);
          if (x && !done(*x)) break;
        }
        ++p;
        progress = true;
      }
    }
  }
  return ptr;
}

std::optional<Action> posted_waits_for(const ActionIndex& index, const Action& action, int rank) {
  if (is_communication(action.kind)) return std::nullopt;  // posted: never blocks
  if (const std::optional<Action> recv = delivering_recv(action)) {
    const ActionSlot* at = index.find(*recv);
    if (at && at->rank == rank) return message_partner(*recv);
  }
  return waits_for_action(index, action);
}

std::optional<Action> waits_for_action(const ActionIndex& index, const Action& action) {
  const int s = action.stage, mb = action.micro_batch;
  switch (action.kind) {
    case ActionKind::kHold:
      return Action{ActionKind::kOffload, s, mb};
    case ActionKind::kReload:
      if (index.find(ActionKind::kReturn, s, mb) != nullptr) return Action{ActionKind::kReturn, s, mb};
      return std::nullopt;
    default:
      return stage_dependency(index, action);
  }
}

std::optional<Action> stage_dependency(const ActionIndex& index, const Action& action) {
  const bool computes = action.kind == ActionKind::kForward || action.kind == ActionKind::kBackwardInput ||
                        action.kind == ActionKind::kBackward || action.kind == ActionKind::kStep;
  if (!computes || action.stage < 0 || action.stage >= index.num_stages()) return std::nullopt;
  // What the action needs in the schedule's compute view (as if unlowered: transfers hidden, so
  // an input comes from its producer), of which the one on another stage, or a local head.
  ScheduleShape shape;
  shape.micro_batches = index.num_micro_batches();
  shape.pipelines = index.pipelines();
  shape.stages_per_pipeline = index.stages_per_pipeline();
  const auto rank_of = [&](ActionKind kind, int stage, int micro_batch) {
    if (is_communication(kind) || stage < 0 || stage >= index.num_stages()) return -1;
    const ActionSlot* x = index.find(kind, stage, micro_batch);
    return x ? x->rank : -1;
  };
  std::optional<Action> out;
  constexpr int kNoRank = -2;  // the action's own rank does not matter here: no RECV is visible
  action_needs(shape, rank_of, kNoRank, action, CommSemantics::kRendezvous, [&](const Action& p) {
    if (!out && (p.kind == ActionKind::kHead || p.stage != action.stage)) out = p;
  });
  return out;
}

std::vector<int> reference_weight_gradient_order(const Schedule& schedule, int stage) {
  const int per = schedule.micro_batches_per_pipeline(), first = schedule.first_micro_batch(stage);
  const int slices = std::max(1, schedule.seq_slices);
  std::vector<int> out;
  for (int mb = first; mb < first + per; mb += slices)
    for (int j = slices; j-- > 0;) out.push_back(mb + j);
  return out;
}

std::vector<int> weight_gradient_order(const Schedule& schedule, int stage) {
  std::vector<int> out;
  for (const auto& list : schedule.ranks) {
    for (const Action& a : list) {
      if (a.stage == stage &&
          (a.kind == ActionKind::kBackwardWeight || a.kind == ActionKind::kBackward)) {
        out.push_back(a.micro_batch);
      }
    }
  }
  return out;
}

}  // namespace pf::sched
