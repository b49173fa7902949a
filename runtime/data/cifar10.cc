#include "runtime/data/cifar10.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <system_error>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/core/limits.h"
#include "runtime/core/mapped_file.h"
#include "runtime/data/positioned_source.h"
#include "runtime/data/random.h"

namespace pf {

namespace detail {
struct Cifar10Images {
  std::vector<std::string> paths;
  std::vector<std::shared_ptr<const MappedFile>> files;
  std::vector<int64_t> first;  // first[i]: the index of file i's first record; first.back(): all records
  // value[c][v]: the feature of pixel byte v in channel c.
  std::array<std::array<float, 256>, Cifar10Dataset::kChannels> value{};
  std::vector<int64_t> train;     // the training records' indices, shuffled
  std::vector<int64_t> held_out;  // the held-out records' indices, in order

  // Record `index` (of all files together) into row `out` (3072 floats) and its label.
  int32_t read(int64_t index, float* out) const {
    const size_t f = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), index) - first.begin()) - 1;
    const int64_t record = index - first[f];
    const unsigned char* p = files[f]->data() + record * Cifar10Dataset::kRecordBytes;
    if (p[0] >= Cifar10Dataset::kClasses) {
      fail(ErrorCode::kDataLoss, "CIFAR-10 file '", paths[f], "': record ", record, " (counting from 0) has label ",
           static_cast<int>(p[0]), ", not 0..9 (a damaged file?)");
    }
    constexpr int64_t plane = Cifar10Dataset::kSide * Cifar10Dataset::kSide;
    for (int64_t c = 0; c < Cifar10Dataset::kChannels; ++c) {
      const std::array<float, 256>& v = value[static_cast<size_t>(c)];
      const unsigned char* pixels = p + 1 + c * plane;
      float* row = out + c * plane;
      for (int64_t k = 0; k < plane; ++k) row[k] = v[pixels[k]];
    }
    return p[0];
  }
};
}  // namespace detail

namespace {

using detail::Cifar10Images;

// Distinguishes the shuffle from any other use of the same seed.
constexpr uint64_t kShuffleStream = 0x43494641'52534846ull;  // "CIFARSHF"

std::shared_ptr<const MappedFile> open_file(const std::string& path, int64_t* records) {
  auto file = MappedFile::open(path, "CIFAR-10 file", true);  // training records are read in shuffled order
  const auto bytes = static_cast<int64_t>(file->size());
  if (bytes == 0 || bytes % Cifar10Dataset::kRecordBytes != 0) {
    fail(ErrorCode::kDataLoss, "CIFAR-10 file '", path, "' holds ", bytes, " bytes, not a positive multiple of ",
         Cifar10Dataset::kRecordBytes, " (records of a label byte and 3072 pixel bytes)",
         bytes > Cifar10Dataset::kRecordBytes ? ": truncated or damaged?" : "");
  }
  *records = bytes / Cifar10Dataset::kRecordBytes;
  return file;
}

// The files of options.path: the folder's six (training first; its test_batch.bin alone for the
// test set), or the one file.
std::vector<std::string> files_of(const std::string& path, bool test_set, bool* folder) {
  std::error_code error;
  *folder = std::filesystem::is_directory(path, error);
  if (!*folder) return {path};  // MappedFile::open says why when it is not a readable file
  std::vector<std::string> files;
  if (!test_set)
    for (const std::string& name : Cifar10Dataset::training_file_names()) files.push_back(path + "/" + name);
  files.push_back(path + "/" + Cifar10Dataset::kTestFileName);
  for (const std::string& file : files) {
    if (!std::filesystem::exists(file, error)) {
      fail(ErrorCode::kNotFound, "CIFAR-10 folder '", path, "' has no '", file,
           "': expected data_batch_1.bin .. data_batch_5.bin and test_batch.bin (the cifar-10-batches-bin folder "
           "of cifar-10-binary.tar.gz)");
    }
  }
  return files;
}

// Fisher-Yates over `order`, each swap keyed on (seed, index): the order depends only on the seed.
void shuffle(std::vector<int64_t>* order, uint64_t seed) {
  for (int64_t i = static_cast<int64_t>(order->size()) - 1; i > 0; --i) {
    const uint64_t bits = data::hash_words(seed, kShuffleStream, static_cast<uint64_t>(i));
    const auto j = static_cast<int64_t>(data::uniform_below(bits, static_cast<uint64_t>(i + 1)));
    std::swap((*order)[static_cast<size_t>(i)], (*order)[static_cast<size_t>(j)]);
  }
}

// `count` records of `records`: records[(offset + r) mod size] for r in [0, count).
Batch read_rows(const Cifar10Images& images, const std::vector<int64_t>& records, int64_t offset, int64_t count) {
  const auto size = static_cast<int64_t>(records.size());
  Batch batch;
  batch.inputs = Tensor::empty({count, Cifar10Dataset::kFeatures}, DType::kF32);
  batch.targets = Tensor::empty({count}, DType::kI32);
  float* x = batch.inputs.f32();
  int32_t* y = batch.targets.i32();
  int64_t k = offset % size;
  for (int64_t r = 0; r < count; ++r) {
    y[r] = images.read(records[static_cast<size_t>(k)], x + r * Cifar10Dataset::kFeatures);
    if (++k == size) k = 0;
  }
  return batch;
}

class TrainingSource final : public PositionedSource {
 public:
  TrainingSource(std::shared_ptr<const Cifar10Images> images, int64_t rows) : images_(std::move(images)), rows_(rows) {}

  Batch batch_at(int64_t position) const override {
    // (position * rows) mod n without overflow: both factors are reduced below n first, and n is
    // below 2^31 (checked when opened).
    const auto n = static_cast<int64_t>(images_->train.size());
    return read_rows(*images_, images_->train, (position % n) * (rows_ % n) % n, rows_);
  }

 private:
  std::shared_ptr<const Cifar10Images> images_;
  int64_t rows_;
};

class HeldOutSource final : public PositionedSource {
 public:
  HeldOutSource(std::shared_ptr<const Cifar10Images> images, int64_t rows, int64_t batches)
      : images_(std::move(images)), rows_(rows), batches_(batches) {}

  Batch batch_at(int64_t position) const override {
    const int64_t first = (position % batches_) * rows_;
    const int64_t count = std::min(rows_, static_cast<int64_t>(images_->held_out.size()) - first);
    return read_rows(*images_, images_->held_out, first, count);
  }

 private:
  std::shared_ptr<const Cifar10Images> images_;
  int64_t rows_, batches_;
};

}  // namespace

void Cifar10Options::validate() const {
  PF_CHECK_ARG(!path.empty(), "path must name a CIFAR-10 file or folder");
  PF_CHECK_ARG(rows >= 1 && rows <= limits::kMaxDimension / Cifar10Dataset::kFeatures, "rows must be in [1, ",
               limits::kMaxDimension / Cifar10Dataset::kFeatures, "], got ", rows);
  PF_CHECK_ARG(held_out_fraction >= 0.0 && held_out_fraction < 1.0, "held_out_fraction must be in [0, 1), got ",
               held_out_fraction);
  for (size_t c = 0; c < 3; ++c) {
    PF_CHECK_ARG(std::isfinite(mean[c]), "mean[", c, "] must be finite, got ", mean[c]);
    PF_CHECK_ARG(std::isfinite(stddev[c]) && stddev[c] > 0.0f, "stddev[", c, "] must be finite and > 0, got ",
                 stddev[c]);
  }
}

const std::vector<std::string>& Cifar10Dataset::training_file_names() {
  static const std::vector<std::string> names = {"data_batch_1.bin", "data_batch_2.bin", "data_batch_3.bin",
                                                 "data_batch_4.bin", "data_batch_5.bin"};
  return names;
}

Cifar10Dataset Cifar10Dataset::load(const Cifar10Options& options) { return open(options, false); }
Cifar10Dataset Cifar10Dataset::load_test_set(const Cifar10Options& options) { return open(options, true); }

Cifar10Dataset Cifar10Dataset::open(const Cifar10Options& options, bool test_set) {
  options.validate();
  bool folder = false;
  const std::vector<std::string> paths = files_of(options.path, test_set, &folder);
  PF_CHECK_ARG(!(folder || test_set) || options.held_out_fraction == 0.0, "held_out_fraction is ",
               options.held_out_fraction, ", but ",
               folder ? "the held-out split of CIFAR-10 folder '" + options.path + "' is its test_batch.bin"
                      : "the test set of '" + options.path + "' is the whole file",
               ": it must be 0");

  auto images = std::make_shared<Cifar10Images>();
  images->first.push_back(0);
  for (const std::string& path : paths) {
    int64_t records = 0;
    images->files.push_back(open_file(path, &records));
    images->paths.push_back(path);
    images->first.push_back(images->first.back() + records);
  }
  for (size_t c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      // With the defaults (x - 0) / 1 is x: exactly v / 255.0f.
      images->value[c][static_cast<size_t>(v)] = (static_cast<float>(v) / 255.0f - options.mean[c]) / options.stddev[c];
    }
  }

  const int64_t all = images->first.back();
  PF_CHECK_ARG(all <= limits::kMaxDimension, "CIFAR-10 '", options.path, "' holds ", all,
               " records, more than the limit of ", limits::kMaxDimension);
  if (test_set) {
    images->held_out.resize(static_cast<size_t>(all));
    for (int64_t i = 0; i < all; ++i) images->held_out[static_cast<size_t>(i)] = i;
  } else {
    // A folder: the training files shuffled, test_batch.bin held out in order. One file: all of it
    // shuffled, the last round(held_out_fraction * records) held out (as the CSV source).
    const int64_t test_begin = folder ? images->first[images->first.size() - 2] : all;
    const int64_t held_from_file = static_cast<int64_t>(
        std::llround(static_cast<double>(test_begin) * options.held_out_fraction));
    std::vector<int64_t> order(static_cast<size_t>(test_begin));
    for (int64_t i = 0; i < test_begin; ++i) order[static_cast<size_t>(i)] = i;
    shuffle(&order, options.shuffle_seed);
    images->held_out.assign(order.end() - held_from_file, order.end());
    order.resize(order.size() - static_cast<size_t>(held_from_file));
    images->train = std::move(order);
    for (int64_t i = test_begin; i < all; ++i) images->held_out.push_back(i);
    const auto train = static_cast<int64_t>(images->train.size());
    if (train < options.rows) {
      fail(ErrorCode::kInvalidArgument, "CIFAR-10 ", folder ? "folder '" : "file '", options.path,
           "': the training split has ", train, " of ", test_begin, " records (held_out_fraction ",
           options.held_out_fraction, "), fewer than rows = ", options.rows);
    }
  }

  Cifar10Dataset dataset;
  dataset.options_ = options;
  dataset.images_ = std::move(images);
  return dataset;
}

int64_t Cifar10Dataset::train_size() const { return static_cast<int64_t>(images_->train.size()); }
int64_t Cifar10Dataset::held_out_size() const { return static_cast<int64_t>(images_->held_out.size()); }
const std::vector<std::string>& Cifar10Dataset::files() const { return images_->paths; }

int64_t Cifar10Dataset::held_out_batches() const {
  return (held_out_size() + options_.rows - 1) / options_.rows;
}

std::unique_ptr<DataSource> Cifar10Dataset::training_source() const {
  PF_CHECK_STATE(train_size() > 0, "CIFAR-10 '", options_.path, "' has no training split here (its test set)");
  return std::make_unique<TrainingSource>(images_, options_.rows);
}

std::unique_ptr<DataSource> Cifar10Dataset::held_out_source() const {
  PF_CHECK_STATE(held_out_size() > 0, "CIFAR-10 file '", options_.path,
                 "' has no held-out records: set held_out_fraction > 0");
  return std::make_unique<HeldOutSource>(images_, options_.rows, held_out_batches());
}

}  // namespace pf
