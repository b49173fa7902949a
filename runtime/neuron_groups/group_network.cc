#include "runtime/neuron_groups/group_network.h"

#include <cmath>
#include <cstring>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/layers/cross_entropy.h"
#include "runtime/layers/layer_factory.h"
#include "runtime/models/init.h"
#include "runtime/models/local_head_kind.h"
#include "runtime/train/local_heads.h"

namespace pf::groups {

namespace {

bool is_linear(const Layer& layer) { return std::string(layer.type()) == "linear"; }

// Layers a group may hold: linears (sliced) and element-wise activations (unchanged).
bool groupable(const Layer& layer) {
  const std::string t = layer.type();
  return t == "linear" || t == "relu" || t == "gelu";
}

int64_t config_int(const Layer& layer, const char* field) { return layer.config().at(field).get<int64_t>(); }

// The weight [out, in] and bias [out] of a linear (bias may be null).
struct LinearParams {
  Parameter* weight = nullptr;
  Parameter* bias = nullptr;
};
LinearParams linear_params(Layer& layer) {
  const auto ps = layer.parameters();
  LinearParams p;
  p.weight = ps.at(0);
  if (ps.size() > 1) p.bias = ps[1];
  return p;
}

}  // namespace

void NeuronGroupOptions::validate() const {
  PF_CHECK_ARG(groups >= 1, "neuron_groups: must be >= 1, got ", groups);
  PF_CHECK_ARG(stages >= 2, "neuron groups: the stages (ranks of depth) must be >= 2, got ", stages,
               " (the last stage trains on the model's loss, the others on their heads)");
  PF_CHECK_ARG(layers_per_stage.empty() || static_cast<int>(layers_per_stage.size()) == stages,
               "layers_per_stage: ", layers_per_stage.size(), " entries for ", stages, " stages");
  check_local_head_kind(head);
  PF_CHECK_ARG(std::isfinite(diversity_weight) && diversity_weight >= 0.0f,
               "diversity_weight: must be a finite number >= 0, got ", diversity_weight);
  PF_CHECK_ARG(std::isfinite(diversity_temperature) && diversity_temperature > 0.0f,
               "diversity_temperature: must be a finite number > 0, got ", diversity_temperature);
}

std::vector<std::pair<int, int>> neuron_group_ranges(const Model& model, const NeuronGroupOptions& options) {
  const int n = static_cast<int>(model.layers().size());
  std::vector<std::pair<int, int>> ranges;
  if (!options.layers_per_stage.empty()) {
    int begin = 0;
    for (size_t s = 0; s < options.layers_per_stage.size(); ++s) {
      const int count = options.layers_per_stage[s];
      PF_CHECK_ARG(count >= 1, "layers_per_stage[", s, "]: must be >= 1, got ", count);
      ranges.emplace_back(begin, begin + count);
      begin += count;
    }
    PF_CHECK_ARG(begin == n, "layers_per_stage: sums to ", begin, " layers; the model has ", n);
    return ranges;
  }
  std::vector<int> linears;  // top-level indices of the linears
  for (int i = 0; i < n; ++i)
    if (is_linear(*model.layers()[static_cast<size_t>(i)])) linears.push_back(i);
  const int K = options.stages, L = static_cast<int>(linears.size());
  PF_CHECK_ARG(L >= K, "neuron groups: ", K, " stages need at least ", K, " linear layers; the model has ", L);
  PF_CHECK_ARG(!linears.empty() && linears.front() == 0, "neuron groups: the model's first layer must be a linear");
  int first = 0;
  for (int s = 0; s < K; ++s) {
    const int count = L / K + (s < L % K ? 1 : 0);
    const int begin = linears[static_cast<size_t>(first)];
    first += count;
    const int end = s + 1 == K ? n : linears[static_cast<size_t>(first)];
    ranges.emplace_back(begin, end);
  }
  return ranges;
}

GroupNetwork::GroupNetwork(std::shared_ptr<Model> model, const NeuronGroupOptions& options, uint64_t seed)
    : model_(std::move(model)), options_(options) {
  PF_CHECK_ARG(model_ != nullptr, "neuron groups: model is null");
  options_.validate();
  if (options_.head == "auto") options_.head = "linear";  // what "auto" means for a feature model
  const Model& m = *model_;
  PF_CHECK_ARG(m.input_spec().kind == InputSpec::Kind::kFeatures,
               "neuron groups: the model must take features (an MLP); token models are not supported");
  ranges_ = neuron_group_ranges(m, options_);
  const int G = options_.groups, K = options_.stages;
  int64_t input_width = m.input_spec().features;
  for (int k = 0; k < K; ++k) {
    const auto [begin, end] = ranges_[static_cast<size_t>(k)];
    const int64_t stage_input = input_width;
    if (!grouped(k)) {
      auto part = std::make_unique<RankPart>();
      part->stage = k;
      part->body = model_;
      part->body_stage = std::make_unique<Stage>(m, k, K, begin, end);
      part->input_width = stage_input;
      part->parameters = part->body_stage->parameters();
      parts_.push_back(std::move(part));
      break;
    }
    // Check the stage and find its output width.
    int64_t width = stage_input;
    for (int i = begin; i < end; ++i) {
      Layer& layer = *m.layers()[static_cast<size_t>(i)];
      PF_CHECK_ARG(groupable(layer), "neuron groups: stage ", k, " holds layer ", i, " '", layer.name(), "' of type ",
                   layer.type(), "; a stage split into groups may hold only linear, relu and gelu layers");
      PF_CHECK_ARG(i != begin || is_linear(layer), "neuron groups: stage ", k, " begins with layer ", i, " '",
                   layer.name(), "' (", layer.type(), "); a stage split into groups must begin with a linear");
      if (!is_linear(layer)) continue;
      width = config_int(layer, "out");
      PF_CHECK_ARG(width % G == 0, "neuron groups: layer ", i, " '", layer.name(), "' has ", width,
                   " outputs, which do not split into ", G, " groups");
    }
    for (int g = 0; g < G; ++g) {
      auto part = std::make_unique<RankPart>();
      part->stage = k;
      part->group = g;
      part->input_width = stage_input;
      part->full_output_width = width;
      part->output_width = width / G;
      part->output_offset = g * (width / G);
      // The group's layers: each linear's g-th 1/G of the outputs, reading the whole input (the
      // first linear) or the group's own units.
      nlohmann::json layers = nlohmann::json::array();
      int64_t in = stage_input;
      for (int i = begin; i < end; ++i) {
        nlohmann::json c = m.layers()[static_cast<size_t>(i)]->config();
        if (is_linear(*m.layers()[static_cast<size_t>(i)])) {
          c["in"] = in;
          c["out"] = c.at("out").get<int64_t>() / G;
          in = c["out"].get<int64_t>();
        }
        layers.push_back(c);
      }
      InputSpec spec;
      spec.kind = InputSpec::Kind::kFeatures;
      spec.features = stage_input;
      spec.classes = m.input_spec().classes;
      std::vector<std::unique_ptr<Layer>> built;
      for (size_t i = 0; i < layers.size(); ++i)
        built.push_back(layer_from_json(layers[i], "group", "stage " + std::to_string(k) + " layer " + std::to_string(i)));
      part->body = std::make_shared<Model>(spec, std::move(built), std::make_unique<CrossEntropyLoss>());
      // Not the body model's last stage: it carries no loss (the head does).
      part->body_stage = std::make_unique<Stage>(*part->body, 0, 2, 0, static_cast<int>(layers.size()));
      part->head = make_local_head(m, k, end, options_.head);
      initialize_parameters(part->head->parameters(), local_head_seed(seed, rank_of(k, g)));
      part->head_stage = std::make_unique<Stage>(*part->head, 0, 1, 0, static_cast<int>(part->head->layers().size()));
      part->parameters = part->body_stage->parameters();
      for (Parameter* p : part->head->parameters()) part->parameters.push_back(p);
      parts_.push_back(std::move(part));
    }
    input_width = width;
  }
  // Zero the weights between groups in the whole model, then copy each group's slices out of it.
  for (int k = 0; k + 1 < K; ++k) {
    const auto [begin, end] = ranges_[static_cast<size_t>(k)];
    for (int i = begin + 1; i < end; ++i) {
      Layer& layer = *m.layers()[static_cast<size_t>(i)];
      if (!is_linear(layer)) continue;
      const LinearParams p = linear_params(layer);
      const int64_t out = p.weight->value.dim(0), in = p.weight->value.dim(1);
      float* w = p.weight->value.f32();
      for (int64_t r = 0; r < out; ++r)
        for (int64_t c = 0; c < in; ++c)
          if (r / (out / G) != c / (in / G)) w[r * in + c] = 0.0f;
    }
  }
  for (const auto& part : parts_) copy_group(*part, true);
}

std::vector<int> GroupNetwork::ranks_of(int stage) const {
  std::vector<int> r;
  if (stage + 1 >= options_.stages) return r;
  if (!grouped(stage + 1)) return {rank_of(stage + 1, 0)};
  for (int g = 0; g < options_.groups; ++g) r.push_back(rank_of(stage + 1, g));
  return r;
}

void GroupNetwork::write_back() const {
  for (const auto& part : parts_) copy_group(*part, false);
}

void GroupNetwork::copy_group(const RankPart& part, bool out_of_model) const {
  if (!grouped(part.stage)) return;
  const auto [begin, end] = ranges_[static_cast<size_t>(part.stage)];
  int j = 0;  // the body's layer
  bool first = true;
  for (int i = begin; i < end; ++i, ++j) {
    Layer& whole_layer = *model_->layers()[static_cast<size_t>(i)];
    if (!is_linear(whole_layer)) continue;
    const LinearParams whole = linear_params(whole_layer);
    const LinearParams group = linear_params(*part.body->layers()[static_cast<size_t>(j)]);
    const int64_t out = group.weight->value.dim(0), in = group.weight->value.dim(1);
    const int64_t full_in = whole.weight->value.dim(1);
    // The group's rows; the first linear reads every input column, a later one its own group's.
    const int64_t col = first ? 0 : part.group * in;
    for (int64_t r = 0; r < out; ++r) {
      float* w = whole.weight->value.f32() + (part.group * out + r) * full_in + col;
      float* g = group.weight->value.f32() + r * in;
      std::memcpy(out_of_model ? g : w, out_of_model ? w : g, static_cast<size_t>(in) * sizeof(float));
    }
    if (group.bias) {
      float* w = whole.bias->value.f32() + part.group * out;
      float* g = group.bias->value.f32();
      std::memcpy(out_of_model ? g : w, out_of_model ? w : g, static_cast<size_t>(out) * sizeof(float));
    }
    first = false;
  }
}

}  // namespace pf::groups
