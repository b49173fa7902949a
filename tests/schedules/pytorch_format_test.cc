// PyTorch's pipeline-schedule CSV: hand-written files shaped like PyTorch's dumps, the meaning of
// each letter, round trips, and the errors.
#include "runtime/schedules/pytorch_format.h"

#include <gtest/gtest.h>

#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/validator.h"
#include "schedule_test_util.h"

namespace pf::sched {
namespace {

using testing::error_of;
using testing::rank_text;

// A schedule without its STEPs (PyTorch's format has none).
Schedule without_steps(Schedule s) {
  for (auto& list : s.ranks)
    list.erase(std::remove_if(list.begin(), list.end(), [](const Action& a) { return a.kind == ActionKind::kStep; }),
               list.end());
  return s;
}

TEST(PytorchCsv, ComputeOnly1f1bWithIdleCells) {
  // Schedule1F1B's compute-only dump, p = 2, m = 2: B is PyTorch's full backward; rank 1 starts idle.
  const PytorchCsv csv = parse_pytorch_csv("0F0,0F1,,0B0,,0B1\n,1F0,1B0,1F1,1B1\n");
  EXPECT_TRUE(csv.dropped.empty());
  const Schedule& s = csv.schedule;
  EXPECT_EQ(s.name, "custom");
  EXPECT_EQ(s.num_micro_batches, 2);
  EXPECT_EQ(s.placement, Placement::one_per_rank(2));
  EXPECT_EQ(rank_text(s, 0), "0F0 0F1 0BW0 0BW1");
  EXPECT_EQ(rank_text(s, 1), "1F0 1BW0 1F1 1BW1");
  EXPECT_EQ(s.ranks, without_steps(generate_schedule("1f1b", {2, 2})).ranks);
  EXPECT_TRUE(validate(s).ok());
}

TEST(PytorchCsv, InputAndWeightGradientsAreBAndW) {
  // A zero-bubble dump: I is the input-gradient backward (our B), W the weight gradient.
  const Schedule s = parse_pytorch_csv("0F0,0F1,0I0,0W0,0I1,0W1\r\n1F0,1I0,1F1,1I1,1W0,1W1\r\n").schedule;
  EXPECT_EQ(rank_text(s, 0), "0F0 0F1 0B0 0W0 0B1 0W1");
  EXPECT_EQ(s.ranks, without_steps(generate_schedule("zb-h1", {2, 2})).ranks);
  EXPECT_EQ(schedule_to_pytorch_csv(generate_schedule("zb-h1", {2, 2}), false),
            "0F0,0F1,0I0,0W0,0I1,0W1\n1F0,1I0,1F1,1I1,1W0,1W1\n");
}

TEST(PytorchCsv, InterleavedPlacementIsInferred) {
  // Interleaved 1F1B by hand, p = 2, v = 2 (stages 0, 2 on rank 0; 1, 3 on rank 1), m = 2.
  const Schedule s = parse_pytorch_csv(
                         "0F0,0F1,2F0,2F1,,,2B0,2B1,0B0,0B1\n"
                         ",1F0,1F1,3F0,3F1,3B0,3B1,1B0,1B1\n")
                         .schedule;
  EXPECT_EQ(s.placement, Placement::looped(2, 2));
  const ValidationReport r = validate(s);
  EXPECT_TRUE(r.ok()) << r.to_string();
}

// PyTorch's runtime lowering with deferred receives, p = 2, m = 2, 1F1B, with the FSDP and gradient
// reduction actions of a compute+comms dump: each rank posts the RECV it needs next before the
// compute its peer's SEND follows (rank 0's 0RECV_B0 before 0F1, rank 1's 1RECV_F1 before 1B0).
constexpr const char* kDeferred1f1b =
    "0UNSHARD,0F0,0SEND_F0,0RECV_B0,0F1,0SEND_F1,0B0,0RECV_B1,0B1,0REDUCE_GRAD,0RESHARD\n"
    "1UNSHARD,1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD,1RESHARD\n";

TEST(PytorchCsv, DeferredReceivesValidateAndSimulatePosted) {
  const PytorchCsv csv = parse_pytorch_csv(kDeferred1f1b);
  ASSERT_EQ(csv.dropped.size(), 4u);
  EXPECT_EQ(csv.dropped[0],
            "line 1 (rank 0), cell 1 '0UNSHARD': an FSDP parameter gather; PipeForge stages keep their whole parameters");
  EXPECT_HAS(csv.dropped[3], "line 2 (rank 1), cell 11 '1RESHARD': an FSDP parameter free");
  const Schedule& s = csv.schedule;
  EXPECT_EQ(rank_text(s, 0), "0F0 0SEND_F0 0RECV_B0 0F1 0SEND_F1 0BW0 0RECV_B1 0BW1 0ALLREDUCE");
  EXPECT_EQ(rank_text(s, 1), "1RECV_F0 1F0 1RECV_F1 1BW0 1SEND_B0 1F1 1BW1 1SEND_B1 1ALLREDUCE");

  const ValidationReport rendezvous = validate(s);
  ASSERT_FALSE(rendezvous.ok());
  EXPECT_HAS(rendezvous.errors[0].message, "deadlock (rank 0 -> rank 1 -> rank 0, blocking send/recv)");
  const ValidationReport posted = validate(s, ValidationOptions{CommSemantics::kPosted});
  EXPECT_TRUE(posted.ok()) << posted.to_string();

  const CostModel c = CostModel::uniform(2, 1.0, 1.0, 1.0, 0.5);
  EXPECT_THROW(simulate(s, c), Error);
  SimulationOptions o;
  o.comm = CommSemantics::kPosted;
  const SimulationResult r = simulate(s, c, o);
  // 0BW0 waits for 1SEND_B0 (4.5) + 0.5; 0BW1 for 1SEND_B1 (7.5) + 0.5, and ends at 10.
  EXPECT_DOUBLE_EQ(r.timeline.ranks[0][5].start, 5.0);
  EXPECT_DOUBLE_EQ(r.makespan, 10.0);
}

// An overlap is its sub-actions in order; a forward then a backward is the compound action ('+').
TEST(PytorchCsv, OverlapIsItsSubActionsInOrder) {
  const Schedule s = parse_pytorch_csv("0F0,0F1,(0F2;0B0)OVERLAP_F_B,0B1,0B2\n").schedule;
  EXPECT_EQ(rank_text(s, 0), "0F0 0F1 0F2+ 0BW0 0BW1 0BW2");
  EXPECT_EQ(rank_text(parse_pytorch_csv("0F0,( 0F1 ; 0I0 )OVERLAP_F_B,0W0,0I1,0W1").schedule, 0),
            "0F0 0F1+ 0B0 0W0 0B1 0W1");
  EXPECT_EQ(schedule_to_pytorch_csv(s, false), "0F0,0F1,(0F2;0B0)OVERLAP_F_B,0B1,0B2\n");
}

TEST(PytorchCsv, QuotedCellsNoneAndTrailingRowsAreTolerated) {
  const Schedule s = parse_pytorch_csv("\"0F0\", None ,\"0B0\"\n\n\n").schedule;
  EXPECT_EQ(s.num_ranks(), 1);
  EXPECT_EQ(rank_text(s, 0), "0F0 0BW0");
}

TEST(PytorchCsv, RoundTripsGeneratedSchedules) {
  for (const char* name : {"gpipe", "1f1b", "zb-h1", "zb-v", "interleaved-1f1b"}) {
    GeneratorOptions o{3, 5};
    if (std::string(name) == "interleaved-1f1b") o.chunks = 2;
    const Schedule gen = generate_schedule(name, o);
    for (const Schedule& s : {gen, lower_communication(gen)}) {
      const Schedule back = parse_pytorch_csv(schedule_to_pytorch_csv(s, true)).schedule;
      EXPECT_EQ(back.ranks, without_steps(s).ranks) << name;
      EXPECT_EQ(back.placement, s.placement) << name;
      EXPECT_EQ(back.num_micro_batches, s.num_micro_batches) << name;
    }
    // Compute-only drops the SEND/RECVs of the lowered form.
    EXPECT_EQ(schedule_to_pytorch_csv(lower_communication(gen), false), schedule_to_pytorch_csv(gen, false)) << name;
  }
}

TEST(PytorchCsv, WritesReduceGradAndCommsOnlyWithComms) {
  Schedule s = parse_pytorch_csv(kDeferred1f1b).schedule;
  EXPECT_EQ(schedule_to_pytorch_csv(s, true),
            "0F0,0SEND_F0,0RECV_B0,0F1,0SEND_F1,0B0,0RECV_B1,0B1,0REDUCE_GRAD\n"
            "1RECV_F0,1F0,1RECV_F1,1B0,1SEND_B0,1F1,1B1,1SEND_B1,1REDUCE_GRAD\n");
  EXPECT_EQ(schedule_to_pytorch_csv(s, false), "0F0,0F1,0B0,0B1\n1F0,1B0,1F1,1B1\n");
  s.ranks[1].insert(s.ranks[1].begin() + 2, parse_action("1RECOMPUTE0"));
  EXPECT_EQ(error_of([&] { schedule_to_pytorch_csv(s, false); }),
            "schedule_to_pytorch_csv: rank 1, action 2 (1RECOMPUTE0): PyTorch's schedule format has no RECOMPUTE");
}

TEST(PytorchCsv, ErrorsNameLineRankCellAndText) {
  auto err = [](const std::string& text) { return error_of([&] { parse_pytorch_csv(text); }); };
  EXPECT_HAS(err("0F0,0F1\n1F0,1X1\n"), "PyTorch CSV line 2 (rank 1), cell 2 '1X1': unknown action type 'X' in '1X1'");
  EXPECT_HAS(err("0F0,0F\n"), "PyTorch CSV line 1 (rank 0), cell 2 '0F': F needs a micro-batch number");
  EXPECT_HAS(err("0F0,0B0,0REDUCE_GRAD0\n"), "cell 3 '0REDUCE_GRAD0': REDUCE_GRAD acts on the whole stage");
  EXPECT_HAS(err("F0\n"), "cell 1 'F0': 'F0' must start with the stage number");
  EXPECT_HAS(err("0F0x\n"), "cell 1 '0F0x': unexpected 'x' after 0F0");
  EXPECT_HAS(err("0F1234567890\n"), "number '1234567890' is too large");
  EXPECT_HAS(err("999999999F0\n"), "stage or micro-batch beyond the limits");
  EXPECT_HAS(err("0F0\n0F1\n"), "PyTorch CSV line 2, cell '0F1': stage 0 appears on rank 0 (line 1) and on rank 1");
  EXPECT_HAS(err("1F0\n"), "PyTorch CSV: stage 0 has no actions on any rank");
  EXPECT_HAS(err("(0F0)OVERLAP_F_B\n"), "cell 1 '(0F0)OVERLAP_F_B': OVERLAP_F_B needs two sub-actions");
  EXPECT_HAS(err("(0F0;0SEND_F0)OVERLAP_F_B\n"), "OVERLAP_F_B overlaps compute actions; 'SEND_F' is not one");
  EXPECT_HAS(err("(0F0;0B0)OVERLAP\n"), "unknown compound type 'OVERLAP'");
  EXPECT_HAS(err("0REDUCE_GRAD\n"), "PyTorch CSV has no per-micro-batch actions");
  EXPECT_HAS(err("0UNSHARD\n"), "PyTorch CSV has no actions");
  EXPECT_HAS(err("\n\n"), "PyTorch CSV has no actions");
}

}  // namespace
}  // namespace pf::sched
