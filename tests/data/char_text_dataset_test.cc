#include "runtime/data/char_text_dataset.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <fstream>
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

std::vector<int32_t> ids(const Tensor& t) { return std::vector<int32_t>(t.i32(), t.i32() + t.numel()); }

TEST(CharTextDataset, VocabularyIsSortedDistinctBytesOfAllFiles) {
  const std::string a = write_temp_file("a.txt", "hello world\n");
  const std::string b = write_temp_file("b.txt", "HELLO!");
  CharTextOptions options;
  options.files = {a, b};
  options.seq_len = 4;
  CharTextDataset data(options);
  const std::string expected_vocab = std::string("\n !EHLOdehlorw");
  EXPECT_EQ(data.vocabulary(), expected_vocab);
  EXPECT_EQ(data.vocab_size(), static_cast<int64_t>(expected_vocab.size()));
  ASSERT_EQ(data.tokens().size(), 18u);
  EXPECT_EQ(data.decode(data.tokens().data(), 18), "hello world\nHELLO!");
  EXPECT_EQ(data.encode('h'), static_cast<int32_t>(expected_vocab.find('h')));
  EXPECT_EQ(data.encode('z'), -1);
}

TEST(CharTextDataset, TargetsAreInputsShiftedByOne) {
  const std::string path = write_temp_file("abc.txt", "abcdefghijklmnopqrstuvwxyz0123456789");
  CharTextOptions options;
  options.files = {path};
  options.rows = 5;
  options.seq_len = 7;
  options.seed = 3;
  CharTextDataset data(options);
  for (int step = 0; step < 20; ++step) {
    Batch batch = data.next();
    ASSERT_EQ(batch.inputs.shape(), (Shape{5, 7}));
    ASSERT_EQ(batch.targets.shape(), (Shape{5, 7}));
    ASSERT_EQ(batch.inputs.dtype(), DType::kI32);
    ASSERT_EQ(batch.targets.dtype(), DType::kI32);
    const auto in = ids(batch.inputs), out = ids(batch.targets);
    for (int r = 0; r < 5; ++r) {
      // The input row plus the last target is one window of seq_len + 1 consecutive characters.
      const std::string window = data.decode(&in[r * 7], 7) + data.decode(&out[r * 7 + 6], 1);
      ASSERT_NE(std::string("abcdefghijklmnopqrstuvwxyz0123456789").find(window), std::string::npos)
          << "row " << r << " is not a window of the text: " << window;
      for (int t = 0; t + 1 < 7; ++t) ASSERT_EQ(in[r * 7 + t + 1], out[r * 7 + t]);
    }
  }
  EXPECT_EQ(data.position(), 20);
}

TEST(CharTextDataset, SeekReproducesTheStream) {
  CharTextOptions options;  // the default licence texts
  options.rows = 4;
  options.seq_len = 16;
  options.seed = 42;
  CharTextDataset data(options);
  std::vector<std::vector<int32_t>> first;
  for (int i = 0; i < 10; ++i) first.push_back(ids(data.next().inputs));
  data.seek(6);
  EXPECT_EQ(data.position(), 6);
  for (int i = 6; i < 10; ++i) EXPECT_EQ(ids(data.next().inputs), first[i]) << "position " << i;

  CharTextDataset again(options);
  again.seek(3);
  EXPECT_EQ(ids(again.next().inputs), first[3]);
  EXPECT_EQ(ids(again.batch_at(9).inputs), first[9]);
  EXPECT_EQ(again.position(), 4);  // batch_at does not move the cursor
  EXPECT_THROW(again.seek(-1), Error);
}

TEST(CharTextDataset, SeedAndPositionChangeTheWindows) {
  CharTextOptions options;
  options.rows = 4;
  options.seq_len = 32;
  options.seed = 1;
  CharTextDataset one(options);
  options.seed = 2;
  CharTextDataset two(options);
  EXPECT_NE(ids(one.batch_at(0).inputs), ids(two.batch_at(0).inputs));
  EXPECT_NE(ids(one.batch_at(0).inputs), ids(one.batch_at(1).inputs));
}

TEST(CharTextDataset, DefaultFilesAreTheLicenceTextsSortedWithoutSymlinks) {
  const auto files = CharTextDataset::default_text_files();
  ASSERT_FALSE(files.empty());
  EXPECT_TRUE(std::is_sorted(files.begin(), files.end()));
  std::set<std::string> seen;
  for (const auto& f : files) {
    EXPECT_EQ(f.rfind("/usr/share/common-licenses/", 0), 0u) << f;
    EXPECT_FALSE(std::filesystem::is_symlink(f)) << f;
    seen.insert(std::filesystem::path(f).filename().string());
  }
  if (std::filesystem::exists("/usr/share/common-licenses/GPL-3")) {
    EXPECT_EQ(seen.count("GPL-3"), 1u);
  }

  CharTextDataset data(CharTextOptions{});
  EXPECT_EQ(data.files(), files);
  EXPECT_GT(data.vocab_size(), 40);
  EXPECT_LE(data.vocab_size(), 256);
  EXPECT_GT(data.tokens().size(), 10000u);
  const Batch batch = data.next();
  for (int32_t id : ids(batch.inputs)) {
    ASSERT_GE(id, 0);
    ASSERT_LT(id, data.vocab_size());
  }
}

TEST(CharTextDataset, MissingFileIsAnErrorNamingIt) {
  CharTextOptions options;
  options.files = {write_temp_file("ok.txt", "some text that is long enough"), test_temp_dir() + "/no-such-file.txt"};
  options.seq_len = 4;
  try {
    CharTextDataset data(options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);
    EXPECT_NE(std::string(e.what()).find("no-such-file.txt"), std::string::npos) << e.what();
  }
}

TEST(CharTextDataset, DirectoryAndShortTextAreErrors) {
  CharTextOptions options;
  options.files = {test_temp_dir()};
  try {
    CharTextDataset data(options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find(test_temp_dir()), std::string::npos) << e.what();
  }
  options.files = {write_temp_file("short.txt", "abc")};
  options.seq_len = 3;  // needs 4 bytes
  try {
    CharTextDataset data(options);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("short.txt"), std::string::npos) << e.what();
  }
  options.seq_len = 2;  // exactly enough: one possible window
  CharTextDataset data(options);
  EXPECT_EQ(ids(data.next().inputs), (std::vector<int32_t>{0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1}));
}

TEST(CharTextDataset, BadOptionsAreInvalidArgument) {
  CharTextOptions options;
  options.rows = 0;
  EXPECT_THROW(CharTextDataset{options}, Error);
  options.rows = 1;
  options.seq_len = 0;
  EXPECT_THROW(CharTextDataset{options}, Error);
  EXPECT_THROW(CharTextDataset::text_files_in(test_temp_dir() + "/missing-folder"), Error);
}

// The held-out split is the text's last held_out_fraction: every training window (inputs and
// targets) lies before it, every held-out window inside it; with_split serves the same windows as a
// dataset built for the split, without reading the files again.
TEST(CharTextDataset, TheHeldOutSplitIsTheTextsTailAndTrainingNeverReadsIt) {
  std::string text;
  for (int i = 0; i < 300; ++i) text += static_cast<char>('a' + i % 26);  // the training part
  for (int i = 0; i < 100; ++i) text += static_cast<char>('A' + i % 26);  // the held-out tail
  const std::string path = write_temp_file("split.txt", text);
  CharTextOptions options;
  options.files = {path};
  options.rows = 8;
  options.seq_len = 6;
  options.seed = 9;
  options.held_out_fraction = 0.25;
  CharTextDataset train(options);
  EXPECT_EQ(train.split_begin(), 0);
  EXPECT_EQ(train.split_end(), 300);
  const std::unique_ptr<CharTextDataset> held = train.with_split(CharTextOptions::Split::kHeldOut);
  EXPECT_EQ(held->tokens().data(), train.tokens().data()) << "the splits should share the tokens";
  EXPECT_EQ(held->split_begin(), 300);
  EXPECT_EQ(held->split_end(), 400);
  EXPECT_EQ(held->vocab_size(), train.vocab_size());
  CharTextOptions held_options = options;
  held_options.split = CharTextOptions::Split::kHeldOut;
  CharTextDataset built(held_options);
  auto all_in = [](const CharTextDataset& d, const Tensor& t, char lo, char hi) {
    const std::string chars = d.decode(t.i32(), t.numel());
    return std::all_of(chars.begin(), chars.end(), [&](char c) { return c >= lo && c <= hi; });
  };
  for (int64_t p = 0; p < 100; ++p) {
    const Batch t = train.batch_at(p), h = held->batch_at(p), b = built.batch_at(p);
    EXPECT_TRUE(all_in(train, t.inputs, 'a', 'z') && all_in(train, t.targets, 'a', 'z')) << "training window " << p;
    EXPECT_TRUE(all_in(*held, h.inputs, 'A', 'Z') && all_in(*held, h.targets, 'A', 'Z')) << "held-out window " << p;
    EXPECT_EQ(ids(h.inputs), ids(b.inputs)) << p;
    EXPECT_EQ(ids(h.targets), ids(b.targets)) << p;
  }
  options.held_out_fraction = 0.99;  // too little text left for a training window
  EXPECT_THROW(CharTextDataset{options}, Error);
  CharTextOptions no_fraction;
  no_fraction.split = CharTextOptions::Split::kHeldOut;
  EXPECT_THROW(no_fraction.validate(), Error);
}

// Text whose tokens would not fit in the memory left is refused naming the files and the limit
// before the tokens are allocated (it failed an allocation, an error naming nothing). The cap
// leaves 40 MiB beside what the process maps, 16 MiB of it for the text; its tokens take 64 MiB.
// Under ASan the cap cannot be set; only the small text is loaded there.
TEST(CharTextDataset, TokensBeyondTheMemoryLeftAreRefusedNamingTheFiles) {
  const std::string big_path = write_temp_file("text_memory_big.txt", std::string(size_t{16} << 20, 'x'));
  const std::string small_path = write_temp_file("text_memory_small.txt", std::string(1000, 'y'));
  const pftest::AddressSpaceCap cap(pftest::address_space_in_use() + (int64_t{40} << 20));
  CharTextOptions options;
  options.files = {small_path};
  EXPECT_EQ(CharTextDataset(options).tokens().size(), 1000u);
  if (!pftest::kAddressSpaceCapWorks) return;
  options.files = {big_path};
  try {
    CharTextDataset data(options);
    FAIL() << "text beyond the memory limit was loaded";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kOutOfMemory) << e.what();
    EXPECT_NE(std::string(e.what()).find("text of '" + big_path + "': 16777216 bytes take 67108864 bytes as tokens"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("more than the limit of"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace pf
