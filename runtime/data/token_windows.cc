#include "runtime/data/token_windows.h"

#include <cmath>

#include "runtime/core/error.h"
#include "runtime/data/random.h"

namespace pf::data {
namespace {

// Distinguish the row-start streams from any other use of the same seed.
constexpr uint64_t kRowStartStream = 0x43484152'54455854ull;         // "CHARTEXT"
constexpr uint64_t kHeldOutRowStartStream = 0x48454c44'4f555454ull;  // "HELDOUTT"

}  // namespace

TokenRange split_range(int64_t total, double held_out_fraction, DataSplit split, int64_t seq_len,
                       const std::string& what) {
  const int64_t needed = seq_len + 1;
  const int64_t held = static_cast<int64_t>(std::llround(held_out_fraction * static_cast<double>(total)));
  const bool held_out = split == DataSplit::kHeldOut;
  TokenRange range;
  range.begin = held_out ? total - held : 0;
  range.end = held_out ? total : total - held;
  PF_CHECK_ARG(range.size() >= needed, "the ", held_out ? "held-out" : "training", " split of ", what, " (",
               range.size(), " of ", total, " tokens with held_out_fraction ", held_out_fraction,
               ") is shorter than seq_len + 1 = ", needed);
  return range;
}

int64_t window_start(uint64_t seed, DataSplit split, int64_t position, int64_t row, TokenRange range,
                     int64_t seq_len) {
  // Windows start in [begin, begin + starts) so that seq_len + 1 tokens of the split fit.
  const uint64_t starts = static_cast<uint64_t>(range.size()) - static_cast<uint64_t>(seq_len);
  const uint64_t bits = hash_words(seed, split == DataSplit::kHeldOut ? kHeldOutRowStartStream : kRowStartStream,
                                   static_cast<uint64_t>(position), static_cast<uint64_t>(row));
  return range.begin + static_cast<int64_t>(uniform_below(bits, starts));
}

}  // namespace pf::data
