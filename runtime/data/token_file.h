// Pre-tokenised language-modelling data: the flat token files nanoGPT's and llm.c's preparation
// scripts write, memory-mapped read-only (a process reads the pages of the windows it uses, not the
// file).
//
// Formats, told apart by the first bytes:
//   llm.c GPT-2:   256 little-endian int32s (20240520, 1, token count, 0...) then uint16 tokens;
//   llm.c Llama-3: 256 int32s (20240801, 7, token count, 0...) then uint32 tokens;
//   nanoGPT:       uint16 tokens, nothing else (train.bin / val.bin of prepare.py).
// A file with an llm.c magic number whose size is not the header plus the count it states is
// refused (kDataLoss naming the file), as is an odd-sized headerless file.
//
// TokenFileDataset serves random windows (token_windows.h: the same windows, split and resume rules
// as the character text); ConsecutiveWindows serves the whole file in order as non-overlapping
// windows of seq_len + 1 tokens (evaluation).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "runtime/data/positioned_source.h"
#include "runtime/data/token_windows.h"
#include "runtime/train/batch.h"

namespace pf {

class MappedFile;

class TokenFile {
 public:
  enum class Format { kNanoGptUint16, kLlmcGpt2, kLlmcLlama3 };

  // Maps the file; kNotFound / kIoError / kDataLoss naming it.
  static std::shared_ptr<const TokenFile> open(const std::string& path);
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  Format format() const { return format_; }
  const char* format_name() const;  // "nanoGPT uint16", "llm.c GPT-2", "llm.c Llama-3"
  int64_t size() const { return tokens_; }  // tokens

  // Tokens [begin, begin + count) as int32. With vocab > 0 a token >= vocab is refused
  // (kInvalidArgument naming the file, the token's index and value); an uint32 token above
  // INT32_MAX always is.
  void read(int64_t begin, int64_t count, int64_t vocab, int32_t* out) const;

 private:
  TokenFile() = default;
  std::string path_;
  Format format_ = Format::kNanoGptUint16;
  std::shared_ptr<const MappedFile> file_;
  const unsigned char* map_ = nullptr;  // file_'s bytes
  int64_t header_bytes_ = 0;
  int64_t token_bytes_ = 2;
  int64_t tokens_ = 0;
};

struct TokenFileOptions {
  std::string file;
  int64_t rows = 8;  // rows per micro-batch
  int64_t seq_len = 64;
  uint64_t seed = 0;
  double held_out_fraction = 0.0;  // in [0, 1)
  DataSplit split = DataSplit::kTrain;  // kHeldOut needs held_out_fraction > 0
  int64_t vocab = 0;  // > 0: tokens >= vocab are refused when read
  void validate() const;  // kInvalidArgument naming the field
};

class TokenFileDataset : public PositionedSource {
 public:
  explicit TokenFileDataset(const TokenFileOptions& options);

  Batch batch_at(int64_t position) const override;
  // The same mapped file serving the other split, from position 0.
  std::unique_ptr<TokenFileDataset> with_split(DataSplit split) const;

  const TokenFileOptions& options() const { return options_; }
  const TokenFile& file() const { return *file_; }
  int64_t split_begin() const { return split_.begin; }
  int64_t split_end() const { return split_.end; }

 private:
  TokenFileOptions options_;
  std::shared_ptr<const TokenFile> file_;
  data::TokenRange split_;

  void select_split();  // split_ from options_
};

// The whole file as consecutive non-overlapping windows of seq_len + 1 tokens (the remainder
// dropped), `rows` windows a batch (the last batch holds the rest). Window w is tokens
// [w (seq_len + 1), (w + 1) (seq_len + 1)); inputs its first seq_len, targets its last seq_len.
class ConsecutiveWindows : public PositionedSource {
 public:
  // kInvalidArgument when the file holds no whole window.
  ConsecutiveWindows(std::shared_ptr<const TokenFile> file, int64_t seq_len, int64_t rows, int64_t vocab);

  Batch batch_at(int64_t position) const override;  // kFailedPrecondition past the last window

  int64_t windows() const { return windows_; }
  int64_t batches() const { return (windows_ + rows_ - 1) / rows_; }

 private:
  std::shared_ptr<const TokenFile> file_;
  int64_t seq_len_, rows_, vocab_, windows_;
};

}  // namespace pf
