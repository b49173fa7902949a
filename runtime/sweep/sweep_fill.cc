#include "runtime/sweep/sweep_fill.h"

#include <algorithm>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/input_file.h"

namespace pf::sweep {

namespace {

constexpr uint64_t kMaxSpecBytes = uint64_t{16} << 20;

}  // namespace

SweepSpec read_sweep_spec_file(const std::string& path) {
  nlohmann::json j = read_json_input(path, "sweep spec", kMaxSpecBytes);
  PF_CHECK_ARG(j.is_object(), path, ": expected a JSON object, got ", j.type_name());
  if (j.contains("data") && j["data"].is_string()) {
    const std::string data = j["data"].get<std::string>();
    const size_t slash = path.rfind('/');
    const std::string folder = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
    const PathEscape escape = find_path_escape(folder, data);
    PF_CHECK_ARG(escape.kind == PathEscape::Kind::kInside, path,
                 ": data: a path in a spec file must stay inside the file's folder (relative, no '..', no symbolic ",
                 "link)", escape.kind == PathEscape::Kind::kSymlink ? "; '" + escape.link + "' is a symbolic link" : "",
                 ", got '", data, "'");
    j["data"] = folder + data;
  }
  return SweepSpec::from_json(j, path);
}

SweepFill::SweepFill(const SweepSpec& spec, int ranks)
    : spec_(spec), data_(load_sweep_data(spec)), seconds_(static_cast<size_t>(std::max(ranks, 1))) {
  PF_CHECK_ARG(ranks >= 1, "a fill job needs at least one rank, got ", ranks);
  sweep_ = std::make_unique<Sweep>(spec_, data_, ranks);
  for (std::atomic<double>& s : seconds_) s.store(0.0);
}

double SweepFill::run(int rank, double budget_seconds) {
  if (rank < 0 || rank >= sweep_->shards() || sweep_->done(rank)) return 0.0;
  const double s = sweep_->run_for(rank, budget_seconds);
  std::atomic<double>& total = seconds_[static_cast<size_t>(rank)];
  total.store(total.load() + s);  // only `rank`'s worker writes its entry
  calls_.fetch_add(1);
  return s;
}

nlohmann::json SweepFill::report() const {
  double seconds = 0;
  for (const std::atomic<double>& s : seconds_) seconds += s.load();
  nlohmann::json models = nlohmann::json::array();
  for (const ModelResult& r : ranked(sweep_->results())) models.push_back(r.to_json());
  return {{"kind", "sweep"},
          {"spec", spec_.to_json()},
          {"data", data_->description},
          {"model_count", sweep_->models()},
          {"shards", sweep_->shards()},
          {"steps_per_model", sweep_->steps_per_model()},
          {"steps_taken", sweep_->steps_taken()},
          {"steps_total", sweep_->steps_per_model() * sweep_->shards()},
          {"model_steps", sweep_->model_steps()},
          {"done", sweep_->done()},
          {"fill_seconds", seconds},
          {"fill_calls", calls_.load()},
          {"models", models}};
}

std::string SweepFill::summary(const nlohmann::json& r) const {
  const int64_t taken = r["steps_taken"], total = r["steps_total"];
  char line[512];
  std::snprintf(line, sizeof(line), "sweep of %lld models: %lld of %lld steps (%.1f%%) in %.3f s of bubbles",
                static_cast<long long>(r["model_count"].get<int64_t>()), static_cast<long long>(taken), static_cast<long long>(total),
                total > 0 ? 100.0 * static_cast<double>(taken) / static_cast<double>(total) : 0.0,
                r["fill_seconds"].get<double>());
  std::string out = line;
  if (!r["models"].empty()) {
    const nlohmann::json& best = r["models"][0];
    const bool held = !best["held_out_loss"].is_null();
    std::snprintf(line, sizeof(line), "\nbest: model %lld (hidden %lld, %s, lr %g, seed %llu), %s %.4f",
                  static_cast<long long>(best["index"].get<int64_t>()), static_cast<long long>(best["hidden"].get<int64_t>()),
                  best["activation"].get<std::string>().c_str(), best["lr"].get<double>(),
                  static_cast<unsigned long long>(best["seed"].get<uint64_t>()), held ? "held-out loss" : "training loss",
                  held ? best["held_out_loss"].get<double>()
                       : (best["train_loss"].is_null() ? 0.0 : best["train_loss"].get<double>()));
    out += line;
  }
  return out;
}

}  // namespace pf::sweep
