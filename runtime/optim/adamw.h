// AdamW (Loshchilov & Hutter), as in PyTorch's torch.optim.AdamW:
//   w *= 1 - lr*wd;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2;
//   w -= lr * (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
#pragma once

#include "runtime/optim/optimizer.h"

namespace pf {

class AdamW : public Optimizer {
 public:
  explicit AdamW(OptimizerConfig config) : Optimizer(config) {}

 protected:
  void update(Parameter& param, int64_t step) override;
  std::vector<const char*> slots_in_use() const override { return {"exp_avg", "exp_avg_sq"}; }
};

}  // namespace pf
