#include "runtime/core/suggest.h"

#include <gtest/gtest.h>

namespace pf {
namespace {

const std::vector<std::string> kSchedules = {"1f1b", "gpipe", "zb-v", "zb-h1", "zb-h2", "interleaved-1f1b", "pipedream"};

TEST(Suggest, TyposGetTheClosestName) {
  EXPECT_EQ(closest_name("1f2b", kSchedules), "1f1b");          // a substitution
  EXPECT_EQ(closest_name("zbv", kSchedules), "zb-v");           // a deletion
  EXPECT_EQ(closest_name("gpiep", kSchedules), "gpipe");        // a swap of neighbours
  EXPECT_EQ(closest_name("pipedreem", kSchedules), "pipedream");
  EXPECT_EQ(closest_name("GPipe", kSchedules), "gpipe");        // case
  EXPECT_EQ(did_you_mean("zbh1", kSchedules), "; did you mean 'zb-h1'?");
}

TEST(Suggest, FarOrExactNamesGetNone) {
  EXPECT_EQ(closest_name("transformer", kSchedules), "");
  EXPECT_EQ(closest_name("xyz", kSchedules), "");
  EXPECT_EQ(closest_name("", kSchedules), "");
  EXPECT_EQ(closest_name("1f1b", kSchedules), "");  // not a typo
  EXPECT_EQ(closest_name("1f2b", {}), "");
  EXPECT_EQ(did_you_mean("transformer", kSchedules), "");
}

}  // namespace
}  // namespace pf
