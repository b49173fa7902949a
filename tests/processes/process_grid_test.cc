// The T x D x P process grid (runtime/comm/process_grid.h) over 8 real processes: launch rank
// w = tp + T (dp + D pp), and each group (tensor parallel, data parallel, pipeline) holds exactly
// the launch ranks that the layout says, in the order of its own coordinate.
#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "runtime/comm/mpi_world.h"
#include "runtime/comm/process_grid.h"
#include "runtime/core/error.h"

namespace pf::comm {
namespace {

std::vector<int64_t> launch_ranks_of(World& group, int64_t launch_rank) {
  return all_gather_int64s(group, {launch_rank}, 30.0);
}

TEST(ProcessGrid, TwoByTwoByTwoFollowsTheLayout) {
  std::shared_ptr<MpiWorld> launch = MpiWorld::world();
  ASSERT_EQ(launch->size(), 8) << "run with mpirun -np 8";
  const int T = 2, D = 2, P = 2;
  const ProcessGrid g = make_process_grid(*launch, T, D, P);
  const int64_t w = launch->rank();
  const int tp = static_cast<int>(w % T), dp = static_cast<int>(w / T % D), pp = static_cast<int>(w / (T * D));
  EXPECT_EQ(g.tensor_rank, tp);
  EXPECT_EQ(g.replica, dp);
  EXPECT_EQ(g.pipeline_rank, pp);
  const auto at = [&](int t, int d, int p) { return static_cast<int64_t>(t + T * (d + D * p)); };
  EXPECT_EQ(launch_ranks_of(*g.tensor_parallel, w), (std::vector<int64_t>{at(0, dp, pp), at(1, dp, pp)}));
  EXPECT_EQ(launch_ranks_of(*g.data_parallel, w), (std::vector<int64_t>{at(tp, 0, pp), at(tp, 1, pp)}));
  EXPECT_EQ(launch_ranks_of(*g.pipeline, w), (std::vector<int64_t>{at(tp, dp, 0), at(tp, dp, 1)}));
  EXPECT_EQ(g.tensor_parallel->rank(), tp);
  EXPECT_EQ(g.data_parallel->rank(), dp);
  EXPECT_EQ(g.pipeline->rank(), pp);
}

TEST(ProcessGrid, ALaunchOfAnotherSizeIsRefusedNamingTheCount) {
  std::shared_ptr<MpiWorld> launch = MpiWorld::world();
  try {
    make_process_grid(*launch, 2, 1, 3);
    ADD_FAILURE() << "a grid of 6 over 8 processes was made";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("2 tensor-parallel ranks x 1 replicas x 3 pipeline ranks need 6 (launch "
                                         "mpirun -np 6)"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace pf::comm
