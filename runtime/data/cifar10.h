// CIFAR-10 in its binary form (https://www.cs.toronto.edu/~kriz/cifar.html, cifar-10-binary.tar.gz),
// for vision models whose input is one f32 row per image: the same (features, labels) batches,
// held-out split and stream rules as the CSV classification source (csv_classification.h).
//
// File format: records of 3073 bytes, nothing else: a label byte (0..9), then the image's 1024 red,
// 1024 green and 1024 blue bytes, each plane a row-major 32 x 32. A sample's features are its 3072
// pixels in that order, channel-major (c, y, x) as a 3 x 32 x 32 vision model reads them, each byte
// v scaled to v / 255 in [0, 1] (exactly the float v / 255.0f), then, when options.mean and
// .stddev are set, normalised per channel: (v / 255 - mean[c]) / stddev[c]. Its target is the
// label (i32).
//
// options.path is one file or a folder, the extracted cifar-10-batches-bin: a folder's training
// split is data_batch_1.bin .. data_batch_5.bin (50000 images) and its held-out split test_batch.bin
// (10000); one file's held-out split is the last round(held_out_fraction * records) of its shuffled
// records, as the CSV source's.
//
// The files are memory-mapped read-only and a batch reads its own records only: a process reads the
// pages of the images it uses, not the files. They are untrusted input: a file whose size is not a
// positive multiple of 3073 bytes is refused when opened (kDataLoss naming the file and its size); a
// label above 9 when its record is read (kDataLoss naming the file and the record's index: checking
// every label up front would read every page of the file).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/train/batch.h"

namespace pf {

namespace detail {
struct Cifar10Images;  // the mapped files and the splits' record orders; defined in cifar10.cc
}  // namespace detail

struct Cifar10Options {
  std::string path;                // a CIFAR-10 .bin file, or a folder of the six
  int64_t rows = 8;                // rows per micro-batch
  double held_out_fraction = 0.0;  // one file: in [0, 1); a folder: 0 (its held-out split is test_batch.bin)
  uint64_t shuffle_seed = 0;       // the training records' order
  // Per-channel (red, green, blue) normalisation after the scaling to [0, 1]; the defaults leave
  // v / 255 as it is. Commonly used for CIFAR-10: mean {0.4914, 0.4822, 0.4465}, stddev
  // {0.2470, 0.2435, 0.2616}.
  std::array<float, 3> mean = {0.0f, 0.0f, 0.0f};
  std::array<float, 3> stddev = {1.0f, 1.0f, 1.0f};
  void validate() const;  // kInvalidArgument naming the field
};

class Cifar10Dataset {
 public:
  static constexpr int64_t kChannels = 3, kSide = 32;
  static constexpr int64_t kFeatures = kChannels * kSide * kSide;  // 3072
  static constexpr int64_t kRecordBytes = 1 + kFeatures;           // 3073
  static constexpr int64_t kClasses = 10;
  // A folder's files, as cifar-10-binary.tar.gz names them.
  static const std::vector<std::string>& training_file_names();  // data_batch_1.bin .. data_batch_5.bin
  static constexpr const char* kTestFileName = "test_batch.bin";

  // Opens options.path. Throws pf::Error:
  //  kNotFound        the path does not exist, or a folder lacks one of its six files (naming it);
  //  kIoError         a file cannot be opened or mapped;
  //  kInvalidArgument bad options; held_out_fraction > 0 with a folder; a training split with fewer
  //                   records than options.rows;
  //  kDataLoss        a file's size is not a positive multiple of 3073 bytes (naming it and its size).
  static Cifar10Dataset load(const Cifar10Options& options);
  // The images to evaluate on (`pipeforge eval`): a folder's test_batch.bin (the training files
  // need not be there), or every record of one file, as the held-out split in file order; the
  // training split is empty. options.held_out_fraction must be 0. Throws as load().
  static Cifar10Dataset load_test_set(const Cifar10Options& options);

  const Cifar10Options& options() const { return options_; }
  int64_t features() const { return kFeatures; }
  int64_t classes() const { return kClasses; }
  int64_t train_size() const;
  int64_t held_out_size() const;
  const std::vector<std::string>& files() const;  // the files opened, in record order

  // The training stream. Micro-batch p holds options().rows consecutive training records (of the
  // shuffled order: Fisher-Yates keyed on shuffle_seed) starting at record (p * rows) mod
  // train_size(), wrapping round to the first; inputs f32 [rows, 3072], targets i32 [rows]. A pure
  // function of p, so seek(p) reproduces the stream exactly. The source shares the mapped files: it
  // stays valid after this dataset is destroyed. kFailedPrecondition when train_size() is 0.
  std::unique_ptr<DataSource> training_source() const;

  // The held-out split in order, as batches of options().rows records, the last holding the
  // remainder: batch p is batch p mod held_out_batches() (evaluation seeks back to 0 and reads on).
  // kFailedPrecondition when held_out_size() is 0.
  std::unique_ptr<DataSource> held_out_source() const;
  int64_t held_out_batches() const;

 private:
  Cifar10Dataset() = default;
  static Cifar10Dataset open(const Cifar10Options& options, bool test_set);

  Cifar10Options options_;
  std::shared_ptr<const detail::Cifar10Images> images_;
};

}  // namespace pf
