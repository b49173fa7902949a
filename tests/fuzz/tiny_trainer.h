// The tiny trainer behind the checkpoint fuzzer and its seed: an MLP 4 -> 6 -> 3 with AdamW, so a
// checkpoint has parameters and optimizer slots and stays about 2 KiB.
#pragma once

#include <memory>

#include "runtime/train/sequential_trainer.h"

namespace pf::fuzz {

std::unique_ptr<SequentialTrainer> make_tiny_trainer();
// A 2-row batch for it.
Batch tiny_batch();

}  // namespace pf::fuzz
