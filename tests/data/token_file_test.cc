// The token-file source (runtime/data/token_file.h): the three formats told apart and their
// damage refused naming the file, the same windows as the character text over the same token
// stream, the held-out split, resume by seek, the vocabulary check, and the consecutive windows of
// `eval` against the file's bytes read here.
#include "runtime/data/token_file.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/data/char_text_dataset.h"
#include "tests/util/temp_files.h"

namespace pf {
namespace {

using pftest::write_temp_file;

std::vector<int32_t> ids(const Tensor& t) { return std::vector<int32_t>(t.i32(), t.i32() + t.numel()); }

void put_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}
// nanoGPT's train.bin: uint16 tokens, nothing else.
std::string nanogpt_bytes(const std::vector<int64_t>& tokens) {
  std::string out;
  for (int64_t t : tokens) put_le(out, static_cast<uint64_t>(t), 2);
  return out;
}
// llm.c's write_datafile: 256 int32s (magic, version, count) then the tokens.
std::string llmc_bytes(const std::vector<int64_t>& tokens, bool llama3, int64_t stated_count = -1) {
  std::string out;
  put_le(out, llama3 ? 20240801 : 20240520, 4);
  put_le(out, llama3 ? 7 : 1, 4);
  put_le(out, static_cast<uint64_t>(stated_count < 0 ? static_cast<int64_t>(tokens.size()) : stated_count), 4);
  out.append(253 * 4, '\0');
  for (int64_t t : tokens) put_le(out, static_cast<uint64_t>(t), llama3 ? 4 : 2);
  return out;
}

std::vector<int64_t> counting(int64_t n, int64_t modulo) {
  std::vector<int64_t> t(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) t[static_cast<size_t>(i)] = (i * 7 + 3) % modulo;
  return t;
}

std::vector<int32_t> read_all(const TokenFile& f) {
  std::vector<int32_t> out(static_cast<size_t>(f.size()));
  f.read(0, f.size(), 0, out.data());
  return out;
}

ErrorCode code_of(const std::function<void()>& f, std::string* message) {
  try {
    f();
  } catch (const Error& e) {
    *message = e.what();
    return e.code();
  }
  return ErrorCode::kOk;
}

TEST(TokenFile, ReadsTheThreeFormats) {
  const std::vector<int64_t> small = counting(1000, 50257);
  const std::vector<int64_t> large = {0, 65535, 65536, 128255, 2147483647, 17};
  struct Case {
    std::string bytes;
    TokenFile::Format format;
    const char* name;
    std::vector<int64_t> tokens;
  } cases[] = {
      {nanogpt_bytes(small), TokenFile::Format::kNanoGptUint16, "nanoGPT uint16", small},
      {llmc_bytes(small, false), TokenFile::Format::kLlmcGpt2, "llm.c GPT-2", small},
      {llmc_bytes(large, true), TokenFile::Format::kLlmcLlama3, "llm.c Llama-3", large},
  };
  int n = 0;
  for (const Case& c : cases) {
    auto file = TokenFile::open(write_temp_file("formats" + std::to_string(n++) + ".bin", c.bytes));
    EXPECT_EQ(file->format(), c.format);
    EXPECT_STREQ(file->format_name(), c.name);
    ASSERT_EQ(file->size(), static_cast<int64_t>(c.tokens.size()));
    const std::vector<int32_t> got = read_all(*file);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], c.tokens[i]) << c.name << " token " << i;
    std::vector<int32_t> middle(3);
    file->read(2, 3, 0, middle.data());
    EXPECT_EQ(middle, std::vector<int32_t>(got.begin() + 2, got.begin() + 5));
  }
}

TEST(TokenFile, RefusesDamagedFilesNamingThem) {
  const std::vector<int64_t> t = counting(100, 1000);
  std::string header_cut = llmc_bytes(t, false).substr(0, 600);
  struct Case {
    std::string bytes;
    ErrorCode code;
    const char* says;
  } cases[] = {
      {nanogpt_bytes(t) + "x", ErrorCode::kDataLoss, "an odd number"},
      {"", ErrorCode::kDataLoss, "no token"},
      {header_cut, ErrorCode::kDataLoss, "fewer than its 1024-byte header"},
      {llmc_bytes(t, false, 101), ErrorCode::kDataLoss, "states 101 tokens"},
      {llmc_bytes(t, false).substr(0, 1024 + 150), ErrorCode::kDataLoss, "states 100 tokens"},
      {llmc_bytes(t, true, 0), ErrorCode::kDataLoss, "states 0 tokens"},
  };
  std::string bad_version = llmc_bytes(t, false);
  bad_version[4] = 2;
  int n = 0;
  for (const Case& c : cases) {
    const std::string path = write_temp_file("damaged" + std::to_string(n++) + ".bin", c.bytes);
    std::string message;
    EXPECT_EQ(code_of([&] { TokenFile::open(path); }, &message), c.code) << c.says;
    EXPECT_NE(message.find(path), std::string::npos) << message;
    EXPECT_NE(message.find(c.says), std::string::npos) << message;
  }
  std::string message;
  const std::string path = write_temp_file("version.bin", bad_version);
  EXPECT_EQ(code_of([&] { TokenFile::open(path); }, &message), ErrorCode::kDataLoss);
  EXPECT_NE(message.find("header version 2, expected 1"), std::string::npos) << message;
  EXPECT_EQ(code_of([&] { TokenFile::open(path + ".missing"); }, &message), ErrorCode::kNotFound);
  EXPECT_NE(message.find(path + ".missing"), std::string::npos) << message;
}

TEST(TokenFile, RefusesATokenOutsideTheVocabularyNamingItsIndex) {
  std::vector<int64_t> t = counting(300, 90);
  t[211] = 95;
  TokenFileOptions o;
  o.file = write_temp_file("vocab.bin", llmc_bytes(t, false));
  o.rows = 64;
  o.seq_len = 16;
  o.vocab = 90;
  TokenFileDataset data(o);
  std::string message;
  // Some window of the first batches covers token 211.
  EXPECT_EQ(code_of(
                [&] {
                  for (int p = 0; p < 20; ++p) data.next();
                },
                &message),
            ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("token 211 is 95, outside the model's vocabulary of 90"), std::string::npos) << message;
  EXPECT_NE(message.find(o.file), std::string::npos) << message;
}

// The token file of a text's token ids serves exactly the character text's batches: one window
// rule (token_windows.h) for both, in both splits, and after a seek.
TEST(TokenFileDataset, ServesTheCharacterTextsWindowsOverTheSameTokens) {
  CharTextOptions c;
  c.files = {write_temp_file("text.txt", std::string(
                                             "It is a truth universally acknowledged, that a single man in "
                                             "possession of a good fortune, must be in want of a wife.\n") +
                                             "However little known the feelings or views of such a man may be.")};
  c.rows = 5;
  c.seq_len = 12;
  c.seed = 42;
  c.held_out_fraction = 0.25;
  CharTextDataset text(c);
  std::vector<int64_t> tokens(text.tokens().begin(), text.tokens().end());
  TokenFileOptions o;
  o.file = write_temp_file("text.bin", nanogpt_bytes(tokens));
  o.rows = c.rows;
  o.seq_len = c.seq_len;
  o.seed = c.seed;
  o.held_out_fraction = c.held_out_fraction;
  o.vocab = text.vocab_size();
  TokenFileDataset data(o);
  EXPECT_EQ(data.split_begin(), text.split_begin());
  EXPECT_EQ(data.split_end(), text.split_end());
  auto held = data.with_split(DataSplit::kHeldOut);
  auto text_held = text.with_split(DataSplit::kHeldOut);
  EXPECT_EQ(held->split_begin(), text_held->split_begin());
  EXPECT_GT(held->split_begin(), 0);
  for (int p = 0; p < 30; ++p) {
    const Batch a = data.next(), b = text.next();
    ASSERT_EQ(ids(a.inputs), ids(b.inputs)) << "position " << p;
    ASSERT_EQ(ids(a.targets), ids(b.targets)) << "position " << p;
    const Batch ha = held->next(), hb = text_held->next();
    ASSERT_EQ(ids(ha.inputs), ids(hb.inputs)) << "held-out position " << p;
    ASSERT_EQ(ids(ha.targets), ids(hb.targets)) << "held-out position " << p;
  }
  // Resume: seek(p) serves what position p served.
  data.seek(7);
  text.seek(7);
  EXPECT_EQ(ids(data.next().inputs), ids(text.next().inputs));
  EXPECT_EQ(data.position(), 8);
}

TEST(TokenFileDataset, RefusesASplitShorterThanAWindow) {
  TokenFileOptions o;
  o.file = write_temp_file("short.bin", nanogpt_bytes(counting(20, 10)));
  o.seq_len = 19;
  EXPECT_NO_THROW(TokenFileDataset{o});
  o.seq_len = 20;
  std::string message;
  EXPECT_EQ(code_of([&] { TokenFileDataset{o}; }, &message), ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("shorter than seq_len + 1 = 21"), std::string::npos) << message;
  EXPECT_NE(message.find(o.file), std::string::npos) << message;
}

// eval's windows, against the bytes read here: window w = tokens [w (S + 1), (w + 1)(S + 1)), the
// remainder dropped, the last batch holding the windows left.
TEST(ConsecutiveWindows, CoverTheFileInOrderWithoutOverlap) {
  const std::vector<int64_t> t = counting(103, 1000);  // S = 9: 10 windows of 10, 3 tokens left
  auto file = TokenFile::open(write_temp_file("eval.bin", llmc_bytes(t, false)));
  ConsecutiveWindows windows(file, 9, 4, 1000);
  EXPECT_EQ(windows.windows(), 10);
  EXPECT_EQ(windows.batches(), 3);
  int64_t w = 0;
  for (int64_t rows : {4, 4, 2}) {
    const Batch b = windows.next();
    ASSERT_EQ(b.inputs.shape(), (Shape{rows, 9}));
    const auto in = ids(b.inputs), out = ids(b.targets);
    for (int64_t r = 0; r < rows; ++r, ++w)
      for (int64_t i = 0; i < 9; ++i) {
        ASSERT_EQ(in[static_cast<size_t>(r * 9 + i)], t[static_cast<size_t>(w * 10 + i)]);
        ASSERT_EQ(out[static_cast<size_t>(r * 9 + i)], t[static_cast<size_t>(w * 10 + i + 1)]);
      }
  }
  std::string message;
  EXPECT_EQ(code_of([&] { windows.next(); }, &message), ErrorCode::kFailedPrecondition);
  windows.seek(2);
  EXPECT_EQ(windows.next().rows(), 2);
  EXPECT_EQ(code_of([&] { ConsecutiveWindows(file, 103, 1, 0); }, &message), ErrorCode::kInvalidArgument);
  EXPECT_NE(message.find("fewer than one window of seq_len + 1 = 104"), std::string::npos) << message;
}

}  // namespace
}  // namespace pf
