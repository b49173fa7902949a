#include "runtime/data/csv_classification.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "tests/util/address_space_cap.h"
#include "tests/util/temp_files.h"

namespace pf {
namespace {

using pftest::test_temp_dir;
using pftest::write_temp_file;

// Sample i: features (i, -i / 2), label i % 4. The first feature identifies the sample.
std::string numbered_row(int i) {
  return std::to_string(i) + "," + std::to_string(-0.5 * i) + "," + std::to_string(i % 4) + "\n";
}

std::string numbered_csv(int count) {
  std::string text;
  for (int i = 0; i < count; ++i) text += numbered_row(i);
  return text;
}

CsvClassificationOptions options_for(const std::string& path, int64_t rows) {
  CsvClassificationOptions options;
  options.path = path;
  options.rows = rows;
  return options;
}

// The sample numbers (first feature / scale) of a batch, in row order.
std::vector<int> ids(const Batch& batch, float scale = 1.0f) {
  std::vector<int> out;
  const int64_t d = batch.inputs.dim(1);
  for (int64_t r = 0; r < batch.rows(); ++r) out.push_back(static_cast<int>(batch.inputs.f32()[r * d] / scale));
  return out;
}

// The error load() throws; fails the test when it throws none.
Error load_error(const CsvClassificationOptions& options) {
  try {
    CsvClassificationDataset::load(options);
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "load('" << options.path << "') did not throw";
  return Error(ErrorCode::kOk, "");
}

void expect_error(const CsvClassificationOptions& options, ErrorCode code,
                  std::initializer_list<std::string> parts) {
  const Error e = load_error(options);
  EXPECT_EQ(e.code(), code) << e.what();
  for (const std::string& part : parts) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "'" << part << "' not in: " << e.what();
  }
}

void expect_bad_csv(const std::string& name, const std::string& text, std::initializer_list<std::string> parts) {
  expect_error(options_for(write_temp_file(name, text), 1), ErrorCode::kInvalidArgument, parts);
}

TEST(CsvClassification, ParsesScaledFeaturesAndLabels) {
  // Comments, blank lines, CRLF and spaces around cells are all accepted.
  std::string text = "# i, -i/2, i % 4\n\n" + numbered_csv(5) + "  \n 5 , -2.5 ,\t1\r\n";
  for (int i = 6; i < 10; ++i) text += numbered_row(i);
  auto options = options_for(write_temp_file("numbered.csv", text), 3);
  options.feature_scale = 0.25f;
  const auto data = CsvClassificationDataset::load(options);
  EXPECT_EQ(data.features(), 2);
  EXPECT_EQ(data.classes(), 4);
  EXPECT_EQ(data.train_size(), 10);
  EXPECT_EQ(data.held_out_size(), 0);
  EXPECT_TRUE(data.held_out_batches(4).empty());

  auto source = data.training_source();
  std::multiset<int> seen;
  for (int p = 0; p < 10; ++p) {  // 30 rows: every sample three times
    const Batch batch = source->next();
    ASSERT_EQ(batch.inputs.shape(), (Shape{3, 2}));
    ASSERT_EQ(batch.inputs.dtype(), DType::kF32);
    ASSERT_EQ(batch.targets.shape(), (Shape{3}));
    ASSERT_EQ(batch.targets.dtype(), DType::kI32);
    for (int64_t r = 0; r < 3; ++r) {
      const float* x = batch.inputs.f32() + r * 2;
      const int i = static_cast<int>(x[0] * 4);
      EXPECT_EQ(x[0], 0.25f * static_cast<float>(i));
      EXPECT_EQ(x[1], -0.125f * static_cast<float>(i));
      EXPECT_EQ(batch.targets.i32()[r], i % 4);
      seen.insert(i);
    }
  }
  EXPECT_EQ(source->position(), 10);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(seen.count(i), 3u) << "sample " << i;
}

TEST(CsvClassification, HeldOutSplitIsDisjointFromTraining) {
  auto options = options_for(write_temp_file("split.csv", numbered_csv(20)), 4);
  options.held_out_fraction = 0.25;
  options.shuffle_seed = 11;
  const auto data = CsvClassificationDataset::load(options);
  EXPECT_EQ(data.train_size(), 15);
  EXPECT_EQ(data.held_out_size(), 5);

  const std::vector<Batch> held_out = data.held_out_batches(2);
  ASSERT_EQ(held_out.size(), 3u);
  EXPECT_EQ(held_out[0].rows(), 2);
  EXPECT_EQ(held_out[1].rows(), 2);
  EXPECT_EQ(held_out[2].rows(), 1);
  std::set<int> held;
  for (const Batch& batch : held_out) {
    for (int64_t r = 0; r < batch.rows(); ++r) EXPECT_EQ(batch.targets.i32()[r], ids(batch)[r] % 4);
    for (int i : ids(batch)) held.insert(i);
  }
  EXPECT_EQ(held.size(), 5u);
  EXPECT_EQ(data.held_out_batches(5).size(), 1u);
  EXPECT_EQ(data.held_out_batches(100).size(), 1u);
  // As a source: those batches, cycling.
  auto held_out_source = data.held_out_source(2);
  for (int p = 0; p < 7; ++p) EXPECT_EQ(ids(held_out_source->next()), ids(held_out[p % 3])) << "batch " << p;
  held_out_source->seek(2);
  EXPECT_EQ(ids(held_out_source->next()), ids(held_out[2]));

  // 15 micro-batches of 4 rows = 4 passes over the 15 training samples, none of them held out.
  auto source = data.training_source();
  std::map<int, int> train;
  for (int p = 0; p < 15; ++p) {
    for (int i : ids(source->next())) ++train[i];
  }
  EXPECT_EQ(train.size(), 15u);
  for (const auto& [i, count] : train) {
    EXPECT_EQ(count, 4) << "sample " << i;
    EXPECT_EQ(held.count(i), 0u) << "sample " << i << " is in both splits";
  }

  // Rounded to nearest: 100 * 0.29 is 28.999999999999996 in doubles.
  options = options_for(write_temp_file("hundred.csv", numbered_csv(100)), 1);
  options.held_out_fraction = 0.29;
  EXPECT_EQ(CsvClassificationDataset::load(options).held_out_size(), 29);
}

TEST(CsvClassification, ShuffleDependsOnlyOnTheSeed) {
  const std::string path = write_temp_file("shuffle.csv", numbered_csv(20));
  auto stream = [&](uint64_t seed) {
    auto options = options_for(path, 20);
    options.shuffle_seed = seed;
    return ids(CsvClassificationDataset::load(options).training_source()->next());
  };
  const std::vector<int> a = stream(5);
  EXPECT_EQ(stream(5), a);
  EXPECT_NE(stream(6), a);
  std::vector<int> file_order;
  for (int i = 0; i < 20; ++i) file_order.push_back(i);
  EXPECT_NE(a, file_order);
  EXPECT_EQ(std::set<int>(a.begin(), a.end()).size(), 20u);
}

TEST(CsvClassification, StreamWrapsAroundTheTrainingSplit) {
  const std::string path = write_temp_file("wrap.csv", numbered_csv(5));
  // With one row per micro-batch, micro-batch k is shuffled sample k: the order to compare with.
  auto order_source = CsvClassificationDataset::load(options_for(path, 1)).training_source();
  std::vector<int> order;
  for (int k = 0; k < 5; ++k) order.push_back(ids(order_source->next())[0]);

  auto source = CsvClassificationDataset::load(options_for(path, 3)).training_source();
  for (int64_t p = 0; p < 8; ++p) {
    const std::vector<int> got = ids(source->next());
    for (int64_t r = 0; r < 3; ++r) EXPECT_EQ(got[r], order[(p * 3 + r) % 5]) << "micro-batch " << p << " row " << r;
  }
  // Far positions do not overflow: (2^53 * 3) mod 5 = ((2^53 mod 5) * 3) mod 5.
  const int64_t far = int64_t{1} << 53;
  source->seek(far);
  const std::vector<int> got = ids(source->next());
  for (int64_t r = 0; r < 3; ++r) EXPECT_EQ(got[r], order[((far % 5) * 3 + r) % 5]);
}

TEST(CsvClassification, SeekReproducesTheStreamAndOutlivesTheDataset) {
  std::unique_ptr<DataSource> source;
  {
    auto options = options_for(write_temp_file("seek.csv", numbered_csv(13)), 4);
    options.shuffle_seed = 3;
    source = CsvClassificationDataset::load(options).training_source();
  }
  std::vector<std::vector<float>> inputs;
  std::vector<std::vector<int>> targets;
  for (int p = 0; p < 8; ++p) {
    const Batch batch = source->next();
    inputs.push_back(batch.inputs.to_vector());
    targets.push_back(std::vector<int>(batch.targets.i32(), batch.targets.i32() + 4));
  }
  source->seek(3);
  EXPECT_EQ(source->position(), 3);
  const Batch batch = source->next();
  EXPECT_EQ(batch.inputs.to_vector(), inputs[3]);
  EXPECT_EQ(std::vector<int>(batch.targets.i32(), batch.targets.i32() + 4), targets[3]);
  EXPECT_EQ(source->position(), 4);
  source->seek(7);
  EXPECT_EQ(source->next().inputs.to_vector(), inputs[7]);
  EXPECT_THROW(source->seek(-1), Error);
}

TEST(CsvClassification, BadCellsNameFileLineAndColumn) {
  expect_bad_csv("cell.csv", "1,2,0\n# comment\n1,x,1\n", {"cell.csv line 3, column 2", "expected a number", "'x'"});
  expect_bad_csv("empty_cell.csv", "1,2,0\n1,,1\n", {"empty_cell.csv line 2, column 2", "expected a number"});
  expect_bad_csv("inf.csv", "1,inf,0\n", {"inf.csv line 1, column 2", "finite"});
  expect_bad_csv("huge.csv", "1e60,1,0\n", {"huge.csv line 1, column 1", "f32 range"});
  expect_bad_csv("negative.csv", "1,2,0\n1,2,-1\n", {"negative.csv line 2, column 3", "non-negative integer label", "'-1'"});
  expect_bad_csv("fraction.csv", "1,2,1.5\n", {"fraction.csv line 1, column 3", "non-negative integer label"});
  expect_bad_csv("text_label.csv", "1,2,cat\n", {"text_label.csv line 1, column 3", "'cat'"});
  expect_bad_csv("big_label.csv", "1,2,99999999\n", {"big_label.csv line 1, column 3", "limit"});
  // A label written as a float with an integer value is accepted.
  auto options = options_for(write_temp_file("float_label.csv", "1,2,3.0\n"), 1);
  EXPECT_EQ(CsvClassificationDataset::load(options).classes(), 4);
}

TEST(CsvClassification, BadShapesAndFilesAreReported) {
  expect_bad_csv("ragged.csv", "1,2,0\n\n1,2,3,1\n", {"ragged.csv line 3 has 4 columns", "first row (line 1) has 3"});
  expect_bad_csv("short_row.csv", "1,2,0\n1,0\n", {"short_row.csv line 2 has 2 columns"});
  expect_bad_csv("one_column.csv", "# labels only\n3\n", {"one_column.csv line 2", "at least one feature"});
  expect_bad_csv("empty.csv", "", {"empty.csv", "no samples"});
  expect_bad_csv("comments.csv", "# nothing\n\n", {"comments.csv", "no samples"});
  expect_error(options_for(test_temp_dir() + "/missing.csv", 1), ErrorCode::kNotFound, {"missing.csv", "does not exist"});
  expect_error(options_for(test_temp_dir(), 1), ErrorCode::kInvalidArgument, {"not a regular file"});

  // Too large: a sparse file just over the limit is refused before it is read.
  const std::string large = write_temp_file("large.csv", "");
  std::filesystem::resize_file(large, CsvClassificationDataset::kMaxFileBytes + 1);
  expect_error(options_for(large, 1), ErrorCode::kInvalidArgument, {"large.csv", "more than the limit"});
  std::filesystem::remove(large);

  // Too few training samples for one micro-batch.
  auto options = options_for(write_temp_file("few.csv", numbered_csv(10)), 8);
  options.held_out_fraction = 0.3;
  expect_error(options, ErrorCode::kInvalidArgument, {"few.csv", "training split has 7 of 10", "rows = 8"});
}

// A file whose samples would not fit in the memory left is refused naming the file and the limit
// before the samples are allocated (it failed an allocation, an error naming nothing). The cap
// leaves 48 MiB beside what the process maps and the 16 MiB text; 4 Mi samples take 64 MiB twice
// plus the shuffle's order (96 MiB). Under ASan the cap cannot be set; the limit is then the
// machine's and only the small file is loaded.
TEST(CsvClassification, SamplesBeyondTheMemoryLeftAreRefusedNamingTheFile) {
  std::string big;
  big.reserve(size_t{16} << 20);
  for (int i = 0; i < (4 << 20); ++i) big += "0,1\n";
  const std::string big_path = write_temp_file("csv_memory_big.csv", big);
  big = std::string();
  const std::string small_path = write_temp_file("csv_memory_small.csv", numbered_csv(1000));
  const pftest::AddressSpaceCap cap(pftest::address_space_in_use() + (int64_t{64} << 20));
  // Within the cap, a small file loads.
  EXPECT_EQ(CsvClassificationDataset::load(options_for(small_path, 8)).train_size(), 1000);
  if (!pftest::kAddressSpaceCapWorks) return;
  try {
    CsvClassificationDataset::load(options_for(big_path, 8));
    FAIL() << "a file beyond the memory limit was loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory) << e.what();
    EXPECT_NE(std::string(e.what()).find("CSV file '" + big_path + "': 4194304 samples of 1 features take"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("more than the limit of"), std::string::npos) << e.what();
  }
}

TEST(CsvClassification, BadOptionsAreInvalidArgument) {
  const std::string path = write_temp_file("options.csv", numbered_csv(10));
  for (double fraction : {-0.1, 1.0, 2.0, std::nan("")}) {
    auto options = options_for(path, 1);
    options.held_out_fraction = fraction;
    expect_error(options, ErrorCode::kInvalidArgument, {"held_out_fraction"});
  }
  expect_error(options_for(path, 0), ErrorCode::kInvalidArgument, {"rows"});
  expect_error(options_for(path, -2), ErrorCode::kInvalidArgument, {"rows"});
  expect_error(options_for("", 1), ErrorCode::kInvalidArgument, {"path"});
  auto options = options_for(path, 1);
  options.feature_scale = std::numeric_limits<float>::infinity();
  expect_error(options, ErrorCode::kInvalidArgument, {"feature_scale"});
  EXPECT_THROW(CsvClassificationDataset::load(options_for(path, 1)).held_out_batches(0), Error);
  EXPECT_THROW(CsvClassificationDataset::load(options_for(path, 1)).held_out_source(1), Error);  // none held out
}

// Pixel rows as scikit-learn's digits are written (64 columns of 8 x 8 intensities 0..16 in
// row-major order, then the label; "0.0" cells as its CSV has them): one row a sample of 64
// features, each intensity x feature_scale exactly, in the file's column order.
TEST(CsvClassification, ReadsPixelRowsLikeScikitLearnDigits) {
  auto intensity = [](int row, int k) { return (row * 5 + k * 3) % 17; };
  std::string text;
  for (int row = 0; row < 30; ++row) {
    for (int k = 0; k < 64; ++k) text += std::to_string(intensity(row, k)) + ".0,";
    text += std::to_string(row % 10) + "\n";
  }
  CsvClassificationOptions options = options_for(write_temp_file("pixels.csv", text), 30);
  options.feature_scale = 1.0f / 16.0f;
  const auto data = CsvClassificationDataset::load(options);
  EXPECT_EQ(data.features(), 64);
  EXPECT_EQ(data.classes(), 10);
  const Batch batch = data.training_source()->next();
  ASSERT_EQ(batch.inputs.shape(), (Shape{30, 64}));
  std::set<int> rows;
  for (int64_t r = 0; r < 30; ++r) {
    const float* x = batch.inputs.f32() + r * 64;
    // Row i's first intensity is 5 i mod 17 and its label i mod 10: together they name it (i < 30).
    int row = -1;
    for (int i = 0; i < 30; ++i)
      if (intensity(i, 0) == static_cast<int>(x[0] * 16.0f) && i % 10 == batch.targets.i32()[r]) row = i;
    ASSERT_GE(row, 0) << "row " << r;
    rows.insert(row);
    for (int k = 0; k < 64; ++k)
      ASSERT_EQ(x[k], static_cast<float>(intensity(row, k)) / 16.0f) << "row " << row << " pixel " << k;
  }
  EXPECT_EQ(rows.size(), 30u);
}

// scikit-learn's digits (sklearn/datasets/data/digits.csv.gz, gunzipped), when PF_DIGITS_CSV names
// it: bazel test --test_env=PF_DIGITS_CSV=/path/to/digits.csv.
TEST(CsvClassification, LoadsScikitLearnDigits) {
  const char* path = std::getenv("PF_DIGITS_CSV");
  if (path == nullptr || !std::filesystem::is_regular_file(path)) {
    GTEST_SKIP() << "PF_DIGITS_CSV " << (path ? "names no file: " + std::string(path) : std::string("is not set"))
                 << "; set it to a gunzipped sklearn/datasets/data/digits.csv.gz to run this test";
  }
  CsvClassificationOptions options = options_for(path, 32);
  options.feature_scale = 1.0f / 16.0f;
  options.held_out_fraction = 0.2;
  const auto data = CsvClassificationDataset::load(options);
  EXPECT_EQ(data.train_size() + data.held_out_size(), 1797);
  EXPECT_EQ(data.held_out_size(), 359);
  EXPECT_EQ(data.features(), 64);
  EXPECT_EQ(data.classes(), 10);
  std::vector<int> counts(10, 0);
  for (const Batch& batch : data.held_out_batches(64)) {
    for (float x : batch.inputs.to_vector()) {
      EXPECT_GE(x, 0.0f);
      EXPECT_LE(x, 1.0f);
    }
    for (int64_t r = 0; r < batch.rows(); ++r) ++counts[batch.targets.i32()[r]];
  }
  for (int c = 0; c < 10; ++c) EXPECT_GT(counts[c], 10) << "digit " << c << " in the held-out split";
}

}  // namespace
}  // namespace pf
