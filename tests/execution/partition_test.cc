#include <gtest/gtest.h>

#include "runtime/core/error.h"
#include "runtime/execution/partition.h"

namespace pf::exec {
namespace {

TEST(Partition, EvenExplicitAndErrors) {
  auto even = partition_layers(17, 4);
  ASSERT_EQ(even.size(), 4u);
  EXPECT_EQ(layer_counts(even), (std::vector<int>{5, 4, 4, 4}));
  EXPECT_EQ(even[0].begin, 0);
  EXPECT_EQ(even[3].end, 17);
  auto expl = partition_layers(6, 3, {1, 3, 2});
  EXPECT_EQ(expl[1].begin, 1);
  EXPECT_EQ(expl[1].end, 4);
  EXPECT_THROW(partition_layers(6, 3, {1, 3}), Error);
  EXPECT_THROW(partition_layers(6, 3, {1, 3, 3}), Error);
  EXPECT_THROW(partition_layers(6, 3, {0, 3, 3}), Error);
  EXPECT_THROW(partition_layers(2, 3), Error);
}

TEST(Partition, BalancedMinimisesTheSlowestStage) {
  // Best 3-way split of {1,1,1,1,4,1,1}: [1,1,1,1] [4] [1,1] -> max 4.
  auto p = partition_balanced({1, 1, 1, 1, 4, 1, 1}, 3);
  EXPECT_EQ(layer_counts(p), (std::vector<int>{4, 1, 2}));
  auto q = partition_balanced({3, 3, 3, 3}, 2);
  EXPECT_EQ(layer_counts(q), (std::vector<int>{2, 2}));
  auto r = partition_balanced({5, 1, 1, 1}, 4);
  EXPECT_EQ(layer_counts(r), (std::vector<int>{1, 1, 1, 1}));
  EXPECT_THROW(partition_balanced({1, 2}, 3), Error);
}

}  // namespace
}  // namespace pf::exec
