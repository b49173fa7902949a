#include "runtime/comm/gpu_process_setup.h"

#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "runtime/core/error.h"

namespace pf::comm {

const std::vector<const char*>& local_rank_variables() {
  static const std::vector<const char*> names = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                                 "MV2_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID"};
  return names;
}

LocalRank launcher_local_rank(const std::function<const char*(const char*)>& getenv) {
  for (const char* name : local_rank_variables()) {
    const char* value = getenv(name);
    if (value == nullptr) continue;
    const std::string text(value);
    PF_CHECK_ARG(!text.empty() && text.size() <= 6 && text.find_first_not_of("0123456789") == std::string::npos,
                 name, " is '", text, "': the launcher's node-local rank should be an integer >= 0");
    return LocalRank{std::stoi(text), name};
  }
  return LocalRank{};
}

LocalRank launcher_local_rank() {
  return launcher_local_rank([](const char* name) { return std::getenv(name); });
}

int process_device(const std::vector<Device>& devices, int rank, int ranks, const LocalRank& local, int visible,
                   const std::string& option) {
  PF_CHECK_ARG(visible >= 1, "process_device: no CUDA device is visible");
  PF_CHECK_ARG(rank >= 0 && rank < ranks, "process_device: rank ", rank, " of ", ranks);
  // One entry per rank (with one rank, an entry other than cuda:0 names its device too).
  if (devices.size() == static_cast<size_t>(ranks) && (ranks > 1 || devices[0].ordinal != 0))
    return devices[static_cast<size_t>(rank)].ordinal;
  PF_CHECK_ARG(devices.size() == 1, option, ": ", devices.size(), " entries for the schedule's ", ranks,
               " ranks: with one process per rank give `cuda` (each process takes the GPU of its node-local "
               "rank) or one device per rank (rank r on devices[r] of its own node)");
  PF_CHECK_ARG(devices[0].ordinal == 0, option, " names ", devices[0].to_string(),
               ": with one process per rank a single entry is `cuda`, and each process takes the GPU of its "
               "node-local rank; name one device per rank (e.g. cuda:0,cuda:1) to choose them yourself");
  if (local.rank < 0) {
    std::string names;
    for (const char* n : local_rank_variables()) names += (names.empty() ? "" : ", ") + std::string(n);
    fail(ErrorCode::kInvalidArgument, option, " cuda: rank ", rank,
         " cannot tell which GPU is its own: the launcher set none of ", names,
         " (the process's rank on its node); launch with mpirun, or name one device per rank (e.g. cuda:0,cuda:1)");
  }
  return local.rank % visible;
}

ProcessPlacement this_process(int device) {
  char host[kMaxHostBytes + 1] = {};
  if (gethostname(host, kMaxHostBytes) != 0) std::strcpy(host, "?");
  return ProcessPlacement{host, device, static_cast<long>(getpid())};
}

std::vector<ProcessPlacement> gather_placements(World& world, const ProcessPlacement& mine, double timeout_seconds) {
  // A fixed-size record per member: host (NUL-padded), device, pid.
  constexpr size_t kRecord = kMaxHostBytes + 1 + 2 * sizeof(int64_t);
  std::vector<char> record(kRecord, '\0');
  std::memcpy(record.data(), mine.host.data(), std::min(mine.host.size(), kMaxHostBytes));
  const int64_t numbers[2] = {mine.device, mine.pid};
  std::memcpy(record.data() + kMaxHostBytes + 1, numbers, sizeof(numbers));
  const std::vector<char> all = world.all_gather(record.data(), kRecord, timeout_seconds);
  std::vector<ProcessPlacement> out;
  for (int r = 0; r < world.size(); ++r) {
    const char* at = all.data() + static_cast<size_t>(r) * kRecord;
    int64_t got[2];
    std::memcpy(got, at + kMaxHostBytes + 1, sizeof(got));
    out.push_back(ProcessPlacement{std::string(at, strnlen(at, kMaxHostBytes)), static_cast<int>(got[0]),
                                   static_cast<long>(got[1])});
  }
  return out;
}

std::vector<std::pair<int, int>> nccl_channels(const std::vector<std::pair<int, int>>& talking) {
  std::vector<std::pair<int, int>> out;
  for (const auto& [a, b] : talking) {
    if (a == b) continue;
    out.emplace_back(a, b);
    out.emplace_back(b, a);
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::string shared_device_problem(const std::vector<ProcessPlacement>& placements,
                                  const std::vector<std::pair<int, int>>& channels) {
  for (const auto& [a, b] : channels) {
    if (a > b) continue;  // each pair once
    const ProcessPlacement& pa = placements.at(static_cast<size_t>(a));
    const ProcessPlacement& pb = placements.at(static_cast<size_t>(b));
    if (pa.host != pb.host || pa.device != pb.device) continue;
    return "ranks " + std::to_string(a) + " and " + std::to_string(b) + " (processes " + std::to_string(pa.pid) +
           " and " + std::to_string(pb.pid) + ") exchange messages but are both on cuda:" +
           std::to_string(pa.device) + " of host " + pa.host +
           ", and NCCL needs two devices for them: run at most as many processes per node as it has GPUs, or "
           "name one device per rank";
  }
  return "";
}

std::vector<NcclId> broadcast_nccl_ids(World& world, int count, const std::function<void(NcclId*)>& make,
                                       double timeout_seconds) {
  PF_CHECK_ARG(count >= 0, "broadcast_nccl_ids: count ", count);
  std::vector<NcclId> ids(static_cast<size_t>(count));
  if (world.rank() == 0)
    for (NcclId& id : ids) make(&id);
  world.broadcast(ids.data(), ids.size() * kNcclIdBytes, 0, timeout_seconds);
  return ids;
}

}  // namespace pf::comm
