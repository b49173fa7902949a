#include "runtime/data/csv_classification.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>
#include <system_error>
#include <utility>

#include "runtime/core/error.h"
#include "runtime/core/input_file.h"
#include "runtime/core/limits.h"
#include "runtime/data/positioned_source.h"
#include "runtime/data/random.h"

namespace pf {

namespace detail {
struct CsvSamples {
  int64_t features = 0;
  int64_t classes = 0;
  std::vector<float> inputs;   // [count, features], scaled
  std::vector<int32_t> labels;  // [count]
  int64_t count() const { return static_cast<int64_t>(labels.size()); }
};
}  // namespace detail

namespace {

using detail::CsvSamples;

// Distinguishes the shuffle from any other use of the same seed.
constexpr uint64_t kShuffleStream = 0x43535653'48554646ull;  // "CSVSHUFF"
// Cell text quoted in an error message is cut to this many bytes.
constexpr size_t kMaxQuotedBytes = 40;

std::string read_csv_file(const std::string& path) {
  return read_input_file(path, "CSV file", static_cast<uint64_t>(CsvClassificationDataset::kMaxFileBytes));
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Removes the first line from *text and returns it without its '\n' or "\r\n".
std::string_view next_line(std::string_view* text) {
  const size_t end = text->find('\n');
  std::string_view line = text->substr(0, end);
  text->remove_prefix(end == std::string_view::npos ? text->size() : end + 1);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  return line;
}

// A cell for an error message: cut short, with unprintable bytes shown as '?'.
std::string quoted(std::string_view cell) {
  std::string out(cell.substr(0, kMaxQuotedBytes));
  for (char& c : out) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7F) c = '?';
  }
  if (cell.size() > kMaxQuotedBytes) out += "...";
  return "'" + out + "'";
}

// Parses the text of one file into samples in file order.
class CsvParser {
 public:
  CsvParser(const std::string& path, float feature_scale) : path_(path), scale_(feature_scale) {}

  CsvSamples parse(std::string_view text) {
    reserve_samples(text);
    int64_t line_number = 0;
    while (!text.empty()) {
      const std::string_view line = next_line(&text);
      ++line_number;
      const std::string_view content = trim(line);
      if (content.empty() || content.front() == '#') continue;
      parse_row(line, line_number);
    }
    if (samples_.labels.empty()) {
      fail(ErrorCode::kInvalidArgument, "CSV file '", path_,
           "' holds no samples (it is empty or has only blank and '#' lines)");
    }
    return std::move(samples_);
  }

 private:
  // Counts the rows and the first row's columns, refuses a file whose samples would not fit in
  // memory (they are held twice while shuffled), and reserves room for them: a limit naming the
  // file instead of a failed allocation.
  void reserve_samples(std::string_view text) {
    int64_t rows = 0, features = 0;
    while (!text.empty()) {
      const std::string_view content = trim(next_line(&text));
      if (content.empty() || content.front() == '#') continue;
      if (rows++ == 0) features = static_cast<int64_t>(std::count(content.begin(), content.end(), ','));
    }
    if (rows == 0 || features < 1 || features > limits::kMaxDimension) return;  // parse() says why
    // At most 2^30 bytes of text: rows and features are below 2^30, their product below 2^60.
    const int64_t bytes = rows * (features * static_cast<int64_t>(sizeof(float)) + static_cast<int64_t>(sizeof(int32_t)));
    // Shuffling holds the samples twice and an order of int64 per sample.
    const int64_t peak = 2 * bytes + rows * static_cast<int64_t>(sizeof(int64_t));
    const int64_t limit = limits::max_loaded_data_bytes();
    if (peak > limit) {
      fail(ErrorCode::kOutOfMemory, "CSV file '", path_, "': ", rows, " samples of ", features, " features take ",
           peak, " bytes while loaded and shuffled, more than the limit of ", limit,
           " bytes (half the memory this process may still allocate)");
    }
    samples_.inputs.reserve(static_cast<size_t>(rows * features));
    samples_.labels.reserve(static_cast<size_t>(rows));
  }

  template <typename... Args>
  [[noreturn]] void fail_at(int64_t line, int64_t column, const Args&... args) const {
    fail(ErrorCode::kInvalidArgument, path_, " line ", line, ", column ", column, ": ", args...);
  }

  void parse_row(std::string_view line, int64_t line_number) {
    const int64_t columns = 1 + static_cast<int64_t>(std::count(line.begin(), line.end(), ','));
    if (first_line_ == 0) {
      if (columns < 2) {
        fail(ErrorCode::kInvalidArgument, path_, " line ", line_number,
             ": a row needs at least one feature and a label, got 1 column");
      }
      if (columns - 1 > limits::kMaxDimension) {
        fail(ErrorCode::kInvalidArgument, path_, " line ", line_number, ": ", columns - 1,
             " features, more than the limit of ", limits::kMaxDimension);
      }
      first_line_ = line_number;
      samples_.features = columns - 1;
    } else if (columns != samples_.features + 1) {
      fail(ErrorCode::kInvalidArgument, path_, " line ", line_number, " has ", columns,
           " columns, but the first row (line ", first_line_, ") has ", samples_.features + 1);
    }
    int64_t column = 0;
    while (true) {
      ++column;
      const size_t comma = line.find(',');
      const std::string_view cell = trim(line.substr(0, comma));
      if (comma == std::string_view::npos) {
        samples_.labels.push_back(parse_label(cell, line_number, column));
        break;
      }
      samples_.inputs.push_back(parse_feature(cell, line_number, column));
      line.remove_prefix(comma + 1);
    }
  }

  // Whether the whole cell is a number (from_chars: no leading '+', no hex, locale-independent).
  template <typename T>
  static bool parse_number(std::string_view cell, T* value) {
    const char* end = cell.data() + cell.size();
    const auto result = std::from_chars(cell.data(), end, *value);
    return !cell.empty() && result.ec == std::errc() && result.ptr == end;
  }

  float parse_feature(std::string_view cell, int64_t line, int64_t column) const {
    float value = 0.0f;
    if (!parse_number(cell, &value)) {
      // from_chars reports values beyond float's range separately; say which it was.
      double wide = 0.0;
      if (parse_number(cell, &wide)) fail_at(line, column, "number ", quoted(cell), " is out of f32 range");
      fail_at(line, column, "expected a number, got ", quoted(cell));
    }
    if (!std::isfinite(value)) fail_at(line, column, "expected a finite number, got ", quoted(cell));
    const float scaled = value * scale_;
    if (!std::isfinite(scaled)) {
      fail_at(line, column, quoted(cell), " times feature_scale ", scale_, " is not finite");
    }
    return scaled;
  }

  int32_t parse_label(std::string_view cell, int64_t line, int64_t column) {
    double value = 0.0;
    const bool ok = parse_number(cell, &value) && std::isfinite(value) && value >= 0.0 &&
                    value == std::floor(value);
    if (!ok) fail_at(line, column, "expected a non-negative integer label, got ", quoted(cell));
    if (value >= static_cast<double>(CsvClassificationDataset::kMaxClasses)) {
      fail_at(line, column, "label ", quoted(cell), " is not below the limit of ",
              CsvClassificationDataset::kMaxClasses, " classes");
    }
    const auto label = static_cast<int32_t>(value);
    samples_.classes = std::max<int64_t>(samples_.classes, int64_t{label} + 1);
    return label;
  }

  const std::string& path_;
  float scale_;
  int64_t first_line_ = 0;  // line number of the first row; 0 before it
  CsvSamples samples_;
};

// Fisher-Yates, each swap keyed on (seed, index), so the order depends only on the seed.
CsvSamples shuffled(const CsvSamples& in, uint64_t seed) {
  const int64_t n = in.count(), d = in.features;
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  for (int64_t i = n - 1; i > 0; --i) {
    const uint64_t bits = data::hash_words(seed, kShuffleStream, static_cast<uint64_t>(i));
    const auto j = static_cast<int64_t>(data::uniform_below(bits, static_cast<uint64_t>(i + 1)));
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(j)]);
  }
  CsvSamples out;
  out.features = d;
  out.classes = in.classes;
  out.inputs.resize(in.inputs.size());
  out.labels.resize(in.labels.size());
  for (int64_t i = 0; i < n; ++i) {
    const int64_t from = order[static_cast<size_t>(i)];
    std::memcpy(out.inputs.data() + i * d, in.inputs.data() + from * d, static_cast<size_t>(d) * sizeof(float));
    out.labels[static_cast<size_t>(i)] = in.labels[static_cast<size_t>(from)];
  }
  return out;
}

// `count` samples of the range [begin, begin + size): sample begin + (offset + r) mod size for r
// in [0, count).
Batch copy_rows(const CsvSamples& samples, int64_t begin, int64_t size, int64_t offset, int64_t count) {
  const int64_t d = samples.features;
  Batch batch;
  batch.inputs = Tensor::empty({count, d}, DType::kF32);
  batch.targets = Tensor::empty({count}, DType::kI32);
  float* x = batch.inputs.f32();
  int32_t* y = batch.targets.i32();
  int64_t k = offset % size;
  for (int64_t r = 0; r < count; ++r) {
    const int64_t i = begin + k;
    std::memcpy(x + r * d, samples.inputs.data() + i * d, static_cast<size_t>(d) * sizeof(float));
    y[r] = samples.labels[static_cast<size_t>(i)];
    if (++k == size) k = 0;
  }
  return batch;
}

class CsvTrainingSource final : public PositionedSource {
 public:
  CsvTrainingSource(std::shared_ptr<const CsvSamples> samples, int64_t train_size, int64_t rows)
      : samples_(std::move(samples)), train_size_(train_size), rows_(rows) {}

  Batch batch_at(int64_t position) const override {
    // (position * rows) mod n without overflow: both factors are reduced below n first, and n
    // (samples in a file of at most 1 GiB) is far below 2^31.
    const int64_t n = train_size_;
    const int64_t start = (position % n) * (rows_ % n) % n;
    return copy_rows(*samples_, 0, n, start, rows_);
  }

  std::shared_ptr<const CsvSamples> samples_;
  int64_t train_size_;
  int64_t rows_;
};

// The held-out batches, cycling.
class CsvHeldOutSource final : public PositionedSource {
 public:
  explicit CsvHeldOutSource(std::vector<Batch> batches) : batches_(std::move(batches)) {}
  Batch batch_at(int64_t position) const override {
    return batches_[static_cast<size_t>(position % static_cast<int64_t>(batches_.size()))];
  }

 private:
  std::vector<Batch> batches_;
};

}  // namespace

void CsvClassificationOptions::validate() const {
  PF_CHECK_ARG(!path.empty(), "path must name a CSV file");
  PF_CHECK_ARG(rows >= 1 && rows <= limits::kMaxDimension, "rows must be in [1, ", limits::kMaxDimension,
               "], got ", rows);
  PF_CHECK_ARG(std::isfinite(feature_scale), "feature_scale must be finite, got ", feature_scale);
  PF_CHECK_ARG(held_out_fraction >= 0.0 && held_out_fraction < 1.0, "held_out_fraction must be in [0, 1), got ",
               held_out_fraction);
}

CsvClassificationDataset CsvClassificationDataset::load(const CsvClassificationOptions& options) {
  options.validate();
  // The text is released before the samples are shuffled into a copy.
  const CsvSamples in_file_order = [&] {
    const std::string text = read_csv_file(options.path);
    return CsvParser(options.path, options.feature_scale).parse(text);
  }();

  CsvClassificationDataset dataset;
  dataset.options_ = options;
  const int64_t n = in_file_order.count();
  // Rounded to nearest: 0.29 of 100 samples is 29, although 100 * 0.29 is 28.999999999999996.
  dataset.held_out_size_ = static_cast<int64_t>(std::llround(static_cast<double>(n) * options.held_out_fraction));
  dataset.train_size_ = n - dataset.held_out_size_;
  if (dataset.train_size_ < options.rows) {
    fail(ErrorCode::kInvalidArgument, "CSV file '", options.path, "': the training split has ",
         dataset.train_size_, " of ", n, " samples (held_out_fraction ", options.held_out_fraction,
         "), fewer than rows = ", options.rows);
  }
  dataset.samples_ = std::make_shared<const CsvSamples>(shuffled(in_file_order, options.shuffle_seed));
  return dataset;
}

int64_t CsvClassificationDataset::features() const { return samples_->features; }
int64_t CsvClassificationDataset::classes() const { return samples_->classes; }

std::unique_ptr<DataSource> CsvClassificationDataset::training_source() const {
  return std::make_unique<CsvTrainingSource>(samples_, train_size_, options_.rows);
}

std::vector<Batch> CsvClassificationDataset::held_out_batches(int64_t rows) const {
  PF_CHECK_ARG(rows >= 1, "rows must be >= 1, got ", rows);
  std::vector<Batch> batches;
  for (int64_t done = 0; done < held_out_size_; done += rows) {
    const int64_t count = std::min(rows, held_out_size_ - done);
    batches.push_back(copy_rows(*samples_, train_size_, held_out_size_, done, count));
  }
  return batches;
}

std::unique_ptr<DataSource> CsvClassificationDataset::held_out_source(int64_t rows) const {
  PF_CHECK_STATE(held_out_size_ > 0, "CSV file '", options_.path,
                 "' has no held-out samples: set held_out_fraction > 0");
  return std::make_unique<CsvHeldOutSource>(held_out_batches(rows));
}

}  // namespace pf
