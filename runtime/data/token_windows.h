// How the language-modelling sources (character text, token files) pick their training windows.
//
// A source holds `total` tokens; with held_out_fraction f > 0 the last round(f x total) of them are
// held out. Micro-batch number p (p = position) holds `rows` windows of seq_len + 1 consecutive
// tokens of one split; the start of row r is a pure function of (seed, split, p, r), so seek(p)
// reproduces the stream exactly and a run resumed from a checkpoint sees the same data as one that
// never stopped. inputs = window[0, seq_len), targets = window[1, seq_len + 1).
#pragma once

#include <cstdint>
#include <string>

namespace pf {

enum class DataSplit { kTrain, kHeldOut };

namespace data {

// The tokens [begin, end) one split's windows lie in.
struct TokenRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// The checks every windowed source makes of its options (kInvalidArgument naming the field);
// `what` names the tokens in the held-out message ("the text", "the tokens").
void check_window_options(int64_t rows, int64_t seq_len, double held_out_fraction, DataSplit split,
                          const std::string& what);

// The split's range of `total` tokens; kInvalidArgument naming `what` (e.g. "the text") when it
// is shorter than seq_len + 1.
TokenRange split_range(int64_t total, double held_out_fraction, DataSplit split, int64_t seq_len,
                       const std::string& what);

// The first token of row `row` of micro-batch `position`: in [range.begin, range.end - seq_len).
int64_t window_start(uint64_t seed, DataSplit split, int64_t position, int64_t row, TokenRange range,
                     int64_t seq_len);

}  // namespace data
}  // namespace pf
