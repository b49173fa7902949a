// Builds layers and losses from their JSON descriptions (the "layers" and "loss" entries of the
// model JSON). Every layer's config() is accepted here and rebuilds an identical layer.
//
// A layer is {"type": ..., "name": optional string, ...fields}:
//   linear            {in, out, bias = true, init_std = 0.02, tied_to = "", parallel = absent}
//                     (parallel: "column" or "row", the split under tensor parallelism,
//                     runtime/tensor_parallel/group.h)
//   relu, gelu        {}
//   layernorm         {dim, eps = 1e-5}
//   embedding         {vocab, seq_len, dim, init_std = 0.02}
//   attention         {dim, heads, init_std = 0.02, causal = true}
//   transformer_block {dim, heads, mlp_hidden = 4 * dim, causal = true}
//   patch_embedding   {channels = 1, height, width, patch, dim, init_std = 0.02}
//   class_token       {}
//   conv2d            {in_channels, out_channels, kernel = 3, stride = 1, padding = 0, bias = true,
//                      init_std = sqrt(2 / (in_channels kernel^2)), height = 0, width = 0}
//   groupnorm         {channels, groups, eps = 1e-5}
//   max_pool2d, avg_pool2d {kernel, stride = kernel}
//   global_avg_pool   {}
//   residual          {layers: [...], shortcut: [...] optional}  (body = a Sequential "<name>.body"
//                      of the layers; shortcut = a Sequential "<name>.shortcut")
//   sequential        {layers: [...]}
// Sub-layers without a "name" are called "<name>.0", "<name>.1", ...
// A loss is "cross_entropy" or {"type": "cross_entropy"}.
//
// Parsing is strict: an unknown field, a missing required field, a value of the wrong JSON type or
// out of range (sizes must be positive) throws kInvalidArgument whose message starts with the JSON
// path of the offending value (e.g. "layers[2].heads"); an unknown type lists the known ones.
// Nesting deeper than limits::kMaxLayerNesting is refused there too.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "runtime/layers/layer.h"
#include "runtime/layers/loss.h"

namespace pf {

// Checks a list of layer descriptions before any is built: residual/sequential nesting at most
// limits::kMaxLayerNesting deep and at most limits::kMaxLayers layers in all, nested ones
// included. kInvalidArgument naming `path` and the limit.
void check_layer_descriptions(const nlohmann::json& layers, const std::string& path);

// `default_name` is used when the description has no "name"; `path` is the description's JSON path
// for error messages ("" for the document root).
std::unique_ptr<Layer> layer_from_json(const nlohmann::json& description, const std::string& default_name,
                                       const std::string& path);

std::unique_ptr<Loss> loss_from_json(const nlohmann::json& description, const std::string& path);

}  // namespace pf
