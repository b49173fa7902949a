// The CIFAR-10 source (runtime/data/cifar10.h) on tiny files written here with known bytes: every
// feature exactly the pixel byte / 255 in the file's channel-major order, the labels, the shuffled
// training stream and its wrap, the held-out split of one file and of a folder (test_batch.bin),
// the test set of `eval`, seek, the per-channel normalisation, and damaged files and folders refused
// naming the file (a regression test in place of a fuzz target: the checks are the size and the
// label byte).
#include "runtime/data/cifar10.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "tests/util/temp_files.h"

namespace pf {
namespace {

constexpr int64_t kPixels = 3072;
constexpr int64_t kPlane = 1024;

// The pixel byte k of the record with id `id`: byte 0 is the id, so a row names its record.
unsigned char pixel(int id, int64_t k) { return static_cast<unsigned char>((id + k * 7) % 256); }
int label_of(int id) { return (id * 3) % 10; }

// Records with these ids, each a label byte and 3072 pixel bytes.
std::string records(const std::vector<int>& ids) {
  std::string out;
  for (int id : ids) {
    out.push_back(static_cast<char>(label_of(id)));
    for (int64_t k = 0; k < kPixels; ++k) out.push_back(static_cast<char>(pixel(id, k)));
  }
  return out;
}
std::vector<int> range(int begin, int end) {
  std::vector<int> ids;
  for (int i = begin; i < end; ++i) ids.push_back(i);
  return ids;
}

void write_file(const std::string& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// A cifar-10-batches-bin folder: data_batch_N.bin holds ids 10 N .. 10 N + 2, test_batch.bin ids
// 100 .. 104.
std::string write_folder(const std::string& tag) {
  const std::string dir = pftest::fresh_temp_dir(tag);
  for (int n = 1; n <= 5; ++n)
    write_file(dir + "/data_batch_" + std::to_string(n) + ".bin", records(range(10 * n, 10 * n + 3)));
  write_file(dir + "/test_batch.bin", records(range(100, 105)));
  return dir;
}

Cifar10Options options_for(const std::string& path, int64_t rows) {
  Cifar10Options o;
  o.path = path;
  o.rows = rows;
  return o;
}

// The ids of a batch's rows, each row checked against the bytes of its record: every feature is the
// pixel byte / 255.0f in the file's order, the target its label.
std::vector<int> checked_ids(const Batch& batch) {
  EXPECT_EQ(batch.inputs.dtype(), DType::kF32);
  EXPECT_EQ(batch.targets.dtype(), DType::kI32);
  EXPECT_EQ(batch.inputs.dim(1), kPixels);
  EXPECT_EQ(batch.targets.shape(), (Shape{batch.rows()}));
  std::vector<int> ids;
  for (int64_t r = 0; r < batch.rows(); ++r) {
    const float* x = batch.inputs.f32() + r * kPixels;
    const int id = static_cast<int>(x[0] * 255.0f + 0.5f);
    int64_t wrong = 0;
    for (int64_t k = 0; k < kPixels; ++k) wrong += x[k] != static_cast<float>(pixel(id, k)) / 255.0f;
    EXPECT_EQ(wrong, 0) << "record " << id;
    EXPECT_EQ(batch.targets.i32()[r], label_of(id)) << "record " << id;
    ids.push_back(id);
  }
  return ids;
}

Error error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e;
  }
  ADD_FAILURE() << "no error thrown";
  return Error(ErrorCode::kOk, "");
}

void expect_error(const std::function<void()>& f, ErrorCode code, const std::vector<std::string>& parts) {
  const Error e = error_of(f);
  EXPECT_EQ(e.code(), code) << e.what();
  for (const std::string& part : parts)
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << "'" << part << "' not in: " << e.what();
}

TEST(Cifar10, FeaturesAreThePixelBytesOver255InChannelMajorOrder) {
  // One record spelled out: label 7, red 0..255 repeating, green all 255, blue all 0.
  std::string one(1, '\x07');
  for (int64_t k = 0; k < kPlane; ++k) one.push_back(static_cast<char>(k % 256));
  one.append(kPlane, '\xff');
  one.append(kPlane, '\0');
  const Cifar10Dataset data = Cifar10Dataset::load(options_for(pftest::write_temp_file("one.bin", one), 1));
  EXPECT_EQ(data.features(), 3072);
  EXPECT_EQ(data.classes(), 10);
  EXPECT_EQ(data.train_size(), 1);
  EXPECT_EQ(data.held_out_size(), 0);
  const Batch b = data.training_source()->next();
  ASSERT_EQ(b.inputs.shape(), (Shape{1, 3072}));
  EXPECT_EQ(b.targets.i32()[0], 7);
  const float* x = b.inputs.f32();
  for (int64_t k = 0; k < kPlane; ++k) {
    ASSERT_EQ(x[k], static_cast<float>(k % 256) / 255.0f) << k;  // red (y, x) = k / 32, k % 32
    ASSERT_EQ(x[kPlane + k], 1.0f) << k;                         // green
    ASSERT_EQ(x[2 * kPlane + k], 0.0f) << k;                     // blue
  }
  EXPECT_EQ(x[1], 1.0f / 255.0f);
  EXPECT_EQ(x[255], 1.0f);
}

TEST(Cifar10, OneFilesStreamWrapsAndItsLastRecordsAreHeldOut) {
  const std::string path = pftest::write_temp_file("ten.bin", records(range(0, 10)));
  Cifar10Options o = options_for(path, 1);
  o.held_out_fraction = 0.3;
  o.shuffle_seed = 4;
  // With one row per micro-batch, micro-batch k is shuffled training record k: the order.
  const Cifar10Dataset one_row = Cifar10Dataset::load(o);
  EXPECT_EQ(one_row.train_size(), 7);
  EXPECT_EQ(one_row.held_out_size(), 3);
  EXPECT_EQ(one_row.files(), std::vector<std::string>{path});
  auto order_source = one_row.training_source();
  std::vector<int> order;
  for (int k = 0; k < 7; ++k) order.push_back(checked_ids(order_source->next())[0]);
  EXPECT_NE(order, range(0, 7)) << "not shuffled";

  o.rows = 3;
  const Cifar10Dataset data = Cifar10Dataset::load(o);
  auto source = data.training_source();
  for (int64_t p = 0; p < 9; ++p) {
    const std::vector<int> got = checked_ids(source->next());
    ASSERT_EQ(got.size(), 3u);
    for (int64_t r = 0; r < 3; ++r) EXPECT_EQ(got[r], order[(p * 3 + r) % 7]) << "micro-batch " << p << " row " << r;
  }
  // Far positions do not overflow.
  const int64_t far = int64_t{1} << 53;
  source->seek(far);
  const std::vector<int> got = checked_ids(source->next());
  for (int64_t r = 0; r < 3; ++r) EXPECT_EQ(got[r], order[((far % 7) * 3 + r) % 7]);

  // The held-out records: the other three, in batches of 3 (one batch), cycling.
  EXPECT_EQ(data.held_out_batches(), 1);
  auto held_out = data.held_out_source();
  const std::vector<int> held = checked_ids(held_out->next());
  std::set<int> all(order.begin(), order.end());
  all.insert(held.begin(), held.end());
  EXPECT_EQ(all, std::set<int>({0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  EXPECT_EQ(checked_ids(held_out->next()), held);

  // The order depends on the seed only.
  const std::vector<int> first = checked_ids(data.training_source()->next());
  EXPECT_EQ(checked_ids(Cifar10Dataset::load(o).training_source()->next()), first);
  o.shuffle_seed = 5;
  EXPECT_NE(checked_ids(Cifar10Dataset::load(o).training_source()->next()), first);
}

TEST(Cifar10, AFoldersTrainingSplitIsItsFiveDataBatchesAndItsHeldOutSplitTestBatch) {
  const std::string dir = write_folder("cifar_folder");
  Cifar10Options o = options_for(dir, 4);
  o.shuffle_seed = 9;
  const Cifar10Dataset data = Cifar10Dataset::load(o);
  EXPECT_EQ(data.train_size(), 15);
  EXPECT_EQ(data.held_out_size(), 5);
  ASSERT_EQ(data.files().size(), 6u);
  EXPECT_EQ(data.files()[0], dir + "/data_batch_1.bin");
  EXPECT_EQ(data.files()[5], dir + "/test_batch.bin");
  // 15 micro-batches of 4 rows: every training record 4 times.
  auto source = data.training_source();
  std::map<int, int> seen;
  for (int p = 0; p < 15; ++p)
    for (int id : checked_ids(source->next())) ++seen[id];
  std::map<int, int> expected;
  for (int n = 1; n <= 5; ++n)
    for (int id = 10 * n; id < 10 * n + 3; ++id) expected[id] = 4;
  EXPECT_EQ(seen, expected);

  // test_batch.bin in order: 4 + 1 (the remainder), then round again.
  EXPECT_EQ(data.held_out_batches(), 2);
  auto held_out = data.held_out_source();
  EXPECT_EQ(checked_ids(held_out->next()), std::vector<int>({100, 101, 102, 103}));
  EXPECT_EQ(checked_ids(held_out->next()), std::vector<int>({104}));
  EXPECT_EQ(checked_ids(held_out->next()), std::vector<int>({100, 101, 102, 103}));
  held_out->seek(1);
  EXPECT_EQ(checked_ids(held_out->next()), std::vector<int>({104}));

  // eval's test set: the folder's test_batch.bin, or all of one file, in order.
  const Cifar10Dataset test = Cifar10Dataset::load_test_set(options_for(dir, 3));
  EXPECT_EQ(test.train_size(), 0);
  EXPECT_EQ(test.files(), std::vector<std::string>{dir + "/test_batch.bin"});
  auto test_source = test.held_out_source();
  EXPECT_EQ(checked_ids(test_source->next()), std::vector<int>({100, 101, 102}));
  EXPECT_EQ(checked_ids(test_source->next()), std::vector<int>({103, 104}));
  EXPECT_EQ(error_of([&] { test.training_source(); }).code(), ErrorCode::kFailedPrecondition);
  const Cifar10Dataset file = Cifar10Dataset::load_test_set(options_for(dir + "/data_batch_2.bin", 8));
  EXPECT_EQ(checked_ids(file.held_out_source()->next()), std::vector<int>({20, 21, 22}));

  // A folder's held-out split is test_batch.bin: no fraction of it.
  o.held_out_fraction = 0.2;
  expect_error([&] { Cifar10Dataset::load(o); }, ErrorCode::kInvalidArgument,
               {"held_out_fraction", dir, "test_batch.bin"});

  // The test set needs test_batch.bin only.
  std::filesystem::remove(dir + "/data_batch_3.bin");
  EXPECT_EQ(Cifar10Dataset::load_test_set(options_for(dir, 3)).held_out_size(), 5);
  expect_error([&] { Cifar10Dataset::load(options_for(dir, 3)); }, ErrorCode::kNotFound, {dir + "/data_batch_3.bin"});
}

TEST(Cifar10, SeekReproducesTheStreamAndOutlivesTheDataset) {
  std::unique_ptr<DataSource> source;
  {
    Cifar10Options o = options_for(pftest::write_temp_file("seek.bin", records(range(0, 13))), 4);
    o.shuffle_seed = 3;
    source = Cifar10Dataset::load(o).training_source();
  }
  std::vector<std::vector<float>> inputs;
  for (int p = 0; p < 6; ++p) inputs.push_back(source->next().inputs.to_vector());
  source->seek(3);
  EXPECT_EQ(source->next().inputs.to_vector(), inputs[3]);
  EXPECT_EQ(source->position(), 4);
  source->seek(1);
  EXPECT_EQ(source->next().inputs.to_vector(), inputs[1]);
  EXPECT_THROW(source->seek(-1), Error);
}

TEST(Cifar10, MeanAndStddevNormaliseEachChannel) {
  Cifar10Options o = options_for(pftest::write_temp_file("norm.bin", records({42})), 1);
  o.mean = {0.5f, 0.25f, 0.0f};
  o.stddev = {0.5f, 2.0f, 0.25f};
  const Batch b = Cifar10Dataset::load(o).training_source()->next();
  for (int64_t k = 0; k < kPixels; ++k) {
    const size_t c = static_cast<size_t>(k / kPlane);
    const float expected = (static_cast<float>(pixel(42, k)) / 255.0f - o.mean[c]) / o.stddev[c];
    ASSERT_EQ(b.inputs.f32()[k], expected) << k;
  }
  o.stddev[1] = 0.0f;
  expect_error([&] { Cifar10Dataset::load(o); }, ErrorCode::kInvalidArgument, {"stddev[1]"});
}

// The damaged files and folders the source must refuse, each naming the file.
TEST(Cifar10, DamagedFilesAndFoldersAreRefusedNamingTheFile) {
  const std::string good = records(range(0, 3));
  const std::string truncated = pftest::write_temp_file("truncated.bin", good.substr(0, good.size() - 100));
  expect_error([&] { Cifar10Dataset::load(options_for(truncated, 1)); }, ErrorCode::kDataLoss,
               {"'" + truncated + "'", "holds 9119 bytes, not a positive multiple of 3073"});
  const std::string odd = pftest::write_temp_file("odd.bin", std::string(100, '\x01'));
  expect_error([&] { Cifar10Dataset::load(options_for(odd, 1)); }, ErrorCode::kDataLoss,
               {"'" + odd + "'", "holds 100 bytes"});
  const std::string empty = pftest::write_temp_file("empty.bin", "");
  expect_error([&] { Cifar10Dataset::load(options_for(empty, 1)); }, ErrorCode::kDataLoss,
               {"'" + empty + "'", "holds 0 bytes"});
  expect_error([&] { Cifar10Dataset::load(options_for("/nonexistent/data_batch_1.bin", 1)); }, ErrorCode::kNotFound,
               {"/nonexistent/data_batch_1.bin"});

  // Label 10 in record 2: refused when the record is read, naming the file and the record.
  std::string bad_label = good;
  bad_label[2 * 3073] = 10;
  const std::string label = pftest::write_temp_file("label10.bin", bad_label);
  const Cifar10Dataset data = Cifar10Dataset::load(options_for(label, 3));
  expect_error([&] { data.training_source()->next(); }, ErrorCode::kDataLoss,
               {"'" + label + "'", "record 2 (counting from 0) has label 10"});
  auto test_set = Cifar10Dataset::load_test_set(options_for(label, 1)).held_out_source();
  EXPECT_EQ(checked_ids(test_set->next()), std::vector<int>{0});
  EXPECT_EQ(checked_ids(test_set->next()), std::vector<int>{1});
  expect_error([&] { test_set->next(); }, ErrorCode::kDataLoss, {"'" + label + "'", "record 2"});
}

TEST(Cifar10, BrokenFoldersAreRefusedNamingTheMissingFile) {
  const std::string empty_dir = pftest::fresh_temp_dir("cifar_empty");
  expect_error([&] { Cifar10Dataset::load(options_for(empty_dir, 1)); }, ErrorCode::kNotFound,
               {"'" + empty_dir + "/data_batch_1.bin'", "test_batch.bin"});
  const std::string dir = write_folder("cifar_no_test");
  std::filesystem::remove(dir + "/test_batch.bin");
  expect_error([&] { Cifar10Dataset::load(options_for(dir, 1)); }, ErrorCode::kNotFound,
               {"'" + dir + "/test_batch.bin'"});
  expect_error([&] { Cifar10Dataset::load_test_set(options_for(dir, 1)); }, ErrorCode::kNotFound,
               {"'" + dir + "/test_batch.bin'"});
  const std::string damaged = write_folder("cifar_damaged");
  write_file(damaged + "/data_batch_4.bin", "x");
  expect_error([&] { Cifar10Dataset::load(options_for(damaged, 1)); }, ErrorCode::kDataLoss,
               {"'" + damaged + "/data_batch_4.bin' holds 1 bytes"});
}

TEST(Cifar10, BadOptionsAreInvalidArgument) {
  const std::string path = pftest::write_temp_file("opts.bin", records(range(0, 4)));
  expect_error([&] { Cifar10Dataset::load(options_for("", 1)); }, ErrorCode::kInvalidArgument, {"path"});
  expect_error([&] { Cifar10Dataset::load(options_for(path, 0)); }, ErrorCode::kInvalidArgument, {"rows"});
  expect_error([&] { Cifar10Dataset::load(options_for(path, 5)); }, ErrorCode::kInvalidArgument,
               {path, "the training split has 4 of 4 records", "fewer than rows = 5"});
  Cifar10Options o = options_for(path, 1);
  o.held_out_fraction = 1.0;
  expect_error([&] { Cifar10Dataset::load(o); }, ErrorCode::kInvalidArgument, {"held_out_fraction"});
  o.held_out_fraction = 0.5;
  expect_error([&] { Cifar10Dataset::load_test_set(o); }, ErrorCode::kInvalidArgument, {"held_out_fraction"});
  o.held_out_fraction = 0;
  expect_error([&] { Cifar10Dataset::load(o).held_out_source(); }, ErrorCode::kFailedPrecondition,
               {path, "held_out_fraction > 0"});
}

}  // namespace
}  // namespace pf
