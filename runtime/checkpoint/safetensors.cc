#include "runtime/checkpoint/safetensors.h"

#include <algorithm>
#include <cstring>
#include <set>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/core/json_text.h"
#include "runtime/core/limits.h"
#include "runtime/core/mapped_file.h"

namespace pf {
namespace {

using nlohmann::json;

// Bytes per element of the dtypes the format defines; 0 for an unknown one.
uint64_t dtype_bytes(const std::string& dtype) {
  static const std::map<std::string, uint64_t> sizes = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"I16", 2}, {"U16", 2}, {"F16", 2},
      {"BF16", 2}, {"I32", 4}, {"U32", 4}, {"F32", 4},     {"F64", 8},     {"I64", 8}, {"U64", 8}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

uint64_t u64_at(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = v << 8 | p[i];
  return v;
}

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  uint32_t bits;
  if (exponent == 0x1f) {
    bits = sign | 0x7f800000u | (mantissa << 13);  // infinity or NaN
  } else if (exponent != 0) {
    bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
  } else if (mantissa == 0) {
    bits = sign;  // zero
  } else {  // subnormal: normalise
    exponent = 113;
    while ((mantissa & 0x400u) == 0) {
      mantissa <<= 1;
      --exponent;
    }
    bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

// The top-level names of a header that appear more than once (nlohmann::json keeps the last).
std::string first_repeated_name(std::string_view text) {
  std::set<std::string> seen;
  std::string repeated;
  json::parser_callback_t note = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && repeated.empty() &&
        !seen.insert(parsed.get<std::string>()).second)
      repeated = parsed.get<std::string>();
    return true;
  };
  json::parse(text.begin(), text.end(), note);
  return repeated;
}

}  // namespace

SafetensorsHeader parse_safetensors_header(const unsigned char* bytes, size_t size, const std::string& path) {
  auto bad = [&](auto&&... parts) { fail(ErrorCode::kDataLoss, "safetensors file '", path, "': ", parts...); };
  if (size < 8) bad("holds ", size, " bytes, fewer than the 8 of the header length");
  const uint64_t n = u64_at(bytes);
  if (n > kMaxSafetensorsHeaderBytes) bad("a header of ", n, " bytes, more than the limit of ", kMaxSafetensorsHeaderBytes);
  if (n > size - 8) bad("a header of ", n, " bytes, but the file holds ", size - 8, " after the length");
  const std::string_view text(reinterpret_cast<const char*>(bytes + 8), static_cast<size_t>(n));
  if (text.empty() || text.front() != '{') bad("the header does not start with '{'");
  const json header = parse_json_text(text, "safetensors file '" + path + "': header", kMaxSafetensorsHeaderBytes,
                                      ErrorCode::kDataLoss);
  if (!header.is_object()) bad("the header is not a JSON object");
  const std::string repeated = first_repeated_name(text);
  if (!repeated.empty()) bad("the header names '", repeated, "' twice");

  SafetensorsHeader out;
  out.data_offset = 8 + n;
  const uint64_t data_bytes = size - out.data_offset;
  for (const auto& item : header.items()) {
    const std::string& name = item.key();
    const json& v = item.value();
    if (name == "__metadata__") {
      if (!v.is_object()) bad("__metadata__ is not an object of strings");
      for (const auto& m : v.items()) {
        if (!m.value().is_string()) bad("__metadata__ '", m.key(), "' is not a string");
        out.metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) bad("tensor '", name, "': not an object");
    for (const auto& f : v.items())
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets")
        bad("tensor '", name, "': unknown field '", f.key(), "'");
    if (!v.contains("dtype") || !v["dtype"].is_string()) bad("tensor '", name, "': no dtype string");
    if (!v.contains("shape") || !v["shape"].is_array()) bad("tensor '", name, "': no shape array");
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() || v["data_offsets"].size() != 2)
      bad("tensor '", name, "': data_offsets is not [begin, end]");
    SafetensorsEntry e;
    e.name = name;
    e.dtype = v["dtype"].get<std::string>();
    const uint64_t element = dtype_bytes(e.dtype);
    if (element == 0) bad("tensor '", name, "': unknown dtype '", e.dtype, "'");
    uint64_t elements = 1;
    bool overflow = false;
    for (const json& d : v["shape"]) {
      if (!json_integer_in(d, 0, limits::kMaxDimension)) bad("tensor '", name, "': a dimension is not an integer in [0, ", limits::kMaxDimension, "]");
      const uint64_t dim = d.get<uint64_t>();
      e.shape.push_back(static_cast<int64_t>(dim));
      if (dim != 0 && elements > UINT64_MAX / dim) overflow = true;
      elements *= dim;
    }
    if (e.shape.size() > 8) bad("tensor '", name, "': ", e.shape.size(), " dimensions, more than 8");
    for (const json& o : v["data_offsets"])
      if (!json_integer_in(o, 0, INT64_MAX)) bad("tensor '", name, "': data_offsets are not non-negative integers");
    e.begin = v["data_offsets"][0].get<uint64_t>();
    e.end = v["data_offsets"][1].get<uint64_t>();
    if (e.end < e.begin || e.end > data_bytes)
      bad("tensor '", name, "': data_offsets [", e.begin, ", ", e.end, "] outside the ", data_bytes, " bytes of data");
    if (overflow || elements > UINT64_MAX / element || elements * element != e.end - e.begin)
      bad("tensor '", name, "': shape ", shape_to_string(e.shape), " of ", e.dtype, " does not fill its ", e.end - e.begin,
          " bytes");
    out.entries.push_back(std::move(e));
  }
  // The entries tile the data: sorted by offset, no gap, no overlap, nothing after the last.
  std::vector<const SafetensorsEntry*> sorted;
  for (const SafetensorsEntry& e : out.entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](const SafetensorsEntry* a, const SafetensorsEntry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t at = 0;
  for (const SafetensorsEntry* e : sorted) {
    if (e->begin != at) bad("tensor '", e->name, "' starts at byte ", e->begin, " of the data, expected ", at, " (a gap or an overlap)");
    at = e->end;
  }
  if (at != data_bytes) bad("the tensors cover ", at, " bytes of data but the file holds ", data_bytes);
  return out;
}

std::shared_ptr<const SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  std::shared_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->file_ = MappedFile::open(path, "safetensors file");
  f->header_ = parse_safetensors_header(f->file_->data(), f->file_->size(), path);
  for (size_t i = 0; i < f->header_.entries.size(); ++i) f->index_[f->header_.entries[i].name] = i;
  return f;
}

const std::string& SafetensorsFile::path() const { return file_->path(); }

const SafetensorsEntry* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &header_.entries[it->second];
}

Tensor SafetensorsFile::read_f32(const SafetensorsEntry& e) const {
  const unsigned char* src = file_->data() + header_.data_offset + e.begin;
  const int64_t n = static_cast<int64_t>(e.end - e.begin) / static_cast<int64_t>(dtype_bytes(e.dtype));
  Tensor out = Tensor::empty(e.shape);
  float* dst = out.f32();
  if (e.dtype == "F32") {
    if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * 4);  // little-endian, as this machine
  } else if (e.dtype == "BF16") {
    for (int64_t i = 0; i < n; ++i) {
      const uint32_t bits = static_cast<uint32_t>(src[2 * i] | src[2 * i + 1] << 8) << 16;
      std::memcpy(dst + i, &bits, 4);
    }
  } else if (e.dtype == "F16") {
    for (int64_t i = 0; i < n; ++i) dst[i] = half_to_float(static_cast<uint16_t>(src[2 * i] | src[2 * i + 1] << 8));
  } else if (e.dtype == "F64") {
    for (int64_t i = 0; i < n; ++i) {
      double d;
      std::memcpy(&d, src + 8 * i, 8);
      dst[i] = static_cast<float>(d);
    }
  } else {
    fail(ErrorCode::kInvalidArgument, "safetensors file '", path(), "': tensor '", e.name, "' is ", e.dtype,
         ", not a floating-point type (F32, F16, BF16 or F64)");
  }
  return out;
}

std::string encode_safetensors(const std::vector<std::pair<std::string, const Tensor*>>& tensors,
                               const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string> names;
  uint64_t at = 0;
  for (const auto& [name, t] : tensors) {
    PF_CHECK_ARG(name != "__metadata__" && names.insert(name).second, "safetensors: tensor name '", name,
                 "' is reserved or given twice");
    PF_CHECK_ARG(t->dtype() == DType::kF32 && t->device().kind == DeviceKind::kCpu, "safetensors: tensor '", name,
                 "' must be an f32 CPU tensor");
    const uint64_t bytes = static_cast<uint64_t>(t->numel()) * 4;
    header[name] = {{"dtype", "F32"}, {"shape", t->shape()}, {"data_offsets", {at, at + bytes}}};
    at += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((static_cast<uint64_t>(text.size()) >> (8 * i)) & 0xff);
  out += text;
  out.reserve(out.size() + at);
  for (const auto& [name, t] : tensors) out.append(reinterpret_cast<const char*>(t->f32()), static_cast<size_t>(t->numel()) * 4);
  return out;
}

}  // namespace pf
