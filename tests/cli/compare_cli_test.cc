// `pipeforge compare`: the table against the closed forms and the simulator, and the HTML page:
// self-contained, and in headless Chromium (Debian's chromium; the browser tests skip themselves
// only where it is not installed) its table sorts and the page renders.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_runner.h"

namespace {

using pftest::CommandResult;
using pftest::run;
using pftest::run_json;
using pftest::tmp_dir;

const char* kSchedules = "--schedules 1f1b,zb-h1,zb-v,interleaved-1f1b,gpipe --stages 4 --microbatches 8";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs a shell command; its stdout, and its exit code in *code.
std::string shell(const std::string& command, int* code) {
  std::string out;
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  const int status = pclose(pipe);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// Debian's chromium, or "" when it is not installed.
std::string chromium() {
  int code = 0;
  std::string path = shell("command -v chromium || command -v chromium-browser", &code);
  while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
  return code == 0 ? path : "";
}

std::string browser(const std::string& args) {
  const std::string home = tmp_dir() + "/chromium-home";
  int code = 0;
  const std::string out = shell("mkdir -p '" + home + "' && HOME='" + home + "' '" + chromium() +
                                    "' --headless --no-sandbox --disable-gpu --disable-dev-shm-usage "
                                    "--hide-scrollbars " + args + " 2>/dev/null",
                                &code);
  EXPECT_EQ(code, 0) << "chromium " << args;
  return out;
}

std::string write_report(const std::string& name) {
  const std::string path = tmp_dir() + "/" + name;
  const CommandResult r = run(std::string("compare ") + kSchedules + " --t-w 0.5 --m-w 0.3 --html '" + path + "'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("wrote " + path), std::string::npos) << r.out;
  return path;
}

// The schedule names of the table's rows, in the order the DOM has them.
std::vector<std::string> row_order(const std::string& dom) {
  std::vector<std::string> names;
  const std::regex row("<tr><td data-v=\"([a-z0-9-]+)\"");
  for (auto it = std::sregex_iterator(dom.begin(), dom.end(), row); it != std::sregex_iterator(); ++it)
    names.push_back((*it)[1]);
  return names;
}

TEST(Compare, TheTableAgreesWithTheClosedFormsAndTheSimulator) {
  const nlohmann::json j = run_json(std::string("compare ") + kSchedules);
  ASSERT_EQ(j["schedules"].size(), 5u);
  for (const auto& row : j["schedules"]) {
    const std::string name = row["schedule"];
    const nlohmann::json sim =
        run_json("simulate --schedule " + name + " --stages 4 --microbatches 8" +
                 (name == "interleaved-1f1b" ? " --chunks 2 --t-f 0.5 --t-b 0.5 --t-w 0.5 --m-b 0.5" : "") +
                 (name == "zb-v" ? " --t-f 0.5 --t-b 0.5 --t-w 0.5 --m-b 0.5" : ""));
    EXPECT_DOUBLE_EQ(row["makespan"].get<double>(), sim["makespan"].get<double>()) << name;
    EXPECT_DOUBLE_EQ(row["bubble_rate"].get<double>(), sim["bubble_rate"].get<double>()) << name;
    EXPECT_EQ(row["peak_activation_bytes"], sim["peak_activation_bytes"]) << name;
  }
  // 1F1B and GPipe: bubble (p - 1) / (m + p - 1); GPipe holds all m micro-batches, 1F1B p - r.
  const auto& one = j["schedules"][0];
  EXPECT_EQ(one["schedule"], "1f1b");
  EXPECT_DOUBLE_EQ(one["bubble_rate"].get<double>(), 3.0 / 11.0);
  EXPECT_EQ(one["peak_activation_bytes"], nlohmann::json::array({4.0, 3.0, 2.0, 1.0}));
  EXPECT_EQ(one["messages"], 2 * 3 * 8);  // each of 8 micro-batches crosses 3 boundaries twice
  EXPECT_EQ(j["schedules"][4]["peak_activation_bytes"], nlohmann::json::array({8.0, 8.0, 8.0, 8.0}));
  EXPECT_EQ(j["schedules"][2]["chunks"], 2);
  const CommandResult table = run(std::string("compare ") + kSchedules);
  EXPECT_NE(table.out.find("zb-v (v=2)"), std::string::npos) << table.out;
  const CommandResult bad = run("compare --schedules 1f1b,zb-hl --stages 4 --microbatches 8");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("did you mean 'zb-h1'"), std::string::npos) << bad.err;
}

TEST(Compare, TheHtmlPageIsSelfContained) {
  const std::string html = read_file(write_report("self_contained.html"));
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  for (const char* remote : {"<script src", "<link", "@import", "url(http", "src=\"http", "href=\"http"})
    EXPECT_EQ(html.find(remote), std::string::npos) << remote;
  size_t sections = 0;
  for (size_t i = html.find("<section class=\"schedule\""); i != std::string::npos;
       i = html.find("<section class=\"schedule\"", i + 1))
    ++sections;
  EXPECT_EQ(sections, 5u);  // a timeline and a memory chart per schedule
  EXPECT_NE(html.find("class=\"memory\""), std::string::npos);
  // Every element id is unique on the page (each drawing prefixes its own).
  std::set<std::string> ids;
  const std::regex id("id=\"([^\"]+)\"");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), id); it != std::sregex_iterator(); ++it)
    EXPECT_TRUE(ids.insert((*it)[1]).second) << "duplicate id " << (*it)[1];
  EXPECT_GE(ids.size(), 6u);
}

TEST(Compare, InHeadlessChromiumTheTableSortsAndThePageRenders) {
  if (chromium().empty()) GTEST_SKIP() << "Chromium is not installed (tools/setup.sh installs Debian's chromium)";
  const std::string path = write_report("report.html");
  const std::string url = "file://" + path;
  const std::vector<std::string> unsorted = row_order(browser("--dump-dom '" + url + "'"));
  EXPECT_EQ(unsorted, (std::vector<std::string>{"1f1b", "zb-h1", "zb-v", "interleaved-1f1b", "gpipe"}));
  const std::string by_bubble = browser("--dump-dom '" + url + "#sort=bubble_rate'");
  EXPECT_NE(by_bubble.find("data-sorted=\"bubble_rate:ascending\""), std::string::npos);
  EXPECT_EQ(row_order(by_bubble).front(), "zb-v");  // the smallest bubble
  const std::vector<std::string> by_memory = row_order(browser("--dump-dom '" + url + "#sort=peak_memory:desc'"));
  EXPECT_EQ(by_memory.front(), "gpipe");  // holds every micro-batch
  // The screenshot: a PNG of the window's size with the page drawn in it.
  const std::string png = tmp_dir() + "/report.png";
  browser("--window-size=1280,1800 --screenshot='" + png + "' '" + url + "'");
  const std::string image = read_file(png);
  ASSERT_GT(image.size(), 24u);
  EXPECT_EQ(image.substr(1, 3), "PNG");
  auto be32 = [&](size_t at) {
    return (uint32_t(uint8_t(image[at])) << 24) | (uint32_t(uint8_t(image[at + 1])) << 16) |
           (uint32_t(uint8_t(image[at + 2])) << 8) | uint32_t(uint8_t(image[at + 3]));
  };
  EXPECT_EQ(be32(16), 1280u);
  EXPECT_EQ(be32(20), 1800u);
  EXPECT_GT(image.size(), 100000u) << "a near-empty screenshot: the page did not render";
  const char* keep = std::getenv("TEST_UNDECLARED_OUTPUTS_DIR");
  if (keep != nullptr) std::ofstream(std::string(keep) + "/compare_report.png", std::ios::binary) << image;
}

}  // namespace
