// Character-level language-modelling data from plain text files, for the GPT model.
//
// The files are read once and concatenated (in the order given) into one byte stream; the
// vocabulary is the sorted set of distinct bytes in it, so token id i is the i-th smallest byte.
// The windows and the held-out split are token_windows.h's (next-character prediction); the
// vocabulary is the whole text's either way.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/data/positioned_source.h"
#include "runtime/data/token_windows.h"
#include "runtime/train/batch.h"

namespace pf {

struct CharTextOptions {
  std::vector<std::string> files;  // empty: default_text_files()
  int64_t rows = 8;                // rows per micro-batch
  int64_t seq_len = 64;
  uint64_t seed = 0;
  double held_out_fraction = 0.0;  // in [0, 1)
  using Split = DataSplit;
  Split split = Split::kTrain;  // kHeldOut needs held_out_fraction > 0
  void validate() const;  // kInvalidArgument naming the field
};

class CharTextDataset : public PositionedSource {
 public:
  // Reads every file; throws kNotFound / kIoError naming the file that cannot be read, and
  // kInvalidArgument when the text is shorter than seq_len + 1 bytes.
  explicit CharTextDataset(const CharTextOptions& options);

  Batch batch_at(int64_t position) const override;
  // The same text (not read again) serving the other split, from position 0.
  std::unique_ptr<CharTextDataset> with_split(CharTextOptions::Split split) const;

  const CharTextOptions& options() const { return options_; }
  const std::vector<std::string>& files() const { return options_.files; }
  int64_t vocab_size() const { return static_cast<int64_t>(vocabulary_.size()); }
  // The distinct bytes, sorted; vocabulary()[id] is the byte of token id.
  const std::string& vocabulary() const { return vocabulary_; }
  // The tokens [begin, end) of the split the windows come from.
  int64_t split_begin() const { return split_.begin; }
  int64_t split_end() const { return split_.end; }
  // The whole text as token ids.
  const std::vector<int32_t>& tokens() const { return *tokens_; }
  // Token id of a byte; -1 when the byte is not in the vocabulary.
  int32_t encode(unsigned char byte) const { return byte_to_id_[byte]; }
  std::string decode(const int32_t* ids, int64_t count) const;

  // The regular (non-symlink) text files of /usr/share/common-licenses, sorted by name.
  static std::vector<std::string> default_text_files();
  // Same for any folder; throws kNotFound naming the folder when it is missing or holds none.
  static std::vector<std::string> text_files_in(const std::string& folder);

 private:
  CharTextOptions options_;
  std::string vocabulary_;
  int32_t byte_to_id_[256];
  // Shared by the datasets with_split() makes: the text is tokenised and held once.
  std::shared_ptr<const std::vector<int32_t>> tokens_;
  data::TokenRange split_;

  void select_split();  // split_ from options_
};

}  // namespace pf
