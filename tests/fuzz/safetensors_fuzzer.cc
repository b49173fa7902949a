// libFuzzer target: the safetensors reader (runtime/checkpoint/safetensors.h), the untrusted input
// of `--init-from DIR` and `pipeforge eval`'s comparisons. Input: a safetensors file. Oracles,
// besides "no crash, no exception other than pf::Error":
//  * an accepted header's entries lie inside the data and tile it (sorted by offset, each starting
//    where the previous ended, the last at the end of the file);
//  * every floating-point entry reads as f32 (up to 1 Mi elements), and the file re-encoded from
//    those values (encode_safetensors) parses back with the same names and shapes and reads back
//    bitwise the same values.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "runtime/checkpoint/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

constexpr const char* kTarget = "safetensors";

bool floating(const std::string& dtype) { return dtype == "F32" || dtype == "F16" || dtype == "BF16" || dtype == "F64"; }

std::string write(const std::string& name, const std::string& bytes) {
  static const std::string dir = pf::fuzz::make_work_dir(kTarget);
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
  return path;
}

void fuzz_one(const std::string& bytes) {
  const pf::SafetensorsHeader h = pf::parse_safetensors_header(
      reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), "fuzz input");
  std::vector<const pf::SafetensorsEntry*> sorted;
  for (const auto& e : h.entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  uint64_t at = 0;
  for (const auto* e : sorted) {
    FUZZ_CHECK(kTarget, e->begin == at && e->end >= e->begin, "accepted entries do not tile the data: " + e->name);
    at = e->end;
  }
  FUZZ_CHECK(kTarget, h.data_offset + at == bytes.size(), "accepted entries do not end at the end of the file");

  auto file = pf::fuzz::must_succeed(kTarget, "an accepted file does not open",
                                     [&] { return pf::SafetensorsFile::open(write("input.safetensors", bytes)); });
  std::vector<std::pair<std::string, pf::Tensor>> values;
  for (const auto& e : file->header().entries) {
    if (!floating(e.dtype) || (e.end - e.begin) > (uint64_t{1} << 22)) continue;
    values.emplace_back(e.name, pf::fuzz::must_succeed(kTarget, "reading " + e.name, [&] { return file->read_f32(e); }));
  }
  std::vector<std::pair<std::string, const pf::Tensor*>> named;
  for (const auto& [name, t] : values) named.emplace_back(name, &t);
  const std::string again = pf::fuzz::must_succeed(kTarget, "re-encoding", [&] { return pf::encode_safetensors(named, file->header().metadata); });
  auto reread = pf::fuzz::must_succeed(kTarget, "the re-encoded file does not open",
                                       [&] { return pf::SafetensorsFile::open(write("again.safetensors", again)); });
  FUZZ_CHECK(kTarget, reread->header().entries.size() == values.size(), "re-encoded entry count differs");
  FUZZ_CHECK(kTarget, reread->header().metadata == file->header().metadata, "re-encoded metadata differs");
  for (const auto& [name, t] : values) {
    const pf::SafetensorsEntry* e = reread->find(name);
    FUZZ_CHECK(kTarget, e != nullptr && e->shape == t.shape(), "re-encoded tensor missing or reshaped: " + name);
    const pf::Tensor back = reread->read_f32(*e);
    FUZZ_CHECK(kTarget, t.numel() == 0 || std::memcmp(back.f32(), t.f32(), static_cast<size_t>(t.numel()) * 4) == 0,
               "re-encoded values differ: " + name);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pf::fuzz::run_input(kTarget, [&] { fuzz_one(std::string(reinterpret_cast<const char*>(data), size)); });
  return 0;
}
