// What a SEND/RECV pair means (see docs/SCHEDULES.md, "Communication semantics"). The validator's
// deadlock analysis and the simulator take one of these; both default to kRendezvous.
//
//  * kRendezvous: a SEND and its RECV complete together, each blocking its rank until the other is
//    reached. A schedule that is deadlock-free under it is deadlock-free under every buffering.
//  * kPosted: MPI isend/irecv, NCCL and PyTorch's pipelining runtime. A SEND never blocks (its data
//    is buffered); a RECV is posted when its rank reaches it and does not block; the compute action
//    that consumes the received tensor (F of (mb, stage) for RECV_F, B/BW of (mb, stage) for RECV_B)
//    waits until the peer has run the matching SEND (and, in the simulator, the transfer is over).
//    PyTorch's lowering with deferred receives posts a RECV before the compute it overlaps, which can
//    make RECVs on two ranks wait for each other's SENDs: a deadlock under kRendezvous, fine here.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/schedules/ir.h"

namespace pf::sched {

enum class CommSemantics { kRendezvous, kPosted };

// "rendezvous", "posted".
const char* comm_semantics_name(CommSemantics comm);
// Both names, rendezvous first.
const std::vector<std::string>& comm_semantics_names();
// Reads "rendezvous" or "posted"; throws kInvalidArgument naming the text otherwise.
CommSemantics parse_comm_semantics(const std::string& text);

// The SEND/RECV partner of a communication action (SEND_F(mb, s) <-> RECV_F(mb, s+1),
// SEND_B(mb, s) <-> RECV_B(mb, s-1)), from the action kind table.
Action message_partner(const Action& communication);

// The RECV whose tensor `consumer` uses: RECV_F(mb, s) for F(mb, s), RECV_B(mb, s) for B(mb, s) and
// BW(mb, s); nullopt for every other kind. Under kPosted the consumer waits for its partner SEND.
std::optional<Action> delivering_recv(const Action& consumer);

}  // namespace pf::sched
