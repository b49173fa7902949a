#include "runtime/planner/model_profile.h"

#include "runtime/models/builders.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>

#include "runtime/core/error.h"
#include "runtime/core/median.h"
#include "runtime/core/json_object.h"
#include "runtime/planner/json_input.h"
#include "runtime/core/limits.h"
#include "runtime/execution/partition.h"
#include "runtime/layers/saved_context.h"
#include "runtime/tensor/memory_tracker.h"

namespace pf::plan {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

int64_t bytes_of(const std::vector<SavedContext>& contexts) { return static_cast<int64_t>(context_bytes(contexts)); }

// One F, B, W pass over the layers; adds each layer's times to the runs and, on the first pass,
// records the bytes.
void profile_pass(Model& model, const Batch& micro_batch, bool record_bytes, MicroBatchCosts* out,
                  std::vector<std::vector<double>>* f, std::vector<std::vector<double>>* b,
                  std::vector<std::vector<double>>* w) {
  const auto& layers = model.layers();
  const size_t n = layers.size();
  std::vector<std::vector<SavedContext>> ctx(n);
  for (auto& c : ctx) c.resize(1);
  SavedContext loss_ctx;
  Tensor x = micro_batch.inputs;
  {
    MemoryCategoryScope scope(MemoryCategory::kActivations);
    for (size_t i = 0; i < n; ++i) {
      if (record_bytes) out->layers[i].input_bytes = i == 0 ? 0 : static_cast<int64_t>(x.nbytes());
      const auto t0 = clock_type::now();
      x = layers[i]->forward(x, ctx[i][0]);
      if (i + 1 == n) model.loss().forward(x, micro_batch.targets, 1.0f, loss_ctx);
      (*f)[i].push_back(seconds_since(t0));
    }
  }
  if (record_bytes) {
    for (size_t i = 0; i < n; ++i) {
      LayerCosts& l = out->layers[i];
      // The loss's context lives only from the last F to its backward, which follows at once.
      l.activation_bytes = bytes_of(ctx[i]);
      if (i > 0) {
        std::vector<SavedContext> both(2);
        both[0] = ctx[i - 1][0];
        both[1] = ctx[i][0];
        l.shared_with_previous_bytes =
            std::max<int64_t>(0, bytes_of(ctx[i - 1]) + bytes_of(ctx[i]) - bytes_of(both));
      }
    }
  }
  MemoryCategoryScope scope(MemoryCategory::kWorkspace);
  auto t0 = clock_type::now();
  Tensor g = model.loss().backward(loss_ctx);
  double loss_backward = seconds_since(t0);
  for (size_t i = n; i-- > 0;) {
    t0 = clock_type::now();
    g = layers[i]->backward_input(ctx[i][0], g);
    (*b)[i].push_back(seconds_since(t0) + (i + 1 == n ? loss_backward : 0.0));
    if (record_bytes) out->layers[i].weight_pending_bytes = bytes_of(ctx[i]);
  }
  for (size_t i = 0; i < n; ++i) {
    t0 = clock_type::now();
    layers[i]->backward_weight(ctx[i][0]);
    (*w)[i].push_back(seconds_since(t0));
  }
}

}  // namespace

const TensorParallelProfile::MemberBytes* TensorParallelProfile::member(int T, bool sequence_parallel) const {
  for (const MemberBytes& m : member_bytes)
    if (m.tensor_parallel == T && m.sequence_parallel == sequence_parallel) return &m;
  return nullptr;
}

int ModelProfile::num_layers() const { return sizes.empty() ? 0 : static_cast<int>(sizes[0].layers.size()); }

int64_t ModelProfile::parameter_elements() const {
  int64_t n = 0;
  if (!sizes.empty())
    for (const LayerCosts& l : sizes[0].layers) n += l.parameters;
  return n;
}

MicroBatchCosts ModelProfile::at_rows(int64_t rows) const {
  PF_CHECK_ARG(!sizes.empty(), "the profile has no micro-batch sizes");
  PF_CHECK_ARG(rows >= 1, "micro-batch rows must be >= 1, got ", rows);
  const MicroBatchCosts* nearest = &sizes[0];
  for (const MicroBatchCosts& s : sizes) {
    if (s.rows == rows) return s;
    if (std::llabs(s.rows - rows) < std::llabs(nearest->rows - rows)) nearest = &s;
  }
  MicroBatchCosts scaled = *nearest;
  const double k = static_cast<double>(rows) / static_cast<double>(nearest->rows);
  auto scale_bytes = [k](int64_t b) { return static_cast<int64_t>(std::llround(static_cast<double>(b) * k)); };
  scaled.rows = rows;
  scaled.tokens = scale_bytes(nearest->tokens);
  for (LayerCosts& l : scaled.layers) {
    l.forward_s *= k;
    l.backward_input_s *= k;
    l.backward_weight_s *= k;
    l.activation_bytes = scale_bytes(l.activation_bytes);
    l.shared_with_previous_bytes = scale_bytes(l.shared_with_previous_bytes);
    l.weight_pending_bytes = scale_bytes(l.weight_pending_bytes);
    l.input_bytes = scale_bytes(l.input_bytes);
  }
  return scaled;
}

double Calibration::relative_scale(int64_t rows) const {
  const std::vector<RowsScale>& t = relative_scale_by_rows;
  if (t.empty()) return 1;
  if (rows <= t.front().rows) return t.front().relative;
  if (rows >= t.back().rows) return t.back().relative;
  size_t i = 1;
  while (t[i].rows < rows) ++i;
  const double x = std::log(static_cast<double>(rows)), x0 = std::log(static_cast<double>(t[i - 1].rows)),
               x1 = std::log(static_cast<double>(t[i].rows));
  return t[i - 1].relative + (t[i].relative - t[i - 1].relative) * (x - x0) / (x1 - x0);
}

int optimizer_state_floats(const OptimizerConfig& config) {
  if (config.kind == OptimizerConfig::Kind::kAdamW) return 2;
  return config.momentum > 0 ? 1 : 0;
}

namespace {

// The micro-batch's costs without times, and one pass recording the bytes into them; f, b and w
// get that pass's times.
MicroBatchCosts first_pass(Model& model, const Batch& micro_batch, std::vector<std::vector<double>>* f,
                           std::vector<std::vector<double>>* b, std::vector<std::vector<double>>* w) {
  model.check_batch(micro_batch.inputs, micro_batch.targets, "profile micro-batch");
  const auto& layers = model.layers();
  const size_t n = layers.size();
  MicroBatchCosts out;
  out.rows = micro_batch.rows();
  out.tokens = micro_batch.targets.numel();
  out.layers.resize(n);
  const std::vector<int64_t> parameters = exec::layer_parameter_counts(model);
  for (size_t i = 0; i < n; ++i) {
    LayerCosts& l = out.layers[i];
    l.name = layers[i]->name();
    l.type = layers[i]->type();
    l.parameters = parameters[i];
  }
  f->assign(n, {});
  b->assign(n, {});
  w->assign(n, {});
  profile_pass(model, micro_batch, true, &out, f, b, w);
  return out;
}

}  // namespace

MicroBatchCosts measure_micro_batch_bytes(Model& model, const Batch& micro_batch) {
  std::vector<std::vector<double>> f, b, w;
  return first_pass(model, micro_batch, &f, &b, &w);
}

MicroBatchCosts measure_micro_batch(Model& model, const Batch& micro_batch, int repeats) {
  PF_CHECK_ARG(repeats >= 1, "profile: repeats must be >= 1, got ", repeats);
  std::vector<std::vector<double>> f, b, w;
  // One untimed pass first: the first touches of fresh memory and BLAS's start-up are not a step's.
  MicroBatchCosts out = first_pass(model, micro_batch, &f, &b, &w);
  const size_t n = out.layers.size();
  for (auto* runs : {&f, &b, &w})
    for (auto& r : *runs) r.clear();
  for (int r = 0; r < repeats; ++r) profile_pass(model, micro_batch, false, &out, &f, &b, &w);
  for (size_t i = 0; i < n; ++i) {
    out.layers[i].forward_s = median(f[i]);
    out.layers[i].backward_input_s = median(b[i]);
    out.layers[i].backward_weight_s = median(w[i]);
  }
  return out;
}

double measure_update_seconds(Model& model, const OptimizerConfig& config, int repeats) {
  PF_CHECK_ARG(repeats >= 1, "profile: repeats must be >= 1, got ", repeats);
  const std::vector<Parameter*>& params = model.parameters();
  const int64_t elements = model.num_parameter_elements();
  if (elements == 0) return 0.0;
  std::unique_ptr<Optimizer> optimizer = make_optimizer(config);
  std::vector<double> runs;
  for (int r = 0; r <= repeats; ++r) {  // the first creates the optimizer state: not timed
    const auto t0 = clock_type::now();
    for (Parameter* p : params) std::memset(p->grad.data<char>(), 0, p->grad.nbytes());
    optimizer->step(params);
    if (r > 0) runs.push_back(seconds_since(t0));
  }
  return median(runs) / static_cast<double>(elements);
}

ModelProfile profile_model(Model& model, const std::vector<int64_t>& rows,
                           const std::function<Batch(int64_t rows)>& micro_batch, const OptimizerConfig& optimizer,
                           int repeats) {
  PF_CHECK_ARG(!rows.empty(), "profile: no micro-batch sizes to measure");
  ModelProfile p;
  p.optimizer = optimizer.kind == OptimizerConfig::Kind::kAdamW ? "adamw" : "sgd";
  p.optimizer_state_floats = optimizer_state_floats(optimizer);
  for (int64_t r : rows) p.sizes.push_back(measure_micro_batch(model, micro_batch(r), repeats));
  p.update_seconds_per_parameter = measure_update_seconds(model, optimizer, repeats);
  return p;
}

ModelProfile profile_model_copy(const Model& model, const Batch& batch, const std::vector<int64_t>& rows,
                                const OptimizerConfig& optimizer, int repeats, std::shared_ptr<Model>* copy) {
  std::shared_ptr<Model> twin = build_model_from_json_text(model.to_json().dump());
  ModelProfile profile = profile_model(
      *twin, rows, [&](int64_t r) { return batch.micro_batch(0, static_cast<int>(batch.rows() / r)); }, optimizer,
      repeats);
  if (copy != nullptr) *copy = std::move(twin);
  return profile;
}

nlohmann::json profile_to_json(const ModelProfile& profile) {
  nlohmann::json sizes = nlohmann::json::array();
  for (const MicroBatchCosts& s : profile.sizes) {
    nlohmann::json layers = nlohmann::json::array();
    for (const LayerCosts& l : s.layers) {
      layers.push_back({{"name", l.name},
                        {"type", l.type},
                        {"parameters", l.parameters},
                        {"forward_s", l.forward_s},
                        {"backward_input_s", l.backward_input_s},
                        {"backward_weight_s", l.backward_weight_s},
                        {"activation_bytes", l.activation_bytes},
                        {"shared_with_previous_bytes", l.shared_with_previous_bytes},
                        {"weight_pending_bytes", l.weight_pending_bytes},
                        {"input_bytes", l.input_bytes}});
    }
    sizes.push_back({{"rows", s.rows}, {"tokens", s.tokens}, {"layers", layers}});
  }
  const Calibration& c = profile.calibration;
  nlohmann::json calibration = nlohmann::json::object();
  if (c.measured) {
    calibration = {{"sequential_step_overhead_s", c.sequential_step_overhead_s},
                   {"compute_scale", c.compute_scale},
                   {"action_overhead_s", c.action_overhead_s},
                   {"transfer_overhead_s", c.transfer_overhead_s},
                   {"step_overhead_s", c.step_overhead_s}};
    if (c.process_compute_scale > 0) calibration["process_compute_scale"] = c.process_compute_scale;
    calibration["sequential_compute_scale"] = c.sequential_compute_scale;
    if (!c.relative_scale_by_rows.empty()) {
      nlohmann::json by_rows = nlohmann::json::array();
      for (const Calibration::RowsScale& r : c.relative_scale_by_rows)
        by_rows.push_back({{"rows", r.rows}, {"relative", r.relative}});
      calibration["relative_scale_by_rows"] = by_rows;
    }
  }
  nlohmann::json out = {{"format", "pipeforge.profile/1"},
                        {"model", profile.model},
                        {"calibration", calibration},
                        {"optimizer", profile.optimizer},
                        {"optimizer_state_floats", profile.optimizer_state_floats},
                        {"update_seconds_per_parameter", profile.update_seconds_per_parameter},
                        {"micro_batch_sizes", sizes}};
  const TensorParallelProfile& t = profile.tensor_parallel;
  if (!t.degrees.empty()) {
    nlohmann::json layers = nlohmann::json::array();
    for (size_t i = 0; i < t.split_parameters.size(); ++i)
      layers.push_back({{"split_parameters", t.split_parameters[i]},
                        {"forward_floats", t.forward_floats[i]},
                        {"backward_floats", t.backward_floats[i]}});
    out["tensor_parallel"] = {{"degrees", t.degrees}, {"layers", layers}};
    if (!t.member_bytes.empty()) {
      nlohmann::json members = nlohmann::json::array();
      for (const TensorParallelProfile::MemberBytes& m : t.member_bytes)
        members.push_back({{"tensor_parallel", m.tensor_parallel},
                           {"sequence_parallel", m.sequence_parallel},
                           {"activation_bytes", m.activation_bytes},
                           {"shared_with_previous_bytes", m.shared_with_previous_bytes},
                           {"weight_pending_bytes", m.weight_pending_bytes},
                           {"input_bytes", m.input_bytes}});
      out["tensor_parallel"]["member_bytes"] = {{"rows", t.member_bytes_rows}, {"members", members}};
    }
  }
  return out;
}

namespace {

double get_seconds(const JsonObject& o, const std::string& key) {
  PF_CHECK_ARG(o.has(key), o.path_of(key), ": missing");
  const nlohmann::json& v = o.get(key);
  PF_CHECK_ARG(v.is_number(), o.path_of(key), ": expected a number of seconds, got ", v.type_name());
  const double s = v.get<double>();
  PF_CHECK_ARG(std::isfinite(s) && s >= 0 && s < 1e6, o.path_of(key), ": ", s, " is not a time in [0, 1e6) s");
  return s;
}

// A calibration's slow-down factor: a number in [0.1, 100].
double get_scale(const JsonObject& o, const std::string& key) {
  const double k = get_seconds(o, key);
  PF_CHECK_ARG(k >= 0.1 && k <= 100, o.path_of(key), ": ", k, " is not in [0.1, 100]");
  return k;
}

// The calibration's scale per micro-batch size: [{"rows", "relative"}, ...], ascending rows.
std::vector<Calibration::RowsScale> get_rows_scales(const JsonObject& o, const std::string& key) {
  const nlohmann::json& list = o.get_array(key);
  PF_CHECK_ARG(list.size() <= 64, o.path_of(key), ": expected at most 64 sizes, got ", list.size());
  std::vector<Calibration::RowsScale> out;
  for (size_t i = 0; i < list.size(); ++i) {
    JsonObject e(list[i], o.path_of(key) + "[" + std::to_string(i) + "]");
    Calibration::RowsScale r;
    r.rows = e.get_int_in("rows", 1, int64_t{1} << 30);
    r.relative = get_scale(e, "relative");
    e.reject_unknown();
    PF_CHECK_ARG(out.empty() || r.rows > out.back().rows, e.path_of("rows"), ": sizes must be in ascending rows, each once");
    out.push_back(r);
  }
  return out;
}

int64_t get_bytes(const JsonObject& o, const std::string& key) {
  return o.get_int_in(key, 0, 0, int64_t{1} << 50);
}

}  // namespace

namespace {

ModelProfile profile_from_json_fields(const nlohmann::json& value) {
  JsonObject root(value, "");
  const std::string format = root.get_string("format");
  PF_CHECK_ARG(format == "pipeforge.profile/1", root.path_of("format"), ": '", format,
               "' is not a profile of this version (pipeforge.profile/1)");
  ModelProfile p;
  p.model = root.has("model") ? root.get("model") : nlohmann::json::object();
  p.optimizer = root.get_string("optimizer", "adamw");
  PF_CHECK_ARG(p.optimizer == "adamw" || p.optimizer == "sgd", root.path_of("optimizer"), ": '", p.optimizer,
               "' is not adamw or sgd");
  p.optimizer_state_floats = static_cast<int>(root.get_int_in("optimizer_state_floats", 2, 0, 2));
  p.update_seconds_per_parameter = get_seconds(root, "update_seconds_per_parameter");
  if (root.has("calibration")) {
    JsonObject c(root.get("calibration"), "calibration");
    Calibration& k = p.calibration;
    k.measured = c.has("compute_scale");
    if (k.measured) {
      k.sequential_step_overhead_s = get_seconds(c, "sequential_step_overhead_s");
      k.compute_scale = get_scale(c, "compute_scale");
      k.action_overhead_s = get_seconds(c, "action_overhead_s");
      // Profiles saved before the per-transfer overhead was fitted apart have none.
      if (c.has("transfer_overhead_s")) k.transfer_overhead_s = get_seconds(c, "transfer_overhead_s");
      k.step_overhead_s = get_seconds(c, "step_overhead_s");
      if (c.has("sequential_compute_scale")) k.sequential_compute_scale = get_scale(c, "sequential_compute_scale");
      if (c.has("process_compute_scale")) k.process_compute_scale = get_scale(c, "process_compute_scale");
      // Profiles saved before the scale per micro-batch size have none: 1 at every size.
      if (c.has("relative_scale_by_rows")) k.relative_scale_by_rows = get_rows_scales(c, "relative_scale_by_rows");
    }
    c.reject_unknown();
  }
  const nlohmann::json& sizes = root.get_array("micro_batch_sizes");
  PF_CHECK_ARG(!sizes.empty() && sizes.size() <= 64, root.path_of("micro_batch_sizes"),
               ": expected 1 to 64 sizes, got ", sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    JsonObject s(sizes[i], root.path_of("micro_batch_sizes") + "[" + std::to_string(i) + "]");
    MicroBatchCosts m;
    m.rows = s.get_int_in("rows", 1, int64_t{1} << 30);
    m.tokens = s.get_int_in("tokens", 1, int64_t{1} << 40);
    const nlohmann::json& layers = s.get_array("layers");
    PF_CHECK_ARG(!layers.empty() && static_cast<int64_t>(layers.size()) <= limits::kMaxLayers, s.path_of("layers"),
                 ": expected 1 to ", limits::kMaxLayers, " layers, got ", layers.size());
    if (!p.sizes.empty())
      PF_CHECK_ARG(layers.size() == p.sizes[0].layers.size(), s.path_of("layers"), ": ", layers.size(),
                   " layers, but micro_batch_sizes[0] has ", p.sizes[0].layers.size());
    for (size_t j = 0; j < layers.size(); ++j) {
      JsonObject l(layers[j], s.path_of("layers") + "[" + std::to_string(j) + "]");
      LayerCosts c;
      c.name = l.get_string("name", "");
      c.type = l.get_string("type", "");
      PF_CHECK_ARG(c.name.size() <= limits::kMaxNameBytes, l.path_of("name"), ": longer than ",
                   limits::kMaxNameBytes, " bytes");
      PF_CHECK_ARG(c.type.size() <= limits::kMaxNameBytes, l.path_of("type"), ": longer than ",
                   limits::kMaxNameBytes, " bytes");
      c.parameters = l.get_int_in("parameters", 0, 0, int64_t{1} << 40);
      c.forward_s = get_seconds(l, "forward_s");
      c.backward_input_s = get_seconds(l, "backward_input_s");
      c.backward_weight_s = get_seconds(l, "backward_weight_s");
      c.activation_bytes = get_bytes(l, "activation_bytes");
      c.shared_with_previous_bytes = get_bytes(l, "shared_with_previous_bytes");
      c.weight_pending_bytes = get_bytes(l, "weight_pending_bytes");
      c.input_bytes = get_bytes(l, "input_bytes");
      l.reject_unknown();
      m.layers.push_back(std::move(c));
    }
    s.reject_unknown();
    PF_CHECK_ARG(p.sizes.empty() || m.rows > p.sizes.back().rows, s.path_of("rows"),
                 ": sizes must be in ascending rows, each once");
    p.sizes.push_back(std::move(m));
  }
  // Optional: profiles saved before tensor parallelism have none (`plan` reads them off the model).
  if (root.has("tensor_parallel")) {
    JsonObject t(root.get("tensor_parallel"), root.path_of("tensor_parallel"));
    TensorParallelProfile& k = p.tensor_parallel;
    const nlohmann::json& degrees = t.get_array("degrees");
    for (size_t i = 0; i < degrees.size(); ++i) {
      PF_CHECK_ARG(degrees[i].is_number_integer() && degrees[i].get<int64_t>() >= 2 &&
                       degrees[i].get<int64_t>() <= kMaxProfiledTensorParallel &&
                       (k.degrees.empty() || degrees[i].get<int64_t>() > k.degrees.back()),
                   t.path_of("degrees"), "[", i, "]: expected ascending integers in [2, ", kMaxProfiledTensorParallel, "]");
      k.degrees.push_back(degrees[i].get<int>());
    }
    const nlohmann::json& layers = t.get_array("layers");
    PF_CHECK_ARG(layers.size() == p.sizes[0].layers.size(), t.path_of("layers"), ": ", layers.size(),
                 " layers, but the micro-batch sizes have ", p.sizes[0].layers.size());
    for (size_t j = 0; j < layers.size(); ++j) {
      JsonObject l(layers[j], t.path_of("layers") + "[" + std::to_string(j) + "]");
      k.split_parameters.push_back(l.get_int_in("split_parameters", 0, 0, p.sizes[0].layers[j].parameters));
      k.forward_floats.push_back(l.get_int_in("forward_floats", 0, 0, int64_t{1} << 30));
      k.backward_floats.push_back(l.get_int_in("backward_floats", 0, 0, int64_t{1} << 30));
      l.reject_unknown();
    }
    // Optional: profiles saved before the members' bytes were measured keep activations whole.
    if (t.has("member_bytes")) {
      JsonObject mb(t.get("member_bytes"), t.path_of("member_bytes"));
      k.member_bytes_rows = mb.get_int_in("rows", 1, int64_t{1} << 30);
      const nlohmann::json& members = mb.get_array("members");
      for (size_t i = 0; i < members.size(); ++i) {
        JsonObject e(members[i], mb.path_of("members") + "[" + std::to_string(i) + "]");
        TensorParallelProfile::MemberBytes m;
        m.tensor_parallel = static_cast<int>(e.get_int_in("tensor_parallel", 2, kMaxProfiledTensorParallel));
        PF_CHECK_ARG(std::find(k.degrees.begin(), k.degrees.end(), m.tensor_parallel) != k.degrees.end(),
                     e.path_of("tensor_parallel"), ": ", m.tensor_parallel, " is not one of the degrees");
        m.sequence_parallel = e.get_bool("sequence_parallel", false);
        PF_CHECK_ARG(k.member(m.tensor_parallel, m.sequence_parallel) == nullptr, e.path_of("tensor_parallel"),
                     ": a second entry for tensor_parallel ", m.tensor_parallel);
        for (auto [key, field] : {std::pair{"activation_bytes", &m.activation_bytes},
                                  std::pair{"shared_with_previous_bytes", &m.shared_with_previous_bytes},
                                  std::pair{"weight_pending_bytes", &m.weight_pending_bytes},
                                  std::pair{"input_bytes", &m.input_bytes}}) {
          const nlohmann::json& list = e.get_array(key);
          PF_CHECK_ARG(list.size() == layers.size(), e.path_of(key), ": ", list.size(), " layers, but the profile has ",
                       layers.size());
          for (size_t j = 0; j < list.size(); ++j) {
            PF_CHECK_ARG(list[j].is_number_integer() && list[j].get<int64_t>() >= 0 &&
                             list[j].get<int64_t>() <= (int64_t{1} << 50),
                         e.path_of(key), "[", j, "]: expected a byte count in [0, 2^50]");
            field->push_back(list[j].get<int64_t>());
          }
        }
        e.reject_unknown();
        k.member_bytes.push_back(std::move(m));
      }
      mb.reject_unknown();
    }
    t.reject_unknown();
  }
  root.reject_unknown();
  return p;
}

}  // namespace

ModelProfile profile_from_json(const nlohmann::json& value, const std::string& where) {
  return read_json_input(value, where, profile_from_json_fields);
}

}  // namespace pf::plan
