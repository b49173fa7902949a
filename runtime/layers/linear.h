// y = x W^T + b over the last dimension; x is [..., in], W is [out, in], b is [out].
#pragma once

#include "runtime/layers/layer.h"

namespace pf {

class Linear : public Layer {
 public:
  Linear(std::string name, int64_t in_features, int64_t out_features, bool bias = true,
         float init_stddev = 0.02f);
  const char* type() const override { return "linear"; }
  nlohmann::json config() const override;
  std::vector<Parameter*> parameters() override;

  Tensor forward(const Tensor& input, SavedContext& ctx) override;
  Tensor backward_input(SavedContext& ctx, const Tensor& grad_output) override;
  void backward_weight(SavedContext& ctx) override;

  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

 private:
  int64_t in_, out_;
  bool has_bias_;
  float init_stddev_;
  Parameter weight_, bias_;
};

}  // namespace pf
