// libFuzzer target: the schedule text form and the passes behind it (runtime/schedules).
// Input: schedule text. Oracles, besides "no crash, no exception other than pf::Error":
//  * whatever parse_schedule accepts, schedule_to_text prints, and that text parses back equal;
//  * a schedule the validator rejects is refused by lower_communication;
//  * a schedule it accepts lowers, the lowered schedule validates and round-trips too, lowering is
//    idempotent, and both simulate without error (posted RECVs: the same makespan; blocking RECVs
//    must not deadlock either), and the lowered schedule is also deadlock-free under posted
//    communication and simulates there to the same makespan;
//  * whatever parse_pytorch_csv accepts, schedule_to_pytorch_csv writes and that parses back equal;
//    validating and simulating it under posted semantics refuses or succeeds, never crashes.
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/schedules/lowering.h"
#include "runtime/schedules/pytorch_format.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/text_format.h"
#include "runtime/schedules/validator.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using namespace pf::sched;
constexpr const char* kTarget = "schedule_text";

void check_round_trip(const Schedule& s, const std::string& what) {
  const std::string text =
      pf::fuzz::must_succeed(kTarget, what + " parsed/lowered but cannot be printed", [&] { return schedule_to_text(s); });
  const Schedule again =
      pf::fuzz::must_succeed(kTarget, what + " printed but its text does not parse", [&] { return parse_schedule(text); });
  FUZZ_CHECK(kTarget, again == s, what + ": print -> parse is not the same schedule; printed:\n" + text);
}

SimulationOptions posted_comm() {
  SimulationOptions o;
  o.comm = CommSemantics::kPosted;
  return o;
}

void fuzz_pytorch_csv(const std::string& text) {
  PytorchCsv csv;
  try {
    csv = parse_pytorch_csv(text);
  } catch (const pf::Error&) {
    return;
  }
  const std::string out = pf::fuzz::must_succeed(kTarget, "a parsed PyTorch CSV cannot be written",
                                                 [&] { return schedule_to_pytorch_csv(csv.schedule, true); });
  const Schedule again = pf::fuzz::must_succeed(kTarget, "a written PyTorch CSV does not parse",
                                                [&] { return parse_pytorch_csv(out).schedule; });
  FUZZ_CHECK(kTarget, again == csv.schedule, "PyTorch CSV write -> parse is not the same schedule; written:\n" + out);
  const ValidationReport report = validate(csv.schedule, ValidationOptions{CommSemantics::kPosted});
  (void)report.to_string();
  try {
    simulate(csv.schedule, CostModel::uniform(csv.schedule.num_stages(), 1.0, 1.5, 0.5, 0.25), posted_comm());
  } catch (const pf::Error&) {
    FUZZ_CHECK(kTarget, !report.ok(), "the posted simulation refused a schedule valid under posted semantics");
  }
}

void fuzz_one(const std::string& text) {
  fuzz_pytorch_csv(text);
  const Schedule s = parse_schedule(text);
  check_round_trip(s, "schedule");
  (void)schedule_grid(s, {{0, 0}});

  const ValidationReport report = validate(s);
  (void)report.to_string();
  const CostModel costs = CostModel::uniform(s.num_stages(), 1.0, 1.5, 0.5, 0.25);
  if (!report.ok()) {
    bool lowered = false;
    try {
      lower_communication(s);
      lowered = true;
    } catch (const pf::Error&) {
    }
    FUZZ_CHECK(kTarget, !lowered, "lower_communication accepted a schedule the validator rejects:\n" + report.to_string());
    try {
      simulate(s, costs);  // may refuse (deadlock, missing producer), must not crash
    } catch (const pf::Error&) {
    }
    (void)validate(s, ValidationOptions{CommSemantics::kPosted}).to_string();
    try {
      simulate(s, costs, posted_comm());
    } catch (const pf::Error&) {
    }
    return;
  }

  const Schedule lowered =
      pf::fuzz::must_succeed(kTarget, "lowering a valid schedule", [&] { return lower_communication(s); });
  const ValidationReport lowered_report = validate(lowered);
  FUZZ_CHECK(kTarget, lowered_report.ok(), "the lowered schedule is invalid:\n" + lowered_report.to_string());
  check_round_trip(lowered, "lowered schedule");
  FUZZ_CHECK(kTarget, pf::fuzz::must_succeed(kTarget, "lowering again", [&] { return lower_communication(lowered); }) == lowered,
             "lowering a lowered schedule changed it");

  const SimulationResult plain = pf::fuzz::must_succeed(kTarget, "simulating a valid schedule", [&] { return simulate(s, costs); });
  const SimulationResult posted =
      pf::fuzz::must_succeed(kTarget, "simulating the lowered schedule", [&] { return simulate(lowered, costs); });
  FUZZ_CHECK(kTarget, plain.makespan == posted.makespan,
             "lowering changed the makespan: " + std::to_string(plain.makespan) + " vs " + std::to_string(posted.makespan));
  const ValidationReport posted_report = validate(lowered, ValidationOptions{CommSemantics::kPosted});
  FUZZ_CHECK(kTarget, posted_report.ok(),
             "a schedule deadlock-free under rendezvous is not under posted send/recv:\n" + posted_report.to_string());
  const SimulationResult posted_comm_result =
      pf::fuzz::must_succeed(kTarget, "simulating the lowered schedule with posted communication",
                             [&] { return simulate(lowered, costs, posted_comm()); });
  FUZZ_CHECK(kTarget, posted_comm_result.makespan == plain.makespan,
             "posted communication changed the makespan: " + std::to_string(plain.makespan) + " vs " +
                 std::to_string(posted_comm_result.makespan));
  SimulationOptions blocking;
  blocking.blocking_recv = true;
  pf::fuzz::must_succeed(kTarget, "simulating the lowered schedule with blocking RECVs",
                         [&] { return simulate(lowered, costs, blocking); });
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  pf::fuzz::run_input(kTarget, [&] { fuzz_one(text); });
  return 0;
}
