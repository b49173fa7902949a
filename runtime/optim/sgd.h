// SGD with (heavy-ball) momentum and L2 weight decay, as in PyTorch's torch.optim.SGD:
//   g = grad + wd * w;  buf = momentum * buf + g (buf = g on the first step);  w -= lr * buf.
#pragma once

#include "runtime/optim/optimizer.h"

namespace pf {

class Sgd : public Optimizer {
 public:
  explicit Sgd(OptimizerConfig config) : Optimizer(config) {}

 protected:
  void update(Parameter& param, int64_t step) override;
  std::vector<const char*> slots_in_use() const override {
    return config_.momentum == 0.0f ? std::vector<const char*>() : std::vector<const char*>{"momentum"};
  }
};

}  // namespace pf
