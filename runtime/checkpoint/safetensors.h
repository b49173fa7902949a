// Safetensors, the tensor file of Hugging Face (https://huggingface.co/docs/safetensors):
//   u64 little-endian N | N bytes of JSON header | data
// The header maps each tensor's name to {"dtype", "shape", "data_offsets": [begin, end]} (offsets
// into the data, which follows the header) and may hold "__metadata__", a map of strings. Tensors
// are row-major, little-endian.
//
// Reading treats the file as untrusted input and checks, before anything is allocated: N within
// the file and at most 100 MB (the reference implementation's limit), the header one JSON object
// (depth-checked before parsing) with no name twice, every entry's fields and nothing else, a known
// dtype, dimensions >= 0 whose element count times the dtype's size equals end - begin without
// overflow, and the entries tiling the data exactly (sorted by offset they start at 0, each
// beginning where the previous ended, the last ending at the end of the file), as the reference
// implementation requires. Failures are kDataLoss naming the file and the entry. The file is
// memory-mapped: a tensor's bytes are read when it is converted.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace pf {

class MappedFile;

constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct SafetensorsEntry {
  std::string name;
  std::string dtype;  // "F32", "BF16", ...
  Shape shape;
  uint64_t begin = 0, end = 0;  // byte offsets into the data section
};

struct SafetensorsHeader {
  std::vector<SafetensorsEntry> entries;  // in the header's order
  std::map<std::string, std::string> metadata;
  uint64_t data_offset = 0;  // 8 + N
};

// Parses and checks the header of a safetensors file whose bytes are `bytes` (`size` of them);
// `path` names it in errors. The fuzz target of tests/fuzz/safetensors_fuzzer.cc.
SafetensorsHeader parse_safetensors_header(const unsigned char* bytes, size_t size, const std::string& path);

class SafetensorsFile {
 public:
  // kNotFound for a missing file, kDataLoss for a malformed one (naming it).
  static std::shared_ptr<const SafetensorsFile> open(const std::string& path);

  const std::string& path() const;
  const SafetensorsHeader& header() const { return header_; }
  const SafetensorsEntry* find(const std::string& name) const;  // null when absent
  // The tensor as f32: F32 copied, F16, BF16 and F64 converted (F64 rounded to nearest). Another
  // dtype is kInvalidArgument naming the tensor and its dtype.
  Tensor read_f32(const SafetensorsEntry& entry) const;

 private:
  SafetensorsFile() = default;
  std::shared_ptr<const MappedFile> file_;
  SafetensorsHeader header_;
  std::map<std::string, size_t> index_;
};

// The file bytes of f32 tensors (name, tensor; CPU, contiguous) in the given order, with
// `metadata` as "__metadata__" (omitted when empty). Names must be distinct and not
// "__metadata__". The header is padded with spaces to a multiple of 8 bytes, as Hugging Face's
// writer pads it, so the data is aligned.
std::string encode_safetensors(const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                               const std::map<std::string, std::string>& metadata);

}  // namespace pf
