#include "runtime/data/token_file.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>
#include <vector>

#include "runtime/core/error.h"
#include "runtime/core/mapped_file.h"

namespace pf {
namespace {

constexpr int64_t kLlmcHeaderBytes = 256 * 4;
constexpr int32_t kLlmcGpt2Magic = 20240520, kLlmcGpt2Version = 1;
constexpr int32_t kLlmcLlama3Magic = 20240801, kLlmcLlama3Version = 7;

int32_t int32_at(const unsigned char* p) {  // little-endian, as llm.c writes it
  return static_cast<int32_t>(static_cast<uint32_t>(p[0]) | static_cast<uint32_t>(p[1]) << 8 |
                              static_cast<uint32_t>(p[2]) << 16 | static_cast<uint32_t>(p[3]) << 24);
}

}  // namespace

std::shared_ptr<const TokenFile> TokenFile::open(const std::string& path) {
  std::shared_ptr<TokenFile> file(new TokenFile());
  file->path_ = path;
  file->file_ = MappedFile::open(path, "token file", true);  // windows are read at random places
  file->map_ = file->file_->data();
  const int64_t bytes = static_cast<int64_t>(file->file_->size());
  if (bytes < 2) fail(ErrorCode::kDataLoss, "token file '", path, "' holds ", bytes, " bytes: no token");

  const int32_t magic = bytes >= 4 ? int32_at(file->map_) : 0;
  if (magic == kLlmcGpt2Magic || magic == kLlmcLlama3Magic) {
    const bool gpt2 = magic == kLlmcGpt2Magic;
    const char* name = gpt2 ? "llm.c GPT-2" : "llm.c Llama-3";
    if (bytes < kLlmcHeaderBytes)
      fail(ErrorCode::kDataLoss, "token file '", path, "' starts with ", name, "'s magic number ", magic, " but holds ",
           bytes, " bytes, fewer than its ", kLlmcHeaderBytes, "-byte header");
    const int32_t version = int32_at(file->map_ + 4);
    const int32_t expected = gpt2 ? kLlmcGpt2Version : kLlmcLlama3Version;
    if (version != expected)
      fail(ErrorCode::kDataLoss, "token file '", path, "': ", name, " header version ", version, ", expected ", expected);
    const int32_t count = int32_at(file->map_ + 8);
    file->format_ = gpt2 ? Format::kLlmcGpt2 : Format::kLlmcLlama3;
    file->header_bytes_ = kLlmcHeaderBytes;
    file->token_bytes_ = gpt2 ? 2 : 4;
    const int64_t stated = kLlmcHeaderBytes + static_cast<int64_t>(count) * file->token_bytes_;
    if (count < 1 || stated != bytes)
      fail(ErrorCode::kDataLoss, "token file '", path, "': its ", name, " header states ", count, " tokens (",
           stated, " bytes with the header) but the file holds ", bytes, " bytes");
    file->tokens_ = count;
  } else {
    if (bytes % 2 != 0)
      fail(ErrorCode::kDataLoss, "token file '", path, "' holds ", bytes,
           " bytes, an odd number: not uint16 tokens (nanoGPT's format) and no llm.c header");
    file->format_ = Format::kNanoGptUint16;
    file->tokens_ = bytes / 2;
  }
  return file;
}

const char* TokenFile::format_name() const {
  switch (format_) {
    case Format::kLlmcGpt2: return "llm.c GPT-2";
    case Format::kLlmcLlama3: return "llm.c Llama-3";
    case Format::kNanoGptUint16: break;
  }
  return "nanoGPT uint16";
}

void TokenFile::read(int64_t begin, int64_t count, int64_t vocab, int32_t* out) const {
  PF_INTERNAL_CHECK(begin >= 0 && count >= 0 && begin + count <= tokens_, "tokens [", begin, ", ", begin + count,
                    ") outside the ", tokens_, " of '", path_, "'");
  const unsigned char* p = map_ + header_bytes_ + begin * token_bytes_;
  const int64_t limit = vocab > 0 ? vocab : int64_t{INT32_MAX} + 1;
  for (int64_t i = 0; i < count; ++i, p += token_bytes_) {
    const int64_t token = token_bytes_ == 2 ? static_cast<int64_t>(p[0] | p[1] << 8)
                                            : static_cast<int64_t>(static_cast<uint32_t>(int32_at(p)));
    if (token >= limit)
      fail(ErrorCode::kInvalidArgument, "token file '", path_, "': token ", begin + i, " is ", token,
           vocab > 0 ? ", outside the model's vocabulary of " : ", above the largest id ",
           vocab > 0 ? vocab : int64_t{INT32_MAX});
    out[i] = static_cast<int32_t>(token);
  }
}

void TokenFileOptions::validate() const {
  PF_CHECK_ARG(!file.empty(), "the token file is not given");
  data::check_window_options(rows, seq_len, held_out_fraction, split, "the tokens");
  PF_CHECK_ARG(vocab >= 0, "vocab must be >= 0, got ", vocab);
}

TokenFileDataset::TokenFileDataset(const TokenFileOptions& options) : options_(options) {
  options_.validate();
  file_ = TokenFile::open(options_.file);
  select_split();
}

void TokenFileDataset::select_split() {
  split_ = data::split_range(file_->size(), options_.held_out_fraction, options_.split, options_.seq_len,
                             "token file '" + options_.file + "'");
}

std::unique_ptr<TokenFileDataset> TokenFileDataset::with_split(DataSplit split) const {
  auto other = std::make_unique<TokenFileDataset>(*this);
  other->options_.split = split;
  other->options_.validate();
  other->select_split();
  other->rewind();
  return other;
}

namespace {

// rows x seq_len inputs and targets from windows of seq_len + 1 tokens starting where `start` says.
template <typename Start>
Batch window_batch(const TokenFile& file, int64_t rows, int64_t seq_len, int64_t vocab, Start start) {
  Batch batch;
  batch.inputs = Tensor::empty({rows, seq_len}, DType::kI32);
  batch.targets = Tensor::empty({rows, seq_len}, DType::kI32);
  int32_t* in = batch.inputs.i32();
  int32_t* out = batch.targets.i32();
  std::vector<int32_t> window(static_cast<size_t>(seq_len + 1));
  for (int64_t r = 0; r < rows; ++r) {
    file.read(start(r), seq_len + 1, vocab, window.data());
    std::memcpy(in + r * seq_len, window.data(), static_cast<size_t>(seq_len) * sizeof(int32_t));
    std::memcpy(out + r * seq_len, window.data() + 1, static_cast<size_t>(seq_len) * sizeof(int32_t));
  }
  return batch;
}

}  // namespace

Batch TokenFileDataset::batch_at(int64_t position) const {
  return window_batch(*file_, options_.rows, options_.seq_len, options_.vocab, [&](int64_t r) {
    return data::window_start(options_.seed, options_.split, position, r, split_, options_.seq_len);
  });
}

ConsecutiveWindows::ConsecutiveWindows(std::shared_ptr<const TokenFile> file, int64_t seq_len, int64_t rows,
                                       int64_t vocab)
    : file_(std::move(file)), seq_len_(seq_len), rows_(rows), vocab_(vocab) {
  PF_CHECK_ARG(seq_len_ >= 1, "seq_len must be >= 1, got ", seq_len_);
  PF_CHECK_ARG(rows_ >= 1, "rows must be >= 1, got ", rows_);
  windows_ = file_->size() / (seq_len_ + 1);
  PF_CHECK_ARG(windows_ >= 1, "token file '", file_->path(), "' holds ", file_->size(),
               " tokens, fewer than one window of seq_len + 1 = ", seq_len_ + 1);
}

Batch ConsecutiveWindows::batch_at(int64_t position) const {
  const int64_t first = position * rows_;
  PF_CHECK_STATE(first < windows_, "token file '", file_->path(), "': batch ", position, " is past the last of ",
                 batches(), " (", windows_, " windows of ", seq_len_ + 1, " tokens)");
  const int64_t rows = std::min(rows_, windows_ - first);
  return window_batch(*file_, rows, seq_len_, vocab_, [&](int64_t r) { return (first + r) * (seq_len_ + 1); });
}

}  // namespace pf
