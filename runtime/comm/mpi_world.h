// A World with one process per member, over MPI (Open MPI 4.1 here). MpiWorld::world() is the whole
// launch (MPI_COMM_WORLD); split() makes sub-worlds (a pipeline group, a data-parallel group).
//
// Each world duplicates its communicator three times: point-to-point (its MpiTransport), collectives
// and abort notices, so none of them can match another's messages. Collectives are non-blocking MPI
// collectives polled with the deadline and the abort channel. Before moving data every collective
// all-gathers each member's (operation, size, root) and refuses a disagreement on every member
// (kInvalidArgument naming the rank); a barrier is exactly that exchange. Data goes through buffers
// of the world's own, so a collective given up on (timeout, abort) never writes into the caller's
// memory later; after that the world refuses further collectives (kFailedPrecondition) because its
// members are out of step. Sums are MPI_Iallreduce's: the same bits on every member for a fixed
// world size and layout.
#pragma once

#include <mpi.h>

#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "runtime/comm/collective_signature.h"
#include "runtime/comm/mpi_abort_channel.h"
#include "runtime/comm/mpi_process.h"
#include "runtime/comm/mpi_transport.h"
#include "runtime/comm/poll.h"
#include "runtime/comm/world.h"

namespace pf::comm {

class MpiWorld : public World {
 public:
  static constexpr double kDefaultSetupSeconds = 60;

  // The whole launch. Initialises MPI on first use (mpi_process.h) and finalises it at exit;
  // kMpiError when MPI cannot be initialised with MPI_THREAD_MULTIPLE.
  static std::shared_ptr<MpiWorld> world();

  // Collective over this world: the members with the same color form a new world, ordered by key
  // (ties: by rank here). A member with color < 0 joins none and gets nullptr.
  std::unique_ptr<MpiWorld> split(int color, int key, double timeout_seconds = kDefaultSetupSeconds) {
    return split(color, key, MpiTransport::Options(), timeout_seconds);
  }
  std::unique_ptr<MpiWorld> split(int color, int key, const MpiTransport::Options& options,
                                  double timeout_seconds = kDefaultSetupSeconds);

  ~MpiWorld() override;
  MpiWorld(const MpiWorld&) = delete;
  MpiWorld& operator=(const MpiWorld&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override;
  Transport& endpoint() override { return *transport_; }
  void barrier(double timeout_seconds) override;
  std::vector<char> all_gather(const void* data, size_t bytes, double timeout_seconds) override;
  void broadcast(void* data, size_t bytes, int root, double timeout_seconds) override;
  void all_reduce_sum(float* data, size_t count, double timeout_seconds) override;
  void all_reduce_sum(double* data, size_t count, double timeout_seconds) override;
  void reduce_scatter_sum(const float* data, size_t count, float* mine, double timeout_seconds) override;
  void abort(const std::string& reason) override;
  bool aborted() const override;
  std::string abort_cause() const override;

  MpiTransport& transport() { return *transport_; }
  // The point-to-point communicator (its MpiTransport's), e.g. for tests that craft raw messages.
  MPI_Comm point_to_point_comm() const { return p2p_; }
  int world_rank() const { return world_rank_; }

 private:
  // Takes `base` (freed here when owns_base) and makes the three duplicates, collectively.
  MpiWorld(MPI_Comm base, bool owns_base, const MpiTransport::Options& options, double timeout_seconds);

  void check_usable(const char* name) const;
  // All members agree on (op, size, root), or every member throws kInvalidArgument.
  void agree(CollectiveOp op, int64_t size, int root, const Deadline& deadline);
  // Polls `request` (on coll_) to completion; `buffers` outlive it even when this gives up. `bytes`:
  // what it moves (large collectives keep MPI progressing while they wait).
  void complete(const char* name, MPI_Request request, std::shared_ptr<void> buffers, const Deadline& deadline,
                size_t bytes);
  template <typename T>
  void reduce(CollectiveOp op, MPI_Datatype type, T* data, size_t count, double timeout_seconds);

  int rank_ = 0;
  int size_ = 0;
  int world_rank_ = 0;
  int world_size_ = 0;
  MPI_Comm p2p_ = MPI_COMM_NULL;
  MPI_Comm coll_ = MPI_COMM_NULL;
  MPI_Comm control_ = MPI_COMM_NULL;
  std::shared_ptr<MpiAbortChannel> abort_;
  std::unique_ptr<MpiTransport> transport_;

  std::mutex coll_mutex_;     // one collective at a time
  std::string broken_;        // why the collectives are out of step ("" while they are not)
  std::vector<std::pair<MPI_Request, std::shared_ptr<void>>> orphans_;  // collectives given up on
};

}  // namespace pf::comm
