// runtime/core/input_file.h on its own, below the command line (whose option validators refuse a
// missing path or a folder before the library sees it): what the C API, the bindings and the data
// readers get for a folder, a FIFO, a device, a missing file, a file over its limit, and JSON
// nested too deep or malformed.
#include "runtime/core/input_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"

namespace pf {
namespace {

namespace fs = std::filesystem;

std::string tmp(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  const std::string path = std::string(dir ? dir : "/tmp") + "/input_file_test_" + name;
  fs::remove_all(path);
  return path;
}

void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// The code and message of what `read` throws (kOk, "" when it does not).
template <typename F>
std::pair<ErrorCode, std::string> error_of(F read) {
  try {
    read();
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {ErrorCode::kOk, ""};
}

TEST(InputFile, ReadsARegularFileWhole) {
  const std::string path = tmp("ok.txt");
  write(path, "abc\n");
  EXPECT_EQ(read_input_file(path, "text file", 4), "abc\n");
  EXPECT_EQ(check_input_file(path, "text file", 4), 4u);
  const std::string link = tmp("link.txt");
  fs::create_symlink(path, link);  // a link to a regular file is followed
  EXPECT_EQ(read_input_file(link, "text file", 4), "abc\n");
}

TEST(InputFile, WhatIsNotARegularFileIsRefusedNamingItsKind) {
  const std::string folder = tmp("folder");
  fs::create_directories(folder);
  auto [code, message] = error_of([&] { read_input_file(folder, "model file", 100); });
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(message, "model file '" + folder + "' is a directory, not a regular file");

  const std::string fifo = tmp("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::tie(code, message) = error_of([&] { read_input_file(fifo, "config file", 100); });  // does not block
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(message, "config file '" + fifo + "' is a FIFO, not a regular file");

  std::tie(code, message) = error_of([&] { read_input_file("/dev/zero", "CSV file", 100); });
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(message, "CSV file '/dev/zero' is a device, not a regular file");
}

TEST(InputFile, AMissingFileAndOneOverTheLimitAreRefusedBeforeReading) {
  const std::string missing = tmp("missing.json");
  auto [code, message] = error_of([&] { read_input_file(missing, "plan file", 100); });
  EXPECT_EQ(code, ErrorCode::kNotFound);
  EXPECT_EQ(message, "plan file '" + missing + "' does not exist");

  const std::string big = tmp("big.txt");
  write(big, std::string(101, 'x'));
  std::tie(code, message) = error_of([&] { check_input_file(big, "text file", 100); });
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(message, "text file '" + big + "' has 101 bytes, more than the limit of 100");
  EXPECT_EQ(read_input_file(big, "text file", 101).size(), 101u);

  std::tie(code, message) = error_of([&] { read_input_file("", "text file", 100); });
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(message, "text file: the path is empty");
}

TEST(InputFile, JsonIsParsedWithItsDepthCheckedAndItsErrorsNamingTheFile) {
  const std::string path = tmp("config.json");
  write(path, R"({"trainer": {"schedule": "1f1b"}})");
  EXPECT_EQ(read_json_input(path, "config file", 1000)["trainer"]["schedule"], "1f1b");

  write(path, std::string(100, '[') + std::string(100, ']'));
  auto [code, message] = error_of([&] { read_json_input(path, "config file", 1000); });
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("config file '" + path + "'"), std::string::npos) << message;
  EXPECT_NE(message.find("nested deeper than 64 levels"), std::string::npos) << message;

  write(path, R"({"trainer": )");
  std::tie(code, message) = error_of([&] { read_json_input(path, "config file", 1000); });
  EXPECT_EQ(code, ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("config file '" + path + "'"), std::string::npos) << message;
  EXPECT_NE(message.find("malformed JSON"), std::string::npos) << message;
}

}  // namespace
}  // namespace pf
