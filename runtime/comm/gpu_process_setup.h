// One GPU per process (docs/CUDA.md, "GPU ranks in separate processes"): which CUDA device a process
// of a launch uses, where every rank of a pipeline world runs, which NCCL channels the ranks need,
// and the channels' ids handed from rank 0 to every process. No CUDA or NCCL type in here: the
// resolver (runtime/run/resolve.cc) and the CUDA backend's NcclProcessTransport call these, and the
// CPU tests check them (tests/comm/gpu_process_setup_test.cc).
#pragma once

#include <array>
#include <cstddef>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/comm/world.h"
#include "runtime/tensor/device.h"

namespace pf::comm {

// This process's rank among the processes of its node, as its launcher says.
struct LocalRank {
  int rank = -1;         // -1: none of the launcher variables is set
  std::string variable;  // where it came from, e.g. "OMPI_COMM_WORLD_LOCAL_RANK"
};

// The variables read, in this order: OMPI_COMM_WORLD_LOCAL_RANK (Open MPI's mpirun),
// MPI_LOCALRANKID (MPICH and Intel MPI), MV2_COMM_WORLD_LOCAL_RANK (MVAPICH), SLURM_LOCALID (srun).
const std::vector<const char*>& local_rank_variables();
// The first of local_rank_variables() that is set; a value that is not an integer >= 0 is
// kInvalidArgument naming the variable. `getenv` stands in for the environment in tests.
LocalRank launcher_local_rank(const std::function<const char*(const char*)>& getenv);
LocalRank launcher_local_rank();  // the process's environment

// The CUDA ordinal of rank `rank` of a world of processes (this process), from the `devices`
// option as given (all CUDA; at least one device visible):
// * one entry, `cuda` (= cuda:0): each process takes the device of its node-local rank, modulo the
//   `visible` devices (local ranks 0, 1, 2 on 2 GPUs: cuda:0, cuda:1, cuda:0);
// * one entry per rank: rank r uses devices[r] of its own node (with one rank, `cuda:N`, N > 0).
// kInvalidArgument, naming `option` (the caller's spelling of devices): one entry other than
// cuda:0 (with one process per rank, a single device is chosen by the local rank); a count that
// is neither 1 nor `ranks`; `cuda` with no launcher variable set (so no local rank).
int process_device(const std::vector<Device>& devices, int rank, int ranks, const LocalRank& local, int visible,
                   const std::string& option = "devices");

// Where a rank runs: its host (gethostname), CUDA device and process id.
struct ProcessPlacement {
  std::string host;
  int device = -1;
  long pid = 0;
  bool operator==(const ProcessPlacement& o) const { return host == o.host && device == o.device && pid == o.pid; }
};
constexpr size_t kMaxHostBytes = 255;  // longer host names are cut (POSIX allows 255)
// Collective over `world`: every member's placement, member r's at r (`mine` is this member's).
std::vector<ProcessPlacement> gather_placements(World& world, const ProcessPlacement& mine, double timeout_seconds);
ProcessPlacement this_process(int device);  // this host, `device`, getpid()

// The directed NCCL channels a pipeline needs: both directions of every pair (a, b), a != b, of
// `talking` (pairs of ranks that exchange messages, in either order, repeats allowed), sorted and
// unique. Each is a 2-rank communicator whose rank 0 (first) sends to its rank 1 (second).
std::vector<std::pair<int, int>> nccl_channels(const std::vector<std::pair<int, int>>& talking);
// "" when no two ranks that exchange messages (`channels`) use one device of one host; else the
// refusal (NCCL cannot put one device twice into a communicator), naming both ranks, the host and
// the device.
std::string shared_device_problem(const std::vector<ProcessPlacement>& placements,
                                  const std::vector<std::pair<int, int>>& channels);

// An ncclUniqueId's bytes (NCCL_UNIQUE_ID_BYTES).
constexpr size_t kNcclIdBytes = 128;
using NcclId = std::array<char, kNcclIdBytes>;
// Collective over `world`: rank 0 makes `count` ids with `make` (ncclGetUniqueId in the CUDA
// backend) and broadcasts them (World::broadcast: MPI for an MpiWorld); every member returns the
// same ids. Members asking for different counts throw kInvalidArgument on every member (the
// world's collective check, naming the odd rank).
std::vector<NcclId> broadcast_nccl_ids(World& world, int count, const std::function<void(NcclId*)>& make,
                                       double timeout_seconds);

}  // namespace pf::comm
