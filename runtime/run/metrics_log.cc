#include "runtime/run/metrics_log.h"

#include <cmath>
#include <filesystem>
#include <system_error>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/input_file.h"
#include "runtime/core/limits.h"
#include "runtime/core/output_file.h"

namespace pf {
namespace {

nlohmann::ordered_json number_or_null(double x) {
  return std::isfinite(x) ? nlohmann::ordered_json(x) : nlohmann::ordered_json();
}

// The lines of an existing log whose step is <= first_step (the log and each line bounded).
std::vector<std::string> kept_lines(const std::string& path, int64_t first_step) {
  std::vector<std::string> kept;
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return kept;
  const std::string text = read_input_file(path, "metrics log", limits::kMaxMetricsLogBytes);
  size_t start = 0;
  for (int64_t number = 1; start < text.size(); ++number) {
    size_t end = text.find('\n', start);
    if (end == std::string::npos) end = text.size();
    if (end - start > limits::kMaxMetricsLogLineBytes)
      fail(ErrorCode::kDataLoss, "metrics log '", path, "' line ", number, ": longer than ",
           limits::kMaxMetricsLogLineBytes, " bytes (is this a PipeForge metrics log?)");
    const std::string line = text.substr(start, end - start);
    start = end + 1;
    if (line.empty()) continue;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("step") || !j["step"].is_number_integer())
      fail(ErrorCode::kDataLoss, "metrics log '", path, "' line ", number,
           ": not a JSON object with an integer \"step\" (is this a PipeForge metrics log?)");
    if (j["step"].get<int64_t>() <= first_step) kept.push_back(line);
  }
  return kept;
}

}  // namespace

MetricsLog::MetricsLog(const std::string& path, int64_t first_step) : path_(path) {
  // A regular file or nothing (never written through a symbolic link); its folders made.
  check_output_path(path, "metrics log");
  const std::vector<std::string> kept = kept_lines(path, first_step);
  out_.open(path, std::ios::trunc);
  if (!out_) fail(ErrorCode::kIoError, "cannot write metrics log '", path, "'");
  for (const std::string& line : kept) out_ << line << '\n';
  out_.flush();
}

void MetricsLog::write(int64_t step, const StepResult& r, const std::optional<EvalResult>& eval,
                       const nlohmann::json& extra) {
  nlohmann::ordered_json j;  // step first, then the rest in a fixed order
  j["step"] = step;
  j["loss"] = number_or_null(r.loss);
  j["lr"] = r.lr;
  j["grad_norm"] = number_or_null(r.grad_norm);
  j["tokens"] = r.tokens;
  j["seconds"] = r.seconds;
  j["tokens_per_s"] = r.seconds > 0 ? static_cast<double>(r.tokens) / r.seconds : 0.0;
  j["bubble_rate"] = r.bubble_rate;
  j["peak_activation_bytes"] = r.peak_activation_bytes;
  if (eval) {
    j["eval_loss"] = number_or_null(eval->loss);
    j["eval_accuracy"] = eval->accuracy;
  }
  PF_CHECK_ARG(extra.is_null() || extra.is_object(), "metrics log: extra fields must be an object");
  if (extra.is_object())
    for (auto it = extra.begin(); it != extra.end(); ++it) j[it.key()] = nlohmann::ordered_json::parse(it.value().dump());
  out_ << j.dump() << '\n';
  out_.flush();
  if (!out_) fail(ErrorCode::kIoError, "cannot write metrics log '", path_, "' at step ", step);
}

}  // namespace pf
