// A classification data set read from a CSV file, for the MLP: e.g. scikit-learn's handwritten
// digits (sklearn/datasets/data/digits.csv.gz, gunzipped: 1797 rows of 64 features in 0..16 and a
// label 0..9; use feature_scale = 1/16).
//
// File format: one sample per line, cells separated by commas, the features first and the label
// in the last column; no header and no quoting. Blank lines and lines whose first non-blank
// character is '#' are skipped; spaces and tabs around a cell and a trailing '\r' are ignored.
// Features are finite decimal numbers; the label is a non-negative integer (written "3" or "3.0").
// Every row has as many columns as the first one.
//
// The file is read and parsed once. The samples are shuffled once (Fisher-Yates keyed on
// shuffle_seed, so the order is the same on every machine); the last
// round(held_out_fraction * samples) of them form the held-out split and the rest the training split.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/train/batch.h"

namespace pf {

namespace detail {
struct CsvSamples;  // the parsed samples; defined in csv_classification.cc
}  // namespace detail

struct CsvClassificationOptions {
  std::string path;
  int64_t rows = 8;                // rows per training micro-batch
  float feature_scale = 1.0f;      // every feature is multiplied by this (digits: 1/16)
  double held_out_fraction = 0.0;  // in [0, 1)
  uint64_t shuffle_seed = 0;
  void validate() const;  // kInvalidArgument naming the field
};

class CsvClassificationDataset {
 public:
  // The file may be at most this many bytes (checked with stat before reading).
  static constexpr int64_t kMaxFileBytes = int64_t{1} << 30;
  // Labels must be below this: classes() sizes the model's output layer.
  static constexpr int64_t kMaxClasses = 1 << 20;

  // Reads and parses options.path. Throws pf::Error:
  //  kNotFound        the file does not exist;
  //  kIoError         it cannot be opened or read;
  //  kInvalidArgument bad options; not a regular file; larger than kMaxFileBytes; no samples;
  //                   a cell that is not a number or a label that is not a non-negative integer
  //                   below kMaxClasses ("<path> line 12, column 65: expected a number, got 'x'");
  //                   a row with another column count than the first; fewer than two columns;
  //                   a training split with fewer samples than options.rows.
  static CsvClassificationDataset load(const CsvClassificationOptions& options);

  const CsvClassificationOptions& options() const { return options_; }
  int64_t features() const;
  int64_t classes() const;  // the largest label (of either split) + 1
  int64_t train_size() const { return train_size_; }
  int64_t held_out_size() const { return held_out_size_; }

  // The training stream. Micro-batch p holds options().rows consecutive training samples starting
  // at sample (p * rows) mod train_size(), wrapping round to the first; inputs f32 [rows,
  // features], targets i32 [rows]. A pure function of p, so seek(p) reproduces the stream exactly.
  // The source shares the samples: it stays valid after this dataset is destroyed.
  std::unique_ptr<DataSource> training_source() const;

  // The held-out split in order, as batches of `rows` rows; the last one holds the remainder.
  // Empty when held_out_size() is 0. Throws kInvalidArgument when rows < 1.
  std::vector<Batch> held_out_batches(int64_t rows) const;
  // Those batches as a source that cycles through them (batch p is batch p mod their count):
  // evaluation seeks back to 0 and reads on. kFailedPrecondition when held_out_size() is 0;
  // kInvalidArgument when rows < 1.
  std::unique_ptr<DataSource> held_out_source(int64_t rows) const;

 private:
  CsvClassificationDataset() = default;

  CsvClassificationOptions options_;
  std::shared_ptr<const detail::CsvSamples> samples_;  // shuffled; training split first
  int64_t train_size_ = 0;
  int64_t held_out_size_ = 0;
};

}  // namespace pf
