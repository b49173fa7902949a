// Local learning with neuron groups (Patel, Eickenberg, Belilovsky, arXiv 2301.07635; docs/SCHEDULES.md,
// "Neuron groups"): an MLP's top-level layers are split by depth into stages, as ppll does, and every
// stage but the last is split again by width into G groups, each on its own rank:
//   * group g of a stage owns the g-th 1/G of the output units of each linear in the stage. The
//     stage's first linear reads the whole input (every group of the stage before, concatenated in
//     group order); a later linear reads only its own group's units (a block-diagonal layer: the
//     weights between different groups of the same stage do not exist).
//   * each group trains on its own auxiliary head, which reads the stage's whole output with the
//     other groups' units detached (GN-DGL's --detach), plus optionally the diversity term
//     (diversity.h) over the stage's heads;
//   * the last stage is whole and trains on the model's loss.
// So only forward values cross ranks: group outputs (to the siblings and the next stage) and, with
// the diversity term, head logits (to the siblings). Rank of group g of stage k: k G + g; the last
// stage's rank: (K - 1) G.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/models/model.h"
#include "runtime/train/stage.h"

namespace pf::groups {

struct NeuronGroupOptions {
  int groups = 2;                      // G: width groups of every stage but the last (1: plain ppll)
  int stages = 2;                      // K: depth stages
  // Top-level layers per stage (K entries summing to the model's layers); empty: the linears split
  // evenly over the stages, each stage starting at a linear (earlier stages get one more).
  std::vector<int> layers_per_stage;
  std::string head = "linear";         // local_head_kinds(); "auto" is linear for an MLP
  float diversity_weight = 0.0f;       // the diversity term's weight (0: off; GN-DGL uses 0.5)
  float diversity_temperature = 3.0f;  // its softmax temperature (GN-DGL: 3)
  void validate() const;               // kInvalidArgument naming the field
  int ranks() const { return (stages - 1) * groups + 1; }
};

// One rank's share: a group of a stage (its body and head) or the last stage (its body and loss).
struct RankPart {
  int stage = 0, group = 0;
  std::shared_ptr<Model> body;         // the group's layers (own parameters), or the whole model
  std::unique_ptr<Stage> body_stage;   // over body's layers (the last stage: with the model's loss)
  std::unique_ptr<Model> head;         // null on the last stage
  std::unique_ptr<Stage> head_stage;
  int64_t input_width = 0;             // columns of the stage input (every group of the stage before)
  int64_t output_width = 0;            // this group's output columns
  int64_t full_output_width = 0;       // the stage's output columns (all groups)
  int64_t output_offset = 0;           // this group's first column in the stage output
  std::vector<Parameter*> parameters;  // body's, then head's: what the rank's optimizer steps
};

class GroupNetwork {
 public:
  // `model` (initialised from `seed`; retained) must be a feature model whose grouped stages hold
  // only linear, relu and gelu layers, begin with a linear, and whose linears' widths divide by G.
  // Zeroes the weights between groups in `model` (they do not exist in the grouped network), then
  // copies each group's slices out of it. Heads are initialised from local_head_seed(seed, rank).
  GroupNetwork(std::shared_ptr<Model> model, const NeuronGroupOptions& options, uint64_t seed);

  // The options, the head kind resolved ("auto" is "linear").
  const NeuronGroupOptions& options() const { return options_; }
  int ranks() const { return static_cast<int>(parts_.size()); }
  int stages() const { return options_.stages; }
  int groups() const { return options_.groups; }
  bool grouped(int stage) const { return stage + 1 < options_.stages; }
  int rank_of(int stage, int group) const { return stage * options_.groups + group; }
  // The ranks that receive stage `stage`'s output: the next stage's groups (or the last stage).
  std::vector<int> ranks_of(int stage) const;
  const std::vector<std::pair<int, int>>& ranges() const { return ranges_; }
  RankPart& part(int rank) { return *parts_[static_cast<size_t>(rank)]; }
  const RankPart& part(int rank) const { return *parts_[static_cast<size_t>(rank)]; }
  Model& model() const { return *model_; }

  // Copies every group's parameters into the whole model (`model()`), whose weights between groups
  // stay zero: it then computes the grouped network's function (rounded as one GEMM per layer).
  void write_back() const;

 private:
  // Copies a group's slices between the whole model and its body, in either direction.
  void copy_group(const RankPart& part, bool out_of_model) const;

  std::shared_ptr<Model> model_;
  NeuronGroupOptions options_;
  std::vector<std::pair<int, int>> ranges_;
  std::vector<std::unique_ptr<RankPart>> parts_;
};

// The default split: the linears spread evenly over `stages` stages, each starting at a linear.
std::vector<std::pair<int, int>> neuron_group_ranges(const Model& model, const NeuronGroupOptions& options);

}  // namespace pf::groups
