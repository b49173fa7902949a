// Discrete-event timing of a Schedule (lowered or not) under a cost model. Semantics (see
// docs/SCHEDULES.md, "Simulator"):
//
//  * every rank runs its action list strictly in order; an action starts when the rank is free and
//    all its inputs are there;
//  * F(mb, s) needs the output of F(mb, s-1); B(mb, s) and BW(mb, s) need the output gradient from
//    B/BW(mb, s+1) (available when that action *ends*: a fused BW produces its input gradient at its
//    end), and F(mb, s) of the same stage; W(mb, s) needs B(mb, s); RECOMPUTE(mb, s) and OFFLOAD(mb, s)
//    need F(mb, s); RELOAD(mb, s) needs OFFLOAD(mb, s); B/BW(mb, s) also need RECOMPUTE(mb, s) and
//    RELOAD(mb, s) when the schedule has them; STEP(s) and ALLREDUCE(s) need every W/BW of stage s;
//    with seq_slices S > 1, F(u, s) also needs F(u - 1, s) and B/BW(u - 1, s) needs B/BW(u, s) for
//    units u = mb * S + j, j > 0 (same rank: one running later in the list is an error);
//  * a cross-rank dependency is available t_comm after its producer ends; a same-rank one at once;
//  * lowered schedules: SEND_* and RECV_* take zero time. SEND_F(mb, s) needs F(mb, s), SEND_B(mb, s)
//    needs B/BW(mb, s); RECV_F(mb, s) completes at max(rank ready, SEND_F(mb, s-1) + t_comm) and
//    RECV_B(mb, s) at max(rank ready, SEND_B(mb, s+1) + t_comm) (without the matching SEND in the
//    schedule: the producing F/B/BW's end + t_comm), "rank ready" being when the rank reaches it in
//    its list. When the consumer's rank has the RECV, the consumer waits for the RECV (same rank, no
//    extra latency) instead of the producer. By default a RECV is *posted* (irecv-style): the rank
//    goes on with its list and only the consumer waits for the data, so a lowered schedule takes
//    exactly as long as the unlowered one wherever its RECVs sit. With
//    SimulationOptions::blocking_recv the rank itself waits at the RECV until the data is there
//    (a blocking receive), so RECVs placed early in a list can delay unrelated work. These are the
//    rules of SimulationOptions::comm = kRendezvous (the default), under which a RECV is matched only
//    once its SEND has run: RECVs on two ranks that each wait for the other's later SEND deadlock;
//  * SimulationOptions::comm = kPosted (comm_semantics.h; MPI isend/irecv, PyTorch's runtime): a
//    RECV is posted when its rank reaches it, takes no time and waits for nothing; the consumer of its
//    tensor (F for RECV_F, B/BW for RECV_B of the same (mb, stage)) needs the RECV posted earlier on
//    its rank and starts no earlier than the matching SEND's end + t_comm (the producer's end +
//    t_comm when the schedule has no such SEND). The RECV appears in the timeline at the arrival;
//    blocking_recv does not apply;
//  * costs: F = t_f[s], B = t_b[s], W = t_w[s], BW = t_b[s] + t_w[s], RECOMPUTE = t_f[s],
//    OFFLOAD/RELOAD = m_b[s] / transfer_bandwidth (0 when no bandwidth is given), STEP = t_step,
//    ALLREDUCE = t_allreduce_stage[s] (or t_allreduce when that is empty);
//  * tensor parallelism: F and RECOMPUTE add their stage's forward collectives, t_tp_f[s], after
//    their compute (F's output is there at the end, as before: F costs t_f + t_tp_f); B adds the
//    all-reduce of its input gradient, t_tp_b[s], after its compute (B costs t_b + t_tp_b, BW
//    t_b + t_tp_b + t_w with the collective between its B and W parts). The rank waits in these
//    collectives: they are busy time and ideal work, exactly as if they were folded into t_f and
//    t_b. Each is a sub-interval of its action in the timeline (TimedAction::tp, "TP_F"/"TP_B");
//  * SimulationOptions::overlap_tensor_parallel_backward: B's (and BW's) all-reduce runs in the
//    background on the rank's TP lane instead, as Megatron overlaps it with the weight-gradient
//    GEMM: the rank goes on with its list when B's compute ends (BW: B's part, then W's), the
//    input gradient exists only when the collective ends (the consumers of the gradient, SEND_B
//    and the B/BW of the stage before, wait for max(action end, collective end); W, STEP and the
//    rest wait for the compute only). A rank's TP collectives run one after another on its lane:
//    a background one starts at max(B's compute end, lane free), and an F's (or RECOMPUTE's, or a
//    non-overlapped B's) collective waits for the lane too, the rank with it. The rank finishes
//    when its last collective does. Background collectives are neither busy time nor ideal work
//    (SimulationResult::tensor_parallel counts every collective, tensor_parallel_blocking those
//    the rank waited in);
//  * ALLREDUCE runs in the background, as the executor's gradient reducer does: the rank goes on
//    with its list at once; a rank's reductions run one after another; STEP(s) waits for the end
//    of ALLREDUCE(s), and a rank finishes when its last reduction does;
//  * OFFLOAD and RELOAD run in the background too, on the rank's copy lane, as the executor's
//    activation store copies on its copy worker: the rank goes on with its list, a rank's copies
//    run one after another, and the B/BW that needs a RELOAD waits for its end. Neither counts as
//    busy time (nor does ALLREDUCE): busy is the rank's compute.
//
// Deadlocks and unsatisfiable dependencies (a producer that no rank runs, or runs later on the same
// rank, or a cycle between ranks) throw pf::Error (kInvalidArgument) naming the rank, the action
// index and text, and the dependency.
#pragma once

#include <string>
#include <vector>

#include "runtime/schedules/comm_semantics.h"
#include "runtime/schedules/ir.h"
#include "runtime/schedules/timeline.h"

namespace pf::sched {

struct CostModel {
  // Per stage (size = num_stages), in any time unit (the results are in the same unit).
  std::vector<double> t_f;  // one forward of one micro-batch
  std::vector<double> t_b;  // one input-gradient backward (B)
  std::vector<double> t_w;  // one weight-gradient backward (W); BW costs t_b + t_w
  double t_comm = 0.0;      // latency of one cross-rank dependency (activation or gradient)

  // Per stage activation memory (bytes, or any unit): m_b is kept from F until the micro-batch's B
  // (or BW) runs, m_w from B until its W. Empty vectors mean m_b = 1 and m_w = 0 for every stage.
  std::vector<double> m_b;
  std::vector<double> m_w;
  // Per stage: what a recomputed context keeps from F until its RECOMPUTE (the stage input). Empty
  // means 0. Used only for (mb, stage) pairs that have a RECOMPUTE action: their F adds m_in instead
  // of m_b and RECOMPUTE adds m_b - m_in.
  std::vector<double> m_in;

  // Bytes per time unit for OFFLOAD/RELOAD copies (0 = they take no time). Reserved for the
  // transfer-volume model of the offload work; activations/gradients use t_comm.
  double transfer_bandwidth = 0.0;
  double t_step = 0.0;       // STEP and UPDATE
  // Per stage: one HEAD (local learning's auxiliary head: forward, loss and backward); empty = 0.
  std::vector<double> t_head;
  double t_allreduce = 0.0;  // ALLREDUCE
  // Per stage ALLREDUCE time (empty: t_allreduce for every stage), e.g. ring_allreduce_time of
  // the stage's gradient bytes.
  std::vector<double> t_allreduce_stage;
  // Per stage tensor-parallel collectives of one micro-batch (empty = 0 on every stage; see the
  // header comment): t_tp_f the forward ones (F and RECOMPUTE, after the compute, before the
  // output can be sent), t_tp_b the all-reduce of B's input gradient (B and BW).
  std::vector<double> t_tp_f;
  std::vector<double> t_tp_b;

  int num_stages() const { return static_cast<int>(t_f.size()); }
  double mem_b(int stage) const;  // m_b[stage], or 1 when m_b is empty
  double mem_w(int stage) const;  // m_w[stage], or 0 when m_w is empty
  double mem_in(int stage) const; // m_in[stage], or 0 when m_in is empty
  double tp_f(int stage) const;   // t_tp_f[stage], or 0 when t_tp_f is empty
  double tp_b(int stage) const;   // t_tp_b[stage], or 0 when t_tp_b is empty

  // Throws kInvalidArgument unless every per-stage vector has num_stages entries (m_b/m_w may be
  // empty) and every value is finite and >= 0.
  void check(int num_stages) const;

  // The same costs on every stage.
  static CostModel uniform(int num_stages, double t_f = 1.0, double t_b = 1.0, double t_w = 1.0,
                           double t_comm = 0.0, double m_b = 1.0, double m_w = 0.0);
};

// A ring all-reduce of `bytes` over `replicas` members: 2 (D-1)/D x bytes / bandwidth plus
// 2 (D-1) latencies (0 for one replica). bandwidth in bytes per time unit, > 0.
double ring_allreduce_time(double bytes, int replicas, double bandwidth, double latency);

struct SimulationResult {
  // Latest finish over all ranks; the simulation starts at time 0.
  double makespan = 0.0;
  // Ideal (bubble-free) time: max over ranks of sum over the rank's stages of
  // (#F + #B + #W + #HEAD) costs actually in the schedule — for a complete schedule with m micro-batches,
  // m * sum over its stages of (t_f + t_b + t_w). This is the zero-bubble paper's m(T_F+T_B+T_W)
  // generalised to several stages per rank; with unequal ranks the busiest rank sets it. F, B and
  // BW count their blocking TP collectives (t_tp_f, t_tp_b) as work, background ones not.
  double ideal = 0.0;
  // (makespan - ideal) / makespan: the zero-bubble paper's bubble rate.
  double bubble_rate = 0.0;
  // The paper's automatic scheduler measures each stage from its own first start, so a rank's
  // "span" is finish - first start; max_span is the largest and span_bubble_rate = (max_span -
  // ideal) / max_span. For 1F1B-like schedules (rank 0 starts first and ends last) it equals
  // bubble_rate.
  double max_span = 0.0;
  double span_bubble_rate = 0.0;

  // Per rank.
  std::vector<double> busy;         // sum of action durations (SEND/RECV take none; background ALLREDUCEs, copies and
                                    // TP collectives not counted; a blocking TP collective is, its wait for the lane not)
  std::vector<double> idle;         // makespan - busy (includes the start-up and the tail)
  std::vector<double> first_start;  // start of the first action (0 for an empty rank)
  std::vector<double> finish;       // end of the last action or TP collective (0 for an empty rank)
  // Tensor parallelism: the time of the rank's TP collectives (t_tp_f, t_tp_b), all of them, and
  // of it the part the rank waited in (every one without overlap_tensor_parallel_backward; with it
  // the forward ones). 0 without TP costs.
  std::vector<double> tensor_parallel;
  std::vector<double> tensor_parallel_blocking;
  // Peak over the rank's execution of the number of micro-batches whose F ran but whose B/BW has
  // not (summed over the rank's stages; OFFLOAD -1 and RELOAD +1: device-resident only; a partner
  // rank counts the contexts it holds, HOLD +1 and RETURN -1).
  std::vector<int> peak_activations;
  // Peak over time of sum over the rank's stages of (#F-without-B) * m_b + (#B-without-W) * m_w
  // (device-resident only: OFFLOAD -m_b, RELOAD +m_b; a recomputed context holds m_in until its
  // RECOMPUTE; a partner rank holds m_b from HOLD to RETURN). Equal to activation_peak_bytes
  // (activation_policy.h). Both follow activation_delta.
  std::vector<double> peak_activation_bytes;

  // Per-action start/end, in each rank's list order. SEND/RECV appear with zero duration at the time
  // they complete (a posted RECV: when its data arrives, which may be after later actions started).
  Timeline timeline;
};

// How one action changes its rank's device-resident activations, in contexts (micro-batches) and
// bytes (docs/MEMORY.md): F +1 / +m_b (+m_in when `recomputed`: the context of (stage, mb) has a
// RECOMPUTE), RECOMPUTE +(m_b - m_in), B -1 / +(m_w - m_b), W -m_w, BW -1 / -m_b, OFFLOAD and RETURN
// -1 / -m_b, RELOAD and HOLD +1 / +m_b; every other kind 0.
struct ActivationDelta {
  int units = 0;
  double bytes = 0.0;
};
ActivationDelta activation_delta(const Action& action, const CostModel& costs, bool recomputed);

struct SimulationOptions {
  // kRendezvous only: a RECV holds its rank until the data arrives (blocking receive) instead of
  // letting it go on with its list.
  bool blocking_recv = false;
  CommSemantics comm = CommSemantics::kRendezvous;  // see the header comment
  // B's (and BW's) tensor-parallel all-reduce (CostModel::t_tp_b) in the background on the rank's
  // TP lane, the input gradient there at its end (see the header comment); false: the rank waits.
  bool overlap_tensor_parallel_backward = false;
};

SimulationResult simulate(const Schedule& schedule, const CostModel& costs,
                          const SimulationOptions& options = {});

}  // namespace pf::sched
