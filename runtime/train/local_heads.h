// Local learning's auxiliary heads (docs/SCHEDULES.md, "Local learning"): the small classifier a
// pipeline stage trains on instead of a gradient from the next stage. A head reads the stage's
// output and ends in the model's loss (cross-entropy on the model's targets). Kinds:
//   "linear"            Linear(width -> classes)
//   "layernorm-linear"  LayerNorm(width), Linear(width -> classes)  (the GPT's own ln_f + head)
//   "mlp"               Linear(width -> width), GELU, Linear(width -> classes)
//   "auto"              layernorm-linear for token sequences (a token model's, or a ViT's patch
//                       tokens), linear otherwise
// Where the stage output has one row per sample only after pooling, the head starts with that
// pooling: feature maps [B, C, H, W] (after a conv2d, a groupnorm, a pool) with a global average
// pool (width C), a feature-input model's token sequence [B, T, D] (a ViT's, after its
// patch_embedding) with its class token. Parameters are named "heads.<stage>.<layer>.<weight|bias>".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/models/local_head_kind.h"
#include "runtime/models/model.h"

namespace pf {

// What the output of layers [0, end) of `model` looks like, read from the layers' configs (last
// to first, into a sequential's or a residual's layers): its width (a linear's "out", a conv2d's
// "out_channels", a groupnorm's "channels", an embedding's, block's or LayerNorm's "dim";
// activations keep it) and its form. kInvalidArgument naming the stage when no layer tells.
struct StageOutput {
  enum class Form { kRows, kTokens, kFeatureMaps, kImageTokens } form = Form::kRows;
  int64_t width = 0;
};
StageOutput stage_output(const Model& model, int end, int stage);

// The head of stage `stage` whose layers end at top-level layer `end` (exclusive): a model of the
// head's layers and a cross-entropy loss (its input spec: features of that width, the model's
// classes). Its parameters are allocated and zero; initialise them with local_head_seed.
std::unique_ptr<Model> make_local_head(const Model& model, int stage, int end, const std::string& kind);

// The seed of stage `stage`'s head for a trainer seeded with `seed`.
uint64_t local_head_seed(uint64_t seed, int stage);

}  // namespace pf
