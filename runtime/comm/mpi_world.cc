#include "runtime/comm/mpi_world.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>

#include "runtime/comm/keepalive.h"
#include "runtime/comm/mpi_status.h"
#include "runtime/core/error.h"

namespace pf::comm {

namespace {

constexpr size_t kBroadcastChunkBytes = size_t{1} << 30;
constexpr size_t kReduceChunkElements = size_t{1} << 28;
// Collectives moving this much keep MPI progressing while they wait (Backoff(true)).
constexpr size_t kTransferBytes = size_t{64} << 10;

// Polls a communicator-setup request (MPI_Comm_idup) to completion: there is no abort channel yet.
void complete_setup(MPI_Request request, const Deadline& deadline, int rank, const char* call) {
  Backoff backoff;
  while (true) {
    int done = 0;
    mpi_check(MPI_Test(&request, &done, MPI_STATUS_IGNORE), call, rank);
    if (done) return;
    if (deadline.passed()) {
      fail(ErrorCode::kTimeout, "rank ", rank, ": ", call, " (making an MPI world) timed out after ",
           deadline.timeout_seconds(), " s: not every member took part");
    }
    backoff.pause();
  }
}

MPI_Comm duplicate(MPI_Comm base, const Deadline& deadline, int rank) {
  MPI_Comm out = MPI_COMM_NULL;
  MPI_Request request = MPI_REQUEST_NULL;
  mpi_check(MPI_Comm_idup(base, &out, &request), "MPI_Comm_idup", rank);
  complete_setup(request, deadline, rank, "MPI_Comm_idup");
  mpi_check(MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", rank);
  return out;
}

void free_comm(MPI_Comm* comm) {
  if (*comm != MPI_COMM_NULL) MPI_Comm_free(comm);
}

}  // namespace

std::shared_ptr<MpiWorld> MpiWorld::world() {
  // Constructed after MPI's process state (inside ensure_mpi_initialized), so destroyed before
  // MPI_Finalize at exit.
  struct Holder {
    Holder() { ensure_mpi_initialized(); }
    std::mutex mutex;
    std::shared_ptr<MpiWorld> world;
  };
  static Holder holder;
  std::lock_guard<std::mutex> lock(holder.mutex);
  ensure_mpi_initialized();
  if (!holder.world) {
    holder.world.reset(new MpiWorld(MPI_COMM_WORLD, false, MpiTransport::Options(), kDefaultSetupSeconds));
  }
  return holder.world;
}

MpiWorld::MpiWorld(MPI_Comm base, bool owns_base, const MpiTransport::Options& options, double timeout_seconds) {
  const Deadline deadline(timeout_seconds);
  mpi_check(MPI_Comm_rank(base, &rank_), "MPI_Comm_rank", -1);
  mpi_check(MPI_Comm_size(base, &size_), "MPI_Comm_size", rank_);
  mpi_check(MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_), "MPI_Comm_rank", rank_);
  mpi_check(MPI_Comm_size(MPI_COMM_WORLD, &world_size_), "MPI_Comm_size", rank_);
  try {
    mpi_check(MPI_Comm_set_errhandler(base, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", rank_);
    p2p_ = duplicate(base, deadline, rank_);
    coll_ = duplicate(base, deadline, rank_);
    control_ = duplicate(base, deadline, rank_);
    abort_ = std::make_shared<MpiAbortChannel>(control_, rank_, size_);
    transport_ = std::make_unique<MpiTransport>(p2p_, abort_, options);
  } catch (...) {
    abort_.reset();
    free_comm(&p2p_);
    free_comm(&coll_);
    free_comm(&control_);
    if (owns_base) free_comm(&base);
    throw;
  }
  if (owns_base) free_comm(&base);
}

MpiWorld::~MpiWorld() {
  transport_.reset();
  abort_.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  // Collectives given up on can never be freed (MPI forbids it); their buffers stay with them.
  for (auto& [request, buffers] : orphans_) {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (!done) keep_until_exit(std::move(buffers));
  }
  free_comm(&p2p_);
  free_comm(&coll_);
  free_comm(&control_);
}

std::string MpiWorld::describe() const {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) std::strcpy(host, "?");
  std::string out = "MPI rank " + std::to_string(rank_) + " of " + std::to_string(size_) + " (";
  if (rank_ != world_rank_ || size_ != world_size_) out += "world rank " + std::to_string(world_rank_) + ", ";
  return out + "host " + host + ", pid " + std::to_string(getpid()) + ")";
}

void MpiWorld::check_usable(const char* name) const {
  abort_->check(name);
  if (!broken_.empty()) {
    fail(ErrorCode::kFailedPrecondition, "rank ", rank_, ": ", name, " refused: ", broken_,
         ", so this world's members are out of step (abort it and make a new world)");
  }
}

void MpiWorld::complete(const char* name, MPI_Request request, std::shared_ptr<void> buffers,
                        const Deadline& deadline, size_t bytes) {
  Backoff backoff(bytes >= kTransferBytes);
  while (true) {
    int done = 0;
    const int rc = MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (rc == MPI_SUCCESS && done) {
      backoff.succeeded();
      return;
    }
    if (rc != MPI_SUCCESS) {
      orphans_.emplace_back(request, std::move(buffers));
      broken_ = std::string("an earlier ") + name + " failed";
      mpi_check(rc, "MPI_Test", rank_);
    }
    if (abort_->poll()) {
      orphans_.emplace_back(request, std::move(buffers));
      broken_ = std::string("an earlier ") + name + " was cancelled";
      abort_->throw_cancelled(name);
    }
    if (deadline.passed()) {
      orphans_.emplace_back(request, std::move(buffers));
      broken_ = std::string("an earlier ") + name + " timed out";
      fail(ErrorCode::kTimeout, "rank ", rank_, ": ", name, " timed out after ", deadline.timeout_seconds(),
           " s: not every one of the ", size_, " members arrived (MPI does not say which)");
    }
    backoff.pause();
  }
}

void MpiWorld::agree(CollectiveOp op, int64_t size, int root, const Deadline& deadline) {
  struct Buffers {
    CollectiveSignature mine;
    std::vector<CollectiveSignature> all;
  };
  auto b = std::make_shared<Buffers>();
  b->mine = CollectiveSignature{static_cast<int64_t>(op), size, root};
  b->all.resize(static_cast<size_t>(size_));
  const char* name = collective_op_name(op);
  MPI_Request request = MPI_REQUEST_NULL;
  mpi_check(MPI_Iallgather(&b->mine, sizeof(CollectiveSignature), MPI_BYTE, b->all.data(),
                           sizeof(CollectiveSignature), MPI_BYTE, coll_, &request),
            "MPI_Iallgather", rank_);
  complete(name, request, b, deadline, 0);
  const std::string mismatch = signature_mismatch(b->all);
  if (!mismatch.empty()) fail(ErrorCode::kInvalidArgument, "rank ", rank_, ": ", mismatch);
}

void MpiWorld::barrier(double timeout_seconds) {
  const Deadline deadline(timeout_seconds);
  std::lock_guard<std::mutex> lock(coll_mutex_);
  check_usable("barrier");
  // The agreement is an all-gather: no member leaves it before every member has entered it.
  agree(CollectiveOp::kBarrier, 0, 0, deadline);
}

std::vector<char> MpiWorld::all_gather(const void* data, size_t bytes, double timeout_seconds) {
  PF_CHECK_ARG(data != nullptr || bytes == 0, "rank ", rank_, ": all_gather: data is null");
  PF_CHECK_ARG(bytes <= static_cast<size_t>(INT_MAX), "rank ", rank_, ": all_gather of ", bytes,
               " bytes per member: at most ", INT_MAX);
  const Deadline deadline(timeout_seconds);
  std::lock_guard<std::mutex> lock(coll_mutex_);
  check_usable("all_gather");
  agree(CollectiveOp::kAllGather, static_cast<int64_t>(bytes), 0, deadline);
  if (bytes == 0) return {};
  struct Buffers {
    std::vector<char> in, out;
  };
  auto b = std::make_shared<Buffers>();
  b->in.assign(static_cast<const char*>(data), static_cast<const char*>(data) + bytes);
  b->out.resize(bytes * static_cast<size_t>(size_));
  MPI_Request request = MPI_REQUEST_NULL;
  mpi_check(MPI_Iallgather(b->in.data(), static_cast<int>(bytes), MPI_BYTE, b->out.data(), static_cast<int>(bytes),
                           MPI_BYTE, coll_, &request),
            "MPI_Iallgather", rank_);
  complete("all_gather", request, b, deadline, b->out.size());
  return std::move(b->out);
}

void MpiWorld::broadcast(void* data, size_t bytes, int root, double timeout_seconds) {
  PF_CHECK_ARG(root >= 0 && root < size_, "rank ", rank_, ": broadcast: no root rank ", root, " (", size_,
               " members)");
  PF_CHECK_ARG(data != nullptr || bytes == 0, "rank ", rank_, ": broadcast: data is null");
  const Deadline deadline(timeout_seconds);
  std::lock_guard<std::mutex> lock(coll_mutex_);
  check_usable("broadcast");
  agree(CollectiveOp::kBroadcast, static_cast<int64_t>(bytes), root, deadline);
  if (bytes == 0) return;
  auto b = std::make_shared<std::vector<char>>(bytes);
  if (rank_ == root) std::memcpy(b->data(), data, bytes);
  for (size_t off = 0; off < bytes; off += kBroadcastChunkBytes) {
    const int n = static_cast<int>(std::min(kBroadcastChunkBytes, bytes - off));
    MPI_Request request = MPI_REQUEST_NULL;
    mpi_check(MPI_Ibcast(b->data() + off, n, MPI_BYTE, root, coll_, &request), "MPI_Ibcast", rank_, root);
    complete("broadcast", request, b, deadline, static_cast<size_t>(n));
  }
  if (rank_ != root) std::memcpy(data, b->data(), bytes);
}

template <typename T>
void MpiWorld::reduce(CollectiveOp op, MPI_Datatype type, T* data, size_t count, double timeout_seconds) {
  PF_CHECK_ARG(data != nullptr || count == 0, "rank ", rank_, ": all_reduce_sum: data is null");
  PF_CHECK_ARG(count <= static_cast<size_t>(INT64_MAX) / sizeof(T), "rank ", rank_, ": all_reduce_sum of ", count,
               " elements is too large");
  const Deadline deadline(timeout_seconds);
  std::lock_guard<std::mutex> lock(coll_mutex_);
  const char* name = collective_op_name(op);
  check_usable(name);
  agree(op, static_cast<int64_t>(count), 0, deadline);
  if (count == 0) return;
  struct Buffers {
    std::vector<T> in, out;
  };
  auto b = std::make_shared<Buffers>();
  b->in.assign(data, data + count);
  b->out.resize(count);
  for (size_t off = 0; off < count; off += kReduceChunkElements) {
    const int n = static_cast<int>(std::min(kReduceChunkElements, count - off));
    MPI_Request request = MPI_REQUEST_NULL;
    mpi_check(MPI_Iallreduce(b->in.data() + off, b->out.data() + off, n, type, MPI_SUM, coll_, &request),
              "MPI_Iallreduce", rank_);
    complete(name, request, b, deadline, static_cast<size_t>(n) * sizeof(T));
  }
  std::memcpy(data, b->out.data(), count * sizeof(T));
}

void MpiWorld::all_reduce_sum(float* data, size_t count, double timeout_seconds) {
  reduce(CollectiveOp::kAllReduceF32, MPI_FLOAT, data, count, timeout_seconds);
}

void MpiWorld::all_reduce_sum(double* data, size_t count, double timeout_seconds) {
  reduce(CollectiveOp::kAllReduceF64, MPI_DOUBLE, data, count, timeout_seconds);
}

void MpiWorld::reduce_scatter_sum(const float* data, size_t count, float* mine, double timeout_seconds) {
  PF_CHECK_ARG((data != nullptr && mine != nullptr) || count == 0, "rank ", rank_, ": reduce_scatter_sum: data is null");
  PF_CHECK_ARG(count <= static_cast<size_t>(INT64_MAX) / sizeof(float) / static_cast<size_t>(size_), "rank ", rank_,
               ": reduce_scatter_sum of ", count, " elements per member is too large");
  const Deadline deadline(timeout_seconds);
  std::lock_guard<std::mutex> lock(coll_mutex_);
  const char* name = collective_op_name(CollectiveOp::kReduceScatterF32);
  check_usable(name);
  agree(CollectiveOp::kReduceScatterF32, static_cast<int64_t>(count), 0, deadline);
  if (count == 0) return;
  struct Buffers {
    std::vector<float> in, out;
  };
  auto b = std::make_shared<Buffers>();
  const size_t members = static_cast<size_t>(size_);
  // In chunks of each member's block: chunk [off, off + n) of every block, packed member by member.
  for (size_t off = 0; off < count; off += kReduceChunkElements) {
    const size_t n = std::min(kReduceChunkElements, count - off);
    b->in.resize(n * members);
    b->out.resize(n);
    for (size_t r = 0; r < members; ++r) std::memcpy(b->in.data() + r * n, data + r * count + off, n * sizeof(float));
    MPI_Request request = MPI_REQUEST_NULL;
    mpi_check(MPI_Ireduce_scatter_block(b->in.data(), b->out.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM, coll_,
                                        &request),
              "MPI_Ireduce_scatter_block", rank_);
    complete(name, request, b, deadline, n * members * sizeof(float));
    std::memcpy(mine + off, b->out.data(), n * sizeof(float));
  }
}

void MpiWorld::abort(const std::string& reason) { abort_->abort(reason); }

bool MpiWorld::aborted() const { return abort_->poll(); }

std::string MpiWorld::abort_cause() const { return abort_->poll() ? abort_->cause() : std::string(); }

std::unique_ptr<MpiWorld> MpiWorld::split(int color, int key, const MpiTransport::Options& options,
                                          double timeout_seconds) {
  const Deadline deadline(timeout_seconds);
  MPI_Comm sub = MPI_COMM_NULL;
  {
    std::lock_guard<std::mutex> lock(coll_mutex_);
    check_usable("split");
    // Every member is inside split once the agreement completes, so the blocking MPI_Comm_split
    // that follows returns promptly.
    agree(CollectiveOp::kSplit, 0, 0, deadline);
    mpi_check(MPI_Comm_split(coll_, color < 0 ? MPI_UNDEFINED : color, key, &sub), "MPI_Comm_split", rank_);
  }
  if (sub == MPI_COMM_NULL) return nullptr;
  return std::unique_ptr<MpiWorld>(new MpiWorld(sub, true, options, deadline.seconds_left()));
}

}  // namespace pf::comm
