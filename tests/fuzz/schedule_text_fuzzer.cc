// libFuzzer target: the schedule text form and the passes behind it (runtime/schedules).
// Input: schedule text. Oracles, besides "no crash, no exception other than pf::Error":
//  * whatever parse_schedule accepts, schedule_to_text prints, and that text parses back equal;
//  * a schedule the validator rejects is refused by lower_communication;
//  * a schedule it accepts lowers, the lowered schedule validates and round-trips too, lowering is
//    idempotent, and both simulate without error (posted RECVs: the same makespan; blocking RECVs
//    must not deadlock either).
#include <cstddef>
#include <cstdint>
#include <string>

#include "runtime/schedules/lowering.h"
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

void fuzz_one(const std::string& text) {
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
