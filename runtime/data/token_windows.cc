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

void check_window_options(int64_t rows, int64_t seq_len, double held_out_fraction, DataSplit split,
                          const std::string& what) {
  PF_CHECK_ARG(rows >= 1, "rows must be >= 1, got ", rows);
  PF_CHECK_ARG(seq_len >= 1, "seq_len must be >= 1, got ", seq_len);
  PF_CHECK_ARG(held_out_fraction >= 0.0 && held_out_fraction < 1.0, "held_out_fraction must be in [0, 1), got ",
               held_out_fraction);
  PF_CHECK_ARG(split == DataSplit::kTrain || held_out_fraction > 0.0,
               "the held-out split needs held_out_fraction > 0 (the share of ", what, " held out)");
}

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
