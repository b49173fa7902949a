// `pipeforge train --capabilities` prints the capability table, and docs/CAPABILITIES.md is what
// `--capabilities --markdown` prints (regenerate it with that command when the table changes).
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "tests/cli/cli_runner.h"

namespace {

using pftest::CommandResult;
using pftest::run;

TEST(CapabilitiesCli, PrintsTheTableAndTheDocsAreItsMarkdown) {
  const CommandResult text = run("train --capabilities");
  ASSERT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.out.find("data parallelism with the ranks as threads"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("INVALID_ARGUMENT"), std::string::npos);
  const CommandResult markdown = run("train --capabilities --markdown");
  ASSERT_EQ(markdown.exit_code, 0) << markdown.err;
  std::ifstream in("docs/CAPABILITIES.md");
  ASSERT_TRUE(in) << "docs/CAPABILITIES.md is not in the test's runfiles";
  std::stringstream docs;
  docs << in.rdbuf();
  EXPECT_EQ(docs.str(), markdown.out)
      << "docs/CAPABILITIES.md is stale: run `bazel run //:pipeforge -- train --capabilities --markdown > "
         "docs/CAPABILITIES.md`";
  const CommandResult alone = run("train --markdown");
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_NE(alone.err.find("--markdown applies to --capabilities"), std::string::npos) << alone.err;
}

}  // namespace
