#include "runtime/run/checkpoint_series.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <system_error>

#include "runtime/core/error.h"
#include "runtime/core/log.h"

namespace pf {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFileSuffix = ".pfckpt";

// The step of an entry name "step-N" or "step-N.pfckpt"; -1 for any other name.
int64_t step_of(const std::string& name, bool* is_file) {
  if (name.rfind("step-", 0) != 0) return -1;
  std::string digits = name.substr(5);
  *is_file = digits.size() > 7 && digits.compare(digits.size() - 7, 7, kFileSuffix) == 0;
  if (*is_file) digits.resize(digits.size() - 7);
  if (digits.empty() || digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) return -1;
  return std::stoll(digits);
}

struct Entry {
  int64_t step;
  fs::path path;
};

std::vector<Entry> entries(const std::string& folder) {
  std::vector<Entry> out;
  std::error_code ec;
  if (!fs::is_directory(folder, ec)) return out;
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    bool is_file = false;
    const int64_t step = step_of(e.path().filename().string(), &is_file);
    if (step < 0) continue;
    const bool complete = is_file ? e.is_regular_file(ec) : fs::is_regular_file(e.path() / "manifest.json", ec);
    if (complete) out.push_back({step, e.path()});
  }
  std::sort(out.begin(), out.end(), [](const Entry& a, const Entry& b) { return a.step < b.step; });
  return out;
}

}  // namespace

CheckpointSeries::CheckpointSeries(std::string folder, int keep, bool sharded)
    : folder_(std::move(folder)), keep_(keep), sharded_(sharded) {
  PF_CHECK_ARG(!folder_.empty(), "checkpoint folder is empty");
  PF_CHECK_ARG(keep_ >= 0, "checkpoints to keep must be >= 0 (0 = all), got ", keep_);
  std::error_code ec;
  fs::create_directories(folder_, ec);
  if (ec) fail(ErrorCode::kIoError, "cannot create checkpoint folder '", folder_, "': ", ec.message());
}

std::string CheckpointSeries::path_of(int64_t step) const {
  char name[48];
  std::snprintf(name, sizeof(name), "step-%08lld%s", static_cast<long long>(step), sharded_ ? "" : kFileSuffix);
  return (fs::path(folder_) / name).string();
}

void CheckpointSeries::prune() const {
  if (keep_ == 0) return;
  const std::vector<Entry> all = entries(folder_);
  for (size_t i = 0; i + static_cast<size_t>(keep_) < all.size(); ++i) {
    std::error_code ec;
    fs::remove_all(all[i].path, ec);
    if (ec) log(LogLevel::kWarning, "could not remove old checkpoint '" + all[i].path.string() + "': " + ec.message());
  }
}

std::vector<int64_t> checkpoint_steps(const std::string& folder) {
  std::vector<int64_t> steps;
  for (const Entry& e : entries(folder)) steps.push_back(e.step);
  return steps;
}

std::string resolve_checkpoint(const std::string& path) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) return path;  // a file, or nothing: the loader says which
  if (fs::is_regular_file(fs::path(path) / "manifest.json", ec)) return path;
  const std::vector<Entry> all = entries(path);
  if (all.empty())
    fail(ErrorCode::kNotFound, "checkpoint folder '", path,
         "' holds no checkpoint (no manifest.json, no step-N.pfckpt file, no step-N folder with a manifest)");
  return all.back().path.string();
}

}  // namespace pf
