// Makes every cross-rank data transfer explicit (see docs/SCHEDULES.md, "Lowering"):
//   F(mb, s) on rank a, F(mb, s+1) on rank b != a   ->  a: sSEND_Fmb   b: (s+1)RECV_Fmb
//   B/BW(mb, s+1) on rank b, B/BW(mb, s) on rank a   ->  b: (s+1)SEND_Bmb   a: sRECV_Bmb
// Stages on the same rank (V placement, looped with one rank) hand over locally: no SEND/RECV.
//
// Placement of the pairs, and why the result cannot deadlock under blocking (rendezvous) send/recv:
// the unlowered schedule is run on a simulated clock (ranks in order, infinite buffering, every action
// a positive duration). Each transfer becomes one event at the moment its producer finishes; the SEND
// goes into the producer's list and the RECV into the consumer's list at that moment (right after the
// producer; before the consumer, which cannot start earlier). Every rank's lowered list is then a
// subsequence of one global order (by simulated time, ties broken identically on both sides) in which
// each SEND/RECV pair is a single element and every dependency precedes its consumer, so executing
// that order one element at a time completes: no rank ever blocks forever.
#pragma once

#include "runtime/schedules/ir.h"

namespace pf::sched {

// True when the schedule has any SEND/RECV action.
bool is_lowered(const Schedule& schedule);

// Validates the input (throws kInvalidArgument with the validator's report if it is invalid) and
// returns the lowered schedule. Compute actions keep their order on every rank. On an already lowered
// schedule it returns the schedule unchanged if it is a valid lowered schedule, else throws.
Schedule lower_communication(const Schedule& schedule);

}  // namespace pf::sched
