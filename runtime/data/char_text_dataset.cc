#include "runtime/data/char_text_dataset.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

#include "runtime/core/error.h"
#include "runtime/core/input_file.h"
#include "runtime/core/limits.h"

namespace pf {
namespace {

constexpr const char* kDefaultTextFolder = "/usr/share/common-licenses";

bool looks_like_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  char buffer[4096];
  in.read(buffer, sizeof(buffer));
  const std::streamsize n = in.gcount();
  return n > 0 && std::memchr(buffer, '\0', static_cast<size_t>(n)) == nullptr;
}

}  // namespace

void CharTextOptions::validate() const {
  data::check_window_options(rows, seq_len, held_out_fraction, split, "the text");
}

std::vector<std::string> CharTextDataset::text_files_in(const std::string& folder) {
  std::error_code ec;
  if (!std::filesystem::is_directory(folder, ec)) {
    fail(ErrorCode::kNotFound, "text folder '", folder, "' does not exist");
  }
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(folder, ec)) {
    // Symlinks (GPL -> GPL-3 and the like) would only repeat a file.
    if (entry.is_symlink(ec) || !entry.is_regular_file(ec)) continue;
    if (looks_like_text(entry.path().string())) files.push_back(entry.path().string());
  }
  if (ec) fail(ErrorCode::kIoError, "cannot list text folder '", folder, "': ", ec.message());
  std::sort(files.begin(), files.end());
  if (files.empty()) fail(ErrorCode::kNotFound, "text folder '", folder, "' holds no text files");
  return files;
}

namespace {

// 'a', 'b', 'c' for an error message.
std::string quoted_names(const std::vector<std::string>& files) {
  std::string names;
  for (const auto& f : files) names += (names.empty() ? "'" : ", '") + f + "'";
  return names;
}

}  // namespace

std::vector<std::string> CharTextDataset::default_text_files() { return text_files_in(kDefaultTextFolder); }

CharTextDataset::CharTextDataset(const CharTextOptions& options) : options_(options) {
  options_.validate();
  if (options_.files.empty()) options_.files = default_text_files();

  std::string text;
  for (const std::string& path : options_.files) {
    // The first file's text is moved in, not copied: a large file is held once.
    if (text.empty()) {
      text = read_input_file(path, "text file", limits::kMaxTextDataBytes);
    } else {
      text += read_input_file(path, "text file", limits::kMaxTextDataBytes);
    }
    PF_CHECK_ARG(text.size() <= limits::kMaxTextDataBytes, "text files: ", text.size(),
                 " bytes up to and with '", path, "', more than the limit of ", limits::kMaxTextDataBytes,
                 " for all of them together");
  }

  bool present[256] = {};
  for (unsigned char c : text) present[c] = true;
  for (int b = 0; b < 256; ++b) {
    byte_to_id_[b] = -1;
    if (present[b]) {
      byte_to_id_[b] = static_cast<int32_t>(vocabulary_.size());
      vocabulary_.push_back(static_cast<char>(b));
    }
  }

  const int64_t needed = options_.seq_len + 1;
  if (static_cast<int64_t>(text.size()) < needed) {
    fail(ErrorCode::kInvalidArgument, "text of ", quoted_names(options_.files), " has ", text.size(),
         " bytes, fewer than seq_len + 1 = ", needed);
  }
  // The tokens take four bytes per byte of text: refused naming the files before they are allocated.
  const int64_t token_bytes = static_cast<int64_t>(text.size()) * static_cast<int64_t>(sizeof(int32_t));
  const int64_t limit = limits::max_loaded_data_bytes();
  if (token_bytes > limit) {
    fail(ErrorCode::kOutOfMemory, "text of ", quoted_names(options_.files), ": ", text.size(),
         " bytes take ", token_bytes, " bytes as tokens, more than the limit of ", limit,
         " bytes (half the memory this process may still allocate)");
  }
  auto tokens = std::make_shared<std::vector<int32_t>>(text.size());
  for (size_t i = 0; i < text.size(); ++i) (*tokens)[i] = byte_to_id_[static_cast<unsigned char>(text[i])];
  tokens_ = std::move(tokens);
  select_split();
}

void CharTextDataset::select_split() {
  split_ = data::split_range(static_cast<int64_t>(tokens_->size()), options_.held_out_fraction, options_.split,
                             options_.seq_len, "the text");
}

std::unique_ptr<CharTextDataset> CharTextDataset::with_split(CharTextOptions::Split split) const {
  auto other = std::make_unique<CharTextDataset>(*this);
  other->options_.split = split;
  other->options_.validate();
  other->select_split();
  other->rewind();
  return other;
}

Batch CharTextDataset::batch_at(int64_t position) const {
  const int64_t rows = options_.rows;
  const int64_t seq = options_.seq_len;
  Batch batch;
  batch.inputs = Tensor::empty({rows, seq}, DType::kI32);
  batch.targets = Tensor::empty({rows, seq}, DType::kI32);
  int32_t* in = batch.inputs.i32();
  int32_t* out = batch.targets.i32();
  for (int64_t r = 0; r < rows; ++r) {
    const int32_t* window = tokens_->data() + data::window_start(options_.seed, options_.split, position, r, split_, seq);
    std::memcpy(in + r * seq, window, static_cast<size_t>(seq) * sizeof(int32_t));
    std::memcpy(out + r * seq, window + 1, static_cast<size_t>(seq) * sizeof(int32_t));
  }
  return batch;
}

std::string CharTextDataset::decode(const int32_t* ids, int64_t count) const {
  std::string text;
  text.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) {
    PF_CHECK_ARG(ids[i] >= 0 && ids[i] < vocab_size(), "token id ", ids[i], " outside the vocabulary of ",
                 vocab_size());
    text.push_back(vocabulary_[static_cast<size_t>(ids[i])]);
  }
  return text;
}

}  // namespace pf
