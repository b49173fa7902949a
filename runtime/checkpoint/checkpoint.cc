#include "runtime/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <vector>
#include <string_view>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint_file.h"
#include "runtime/core/checked_math.h"
#include "runtime/core/error.h"
#include "runtime/core/json_text.h"
#include "runtime/core/limits.h"
#include "runtime/core/log.h"
#include "runtime/core/sha256.h"

namespace pf {
namespace {

constexpr char kMagic[8] = {'P', 'F', 'C', 'K', 'P', 'T', '\0', '\1'};
constexpr size_t kDigestBytes = 32;

template <typename T>
void append_pod(std::string* out, T value) {
  out->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

template <typename T>
T read_pod(const std::string& in, size_t offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof(T));
  return value;
}

// The tensor entries of a checkpoint header, checked against the model and the optimizer kind.
struct Span {
  uint64_t offset = 0;
  uint64_t bytes = 0;
};

struct Entries {
  std::map<std::string, Span> params;                    // parameter name -> bytes in the file
  std::map<std::string, std::pair<Parameter*, Span>> slots;  // "<param>/<slot>" -> its parameter and bytes
};

class HeaderReader {
 public:
  explicit HeaderReader(const std::string& path) : path_(path) {}

  [[noreturn]] void malformed(const std::string& where, const std::string& problem) const {
    fail(ErrorCode::kDataLoss, "checkpoint '", path_, "': ", where, ": ", problem);
  }

  const nlohmann::json& field(const nlohmann::json& object, const char* key, const std::string& where) const {
    if (!object.is_object()) malformed(where, "expected an object");
    auto it = object.find(key);
    if (it == object.end()) malformed(where, std::string("missing field \"") + key + "\"");
    return *it;
  }

  uint64_t unsigned_field(const nlohmann::json& object, const char* key, const std::string& where) const {
    const nlohmann::json& v = field(object, key, where);
    if (!v.is_number_unsigned()) malformed(where + "." + key, "expected a non-negative integer, got " + describe_json(v));
    return v.get<uint64_t>();
  }

  std::string string_field(const nlohmann::json& object, const char* key, const std::string& where) const {
    const nlohmann::json& v = field(object, key, where);
    if (!v.is_string()) malformed(where + "." + key, "expected a string, got " + describe_json(v));
    return v.get<std::string>();
  }

  // A progress counter in [0, limits::kMaxStepCount].
  int64_t count_field(const nlohmann::json& header, const char* key) const {
    const uint64_t v = unsigned_field(header, key, "header");
    if (v > static_cast<uint64_t>(limits::kMaxStepCount)) {
      malformed(std::string("header.") + key, "value " + std::to_string(v) + " is larger than the limit of " +
                                                  std::to_string(limits::kMaxStepCount));
    }
    return static_cast<int64_t>(v);
  }

  Shape shape_field(const nlohmann::json& object, const std::string& where) const {
    const nlohmann::json& v = field(object, "shape", where);
    if (!v.is_array() || v.size() > 8) malformed(where + ".shape", "expected a list of at most 8 dimensions");
    Shape shape;
    for (const auto& d : v) {
      if (!d.is_number_unsigned() || d.get<uint64_t>() > static_cast<uint64_t>(limits::kMaxDimension)) {
        malformed(where + ".shape", "bad dimension " + describe_json(d));
      }
      shape.push_back(d.get<int64_t>());
    }
    return shape;
  }

 private:
  const std::string& path_;
};

// Checks every entry of header["tensors"]: well formed (else kDataLoss), inside the data section,
// named once, and matching the model and the optimizer (shape, dtype, slot). A parameter of
// another model, one the model lacks or one of another shape is kInvalidArgument: the file is
// intact but not this model's.
Entries read_entries(const HeaderReader& reader, const nlohmann::json& header, const std::string& path,
                     Model& model, const std::vector<std::string>& slot_names, uint64_t data_bytes) {
  std::map<std::string, Parameter*> by_name;
  for (Parameter* p : model.parameters()) by_name[p->name] = p;
  const nlohmann::json& list = reader.field(header, "tensors", "header");
  if (!list.is_array()) reader.malformed("header.tensors", "expected a list");
  Entries entries;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string where = "tensors[" + std::to_string(i) + "]";
    const nlohmann::json& t = list[i];
    const std::string name = reader.string_field(t, "name", where);
    const std::string entry = where + " '" + name + "'";
    if (reader.string_field(t, "dtype", where) != "f32") reader.malformed(entry, "dtype is not f32");
    const Shape shape = reader.shape_field(t, where);
    Span span{reader.unsigned_field(t, "offset", where), reader.unsigned_field(t, "bytes", where)};
    checked_range_end(span.offset, span.bytes, data_bytes, "checkpoint '" + path + "': " + entry,
                      ErrorCode::kDataLoss);
    const uint64_t shape_bytes = static_cast<uint64_t>(shape_numel(shape)) * 4;  // dims < 2^31, at most 8
    if (span.bytes != shape_bytes) {
      reader.malformed(entry, std::to_string(span.bytes) + " bytes for shape " + shape_to_string(shape));
    }
    if (name.rfind("param/", 0) == 0) {
      const std::string param = name.substr(6);
      auto it = by_name.find(param);
      PF_CHECK_ARG(it != by_name.end(), "checkpoint '", path, "': parameter '", param,
                   "' does not exist in this model");
      PF_CHECK_ARG(whole_shape(*it->second) == shape, "checkpoint '", path, "': parameter '", param, "' has shape ",
                   shape_to_string(shape), ", the model expects ", shape_to_string(whole_shape(*it->second)));
      if (!entries.params.emplace(param, span).second) reader.malformed(entry, "appears twice");
    } else if (name.rfind("optim/", 0) == 0) {
      const std::string key = name.substr(6);
      const size_t slash = key.rfind('/');
      if (slash == std::string::npos) reader.malformed(entry, "expected optim/<parameter>/<slot>");
      const std::string param = key.substr(0, slash), slot = key.substr(slash + 1);
      if (std::find(slot_names.begin(), slot_names.end(), slot) == slot_names.end()) reader.malformed(entry, "'" + slot + "' is not a state slot of this optimizer");
      auto it = by_name.find(param);
      if (it == by_name.end()) reader.malformed(entry, "state of a parameter the model does not have");
      if (whole_shape(*it->second) != shape) reader.malformed(entry, "shape differs from its parameter's");
      if (!entries.slots.emplace(key, std::make_pair(it->second, span)).second) {
        reader.malformed(entry, "appears twice");
      }
    } else {
      reader.malformed(entry, "unknown entry (expected param/<name> or optim/<name>/<slot>)");
    }
  }
  return entries;
}

// Fails when any value of `entry` is NaN or infinite: a diverged run is not saved.
void check_finite(const char* data, size_t bytes, const std::string& entry, const std::string& path, int64_t step) {
  const int64_t i = first_non_finite(data, static_cast<int64_t>(bytes / sizeof(float)));
  if (i >= 0) {
    float v;
    std::memcpy(&v, data + i * sizeof(float), sizeof(v));
    fail(ErrorCode::kFailedPrecondition, "checkpoint '", path, "': ", entry, " has ",
         std::isnan(v) ? "a NaN" : "an infinity", " at element ", i, " (step ", step,
         "); refusing to save a diverged model");
  }
}

}  // namespace

std::vector<CheckpointEntry> checkpoint_entries(const Trainer& trainer, const std::vector<Parameter*>& params) {
  std::vector<CheckpointEntry> entries;
  for (Parameter* p : params) entries.push_back({"param/" + p->name, &p->value, p});
  const std::vector<std::string>& slot_names = optimizer_slot_names(trainer.optimizer().config().kind);
  for (Parameter* p : params) {
    for (const std::string& slot : slot_names) {
      auto it = trainer.optimizer().state().find(p->name + "/" + slot);
      if (it != trainer.optimizer().state().end()) entries.push_back({"optim/" + it->first, &it->second, p});
    }
  }
  return entries;
}

std::string encode_checkpoint(const Trainer& trainer, const std::vector<Parameter*>& params, const std::string& path) {
  return encode_checkpoint_entries(trainer, checkpoint_entries(trainer, params), path);
}

std::string encode_checkpoint_entries(const Trainer& trainer, const std::vector<CheckpointEntry>& entries,
                                      const std::string& path) {
  PF_CHECK_ARG(!path.empty(), "checkpoint path is empty");
  nlohmann::json tensors = nlohmann::json::array();
  uint64_t offset = 0;
  for (const CheckpointEntry& e : entries) {
    tensors.push_back({{"name", e.name},
                       {"dtype", dtype_name(e.tensor->dtype())},
                       {"shape", e.tensor->shape()},
                       {"offset", offset},
                       {"bytes", e.tensor->nbytes()}});
    offset += e.tensor->nbytes();
  }
  nlohmann::json header = {
      {"format", "pipeforge.checkpoint"},
      {"step", trainer.metrics().step},
      {"data_position", trainer.metrics().data_position},
      {"optimizer", trainer.optimizer().config().to_json()},
      {"optimizer_steps", trainer.optimizer().steps_taken()},
      {"model", trainer.model().to_json()},
      {"tensors", tensors},
  };
  if (!trainer.run_description().is_null()) header["run"] = trainer.run_description();
  const std::string header_text = header.dump();

  std::string bytes(kMagic, sizeof(kMagic));
  append_pod<uint32_t>(&bytes, kCheckpointFormatVersion);
  append_pod<uint64_t>(&bytes, header_text.size());
  bytes += header_text;
  bytes.reserve(bytes.size() + offset + kDigestBytes);
  for (const CheckpointEntry& e : entries) {
    const size_t at = bytes.size();
    bytes.resize(at + e.tensor->nbytes());
    // Device tensors are copied to the host through the device hook (waits for the device).
    copy_bytes(&bytes[at], Device::cpu(), e.tensor->data<char>(), e.tensor->device(), e.tensor->nbytes(),
               "save_checkpoint");
    check_finite(&bytes[at], e.tensor->nbytes(), e.name, path, trainer.metrics().step);
  }
  bytes += sha256_digest(bytes.data(), bytes.size());
  return bytes;
}

void save_checkpoint(const Trainer& trainer, const std::string& path) {
  write_checkpoint_file(path, encode_checkpoint(trainer, trainer.model().parameters(), path));
  log(LogLevel::kInfo, "saved checkpoint '" + path + "' at step " + std::to_string(trainer.metrics().step));
}

struct CheckpointImage {
  std::string path;
  std::string bytes;
  size_t data_start = 0;
  Entries entries;
  int64_t step = 0, data_position = 0, optimizer_steps = 0;
};

std::shared_ptr<const CheckpointImage> read_checkpoint_image(const Trainer& trainer, const std::string& path) {
  Model& model = trainer.model();
  const std::vector<std::string>& slot_names = optimizer_slot_names(trainer.optimizer().config().kind);
  // The largest file this model's checkpoint can be: header, parameters and every state slot.
  const size_t fixed = sizeof(kMagic) + sizeof(uint32_t) + sizeof(uint64_t);
  const int64_t param_bytes = checked_mul(model.num_parameter_elements(), 4, "model parameter bytes");
  const int64_t tensor_bytes = checked_mul(param_bytes, 1 + static_cast<int64_t>(slot_names.size()), "checkpoint bytes");
  const uint64_t max_file = static_cast<uint64_t>(tensor_bytes) + fixed + limits::kMaxCheckpointHeaderBytes + kDigestBytes;
  auto image = std::make_shared<CheckpointImage>();
  image->path = path;
  image->bytes = read_checkpoint_file(path, max_file);
  const std::string& bytes = image->bytes;

  if (bytes.size() < fixed + kDigestBytes || std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    fail(ErrorCode::kDataLoss, "checkpoint '", path, "': not a PipeForge checkpoint (bad magic or too short: ",
         bytes.size(), " bytes)");
  }
  const uint32_t version = read_pod<uint32_t>(bytes, sizeof(kMagic));
  if (version != kCheckpointFormatVersion) {
    fail(ErrorCode::kDataLoss, "checkpoint '", path, "': format version ", version,
         " is not supported (this build reads version ", kCheckpointFormatVersion, ")");
  }
  const size_t body = bytes.size() - kDigestBytes;
  if (sha256_digest(bytes.data(), body) != bytes.substr(body)) {
    fail(ErrorCode::kDataLoss, "checkpoint '", path, "': checksum mismatch (file truncated or corrupted)");
  }
  const uint64_t header_len = read_pod<uint64_t>(bytes, sizeof(kMagic) + sizeof(uint32_t));
  if (header_len > body - fixed) fail(ErrorCode::kDataLoss, "checkpoint '", path, "': header length out of range");
  const nlohmann::json header = parse_json_text(std::string_view(bytes).substr(fixed, header_len),
                                                "checkpoint '" + path + "': header",
                                                limits::kMaxCheckpointHeaderBytes, ErrorCode::kDataLoss);
  image->data_start = fixed + header_len;

  HeaderReader reader(path);
  image->entries = read_entries(reader, header, path, model, slot_names, body - image->data_start);
  OptimizerConfig saved_config;
  try {
    saved_config = OptimizerConfig::from_json(reader.field(header, "optimizer", "header"));
  } catch (const Error& e) {
    reader.malformed("header.optimizer", e.what());
  }
  PF_CHECK_ARG(saved_config.kind == trainer.optimizer().config().kind, "checkpoint '", path,
               "': saved with optimizer '", saved_config.to_json()["kind"].get<std::string>(),
               "' but the trainer uses '", trainer.optimizer().config().to_json()["kind"].get<std::string>(), "'");
  image->step = reader.count_field(header, "step");
  image->data_position = reader.count_field(header, "data_position");
  image->optimizer_steps = reader.count_field(header, "optimizer_steps");
  return image;
}

int64_t checkpoint_image_step(const CheckpointImage& image) { return image.step; }
int64_t checkpoint_image_data_position(const CheckpointImage& image) { return image.data_position; }
int64_t checkpoint_image_optimizer_steps(const CheckpointImage& image) { return image.optimizer_steps; }
bool checkpoint_image_has_parameter(const CheckpointImage& image, const std::string& name) {
  return image.entries.params.count(name) > 0;
}

std::string checkpoint_image_sha256(const CheckpointImage& image) {
  return sha256_hex(image.bytes.data(), image.bytes.size());
}

void apply_checkpoint_images(Trainer& trainer, const std::vector<const CheckpointImage*>& images,
                             const std::vector<Parameter*>& wanted, int64_t step, int64_t data_position,
                             int64_t optimizer_steps) {
  // Where each wanted parameter comes from (checked before anything changes).
  std::vector<const CheckpointImage*> source;
  for (Parameter* p : wanted) {
    const CheckpointImage* from = nullptr;
    for (const CheckpointImage* image : images)
      if (checkpoint_image_has_parameter(*image, p->name)) from = from ? from : image;
    PF_CHECK_ARG(from != nullptr, "checkpoint '", images.empty() ? std::string() : images.front()->path,
                 "': has no parameter '", p->name, "'");
    source.push_back(from);
  }
  // Commit: nothing below can fail on file content.
  auto& state = trainer.optimizer().state();
  state.clear();
  for (size_t i = 0; i < wanted.size(); ++i) {
    Parameter* p = wanted[i];
    const CheckpointImage& image = *source[i];
    const Span& span = image.entries.params.at(p->name);
    const char* data = image.bytes.data() + image.data_start;
    // A tensor-parallel member takes its slice of the whole tensor (on the host, then copied to the
    // parameter's device).
    auto slice_into = [p](const char* whole, Tensor& out) {
      std::vector<float> floats(static_cast<size_t>(shape_numel(whole_shape(*p))));
      std::memcpy(floats.data(), whole, floats.size() * sizeof(float));
      Tensor slice = out.device().kind == DeviceKind::kCpu ? out : Tensor::empty(out.shape());
      take_slice(*p, floats.data(), slice.f32());
      if (slice.data<char>() != out.data<char>()) out.copy_from(slice);
    };
    // Into device parameters through the device hook; optimizer state stays on the host until the
    // optimizer moves it to its parameter's device.
    if (p->shard.split()) slice_into(data + span.offset, p->value);
    else copy_bytes(p->value.data<char>(), p->value.device(), data + span.offset, Device::cpu(), span.bytes,
                    "load_checkpoint");
    MemoryCategoryScope scope(MemoryCategory::kOptimizerState);
    for (const auto& [key, slot] : image.entries.slots) {
      if (slot.first != p) continue;
      Tensor t = Tensor::empty(p->shape);
      if (p->shard.split()) slice_into(data + slot.second.offset, t);
      else std::memcpy(t.data<char>(), data + slot.second.offset, slot.second.bytes);
      state.emplace(key, t);
    }
  }
  trainer.restore_progress(step, data_position);
  trainer.optimizer().set_steps_taken(optimizer_steps);
}

nlohmann::json read_checkpoint_header(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ENOENT) fail(ErrorCode::kNotFound, "checkpoint '", path, "' does not exist");
    fail(ErrorCode::kDataLoss, "checkpoint '", path, "' cannot be opened as a regular file: ", std::strerror(errno));
  }
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
    fail(ErrorCode::kDataLoss, "checkpoint '", path, "' is not a regular file");
  auto read_exactly = [&](char* out, size_t bytes, const char* what) {
    size_t done = 0;
    while (done < bytes) {
      const ssize_t n = ::read(fd, out + done, bytes - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) fail(ErrorCode::kDataLoss, "checkpoint '", path, "': too short for its ", what);
      done += static_cast<size_t>(n);
    }
  };
  const size_t fixed = sizeof(kMagic) + sizeof(uint32_t) + sizeof(uint64_t);
  std::string start(fixed, '\0');
  read_exactly(start.data(), fixed, "header");
  if (std::memcmp(start.data(), kMagic, sizeof(kMagic)) != 0)
    fail(ErrorCode::kDataLoss, "checkpoint '", path, "': not a PipeForge checkpoint (bad magic)");
  const uint32_t version = read_pod<uint32_t>(start, sizeof(kMagic));
  if (version != kCheckpointFormatVersion) {
    fail(ErrorCode::kDataLoss, "checkpoint '", path, "': format version ", version,
         " is not supported (this build reads version ", kCheckpointFormatVersion, ")");
  }
  const uint64_t header_len = read_pod<uint64_t>(start, sizeof(kMagic) + sizeof(uint32_t));
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (header_len > limits::kMaxCheckpointHeaderBytes || size < fixed + kDigestBytes || header_len > size - fixed - kDigestBytes)
    fail(ErrorCode::kDataLoss, "checkpoint '", path, "': header length out of range");
  std::string header_text(static_cast<size_t>(header_len), '\0');
  read_exactly(header_text.data(), header_text.size(), "header");
  const nlohmann::json header = parse_json_text(header_text, "checkpoint '" + path + "': header",
                                                limits::kMaxCheckpointHeaderBytes, ErrorCode::kDataLoss);
  if (!header.is_object() || !header.contains("model") || !header["model"].is_object())
    fail(ErrorCode::kDataLoss, "checkpoint '", path, "': header.model: missing or not an object");
  if (header.contains("run") && !header["run"].is_object())
    fail(ErrorCode::kDataLoss, "checkpoint '", path, "': header.run: not an object");
  return header;
}

void load_checkpoint(Trainer& trainer, const std::string& path) {
  const auto image = read_checkpoint_image(trainer, path);
  apply_checkpoint_images(trainer, {image.get()}, trainer.model().parameters(), image->step, image->data_position,
                          image->optimizer_steps);
  log(LogLevel::kInfo, "loaded checkpoint '" + path + "' at step " + std::to_string(image->step));
}

}  // namespace pf
