#include "runtime/checkpoint/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>

#include "runtime/core/error.h"
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

struct Entry {
  std::string name;
  const Tensor* tensor;
};

void write_file_atomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(ErrorCode::kIoError, "checkpoint '", path, "': cannot create '", tmp, "': ", std::strerror(errno));
  size_t written = 0;
  while (written < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + written, bytes.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      fail(ErrorCode::kIoError, "checkpoint '", path, "': write failed: ", std::strerror(err));
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(ErrorCode::kIoError, "checkpoint '", path, "': flush failed: ", std::strerror(err));
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    fail(ErrorCode::kIoError, "checkpoint '", path, "': rename failed: ", std::strerror(err));
  }
  // Make the rename itself durable.
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : (slash == 0 ? "/" : path.substr(0, slash));
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace

void save_checkpoint(const Trainer& trainer, const std::string& path) {
  PF_CHECK_ARG(!path.empty(), "checkpoint path is empty");
  std::vector<Entry> entries;
  for (Parameter* p : trainer.model().parameters()) entries.push_back({"param/" + p->name, &p->value});
  for (auto& kv : trainer.optimizer().state()) entries.push_back({"optim/" + kv.first, &kv.second});

  nlohmann::json tensors = nlohmann::json::array();
  uint64_t offset = 0;
  for (const Entry& e : entries) {
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
  const std::string header_text = header.dump();

  std::string bytes(kMagic, sizeof(kMagic));
  append_pod<uint32_t>(&bytes, kCheckpointFormatVersion);
  append_pod<uint64_t>(&bytes, header_text.size());
  bytes += header_text;
  bytes.reserve(bytes.size() + offset + kDigestBytes);
  for (const Entry& e : entries) {
    const size_t at = bytes.size();
    bytes.resize(at + e.tensor->nbytes());
    // Device tensors are copied to the host through the device hook (waits for the device).
    copy_bytes(&bytes[at], Device::cpu(), e.tensor->data<char>(), e.tensor->device(), e.tensor->nbytes(),
               "save_checkpoint");
  }
  bytes += sha256_digest(bytes.data(), bytes.size());
  write_file_atomically(path, bytes);
  log(LogLevel::kInfo, "saved checkpoint '" + path + "' at step " + std::to_string(trainer.metrics().step));
}

void load_checkpoint(Trainer& trainer, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    const int err = errno;
    fail(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kIoError, "checkpoint '", path,
         "': cannot open: ", std::strerror(err));
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());

  const size_t fixed = sizeof(kMagic) + sizeof(uint32_t) + sizeof(uint64_t);
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
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.substr(fixed, header_len));
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::kDataLoss, "checkpoint '", path, "': header is not valid JSON: ", e.what());
  }
  const size_t data_start = fixed + header_len;

  // Validate everything before touching the trainer, so a bad file changes nothing.
  std::map<std::string, std::pair<uint64_t, uint64_t>> spans;  // name -> (offset, bytes)
  try {
    for (const auto& t : header.at("tensors")) {
      const uint64_t off = t.at("offset").get<uint64_t>(), len = t.at("bytes").get<uint64_t>();
      if (t.at("dtype").get<std::string>() != "f32" || off + len > body - data_start) {
        fail(ErrorCode::kDataLoss, "checkpoint '", path, "': tensor '", t.at("name").get<std::string>(),
             "' is out of range or not f32");
      }
      spans[t.at("name").get<std::string>()] = {off, len};
    }
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::kDataLoss, "checkpoint '", path, "': malformed header: ", e.what());
  }
  OptimizerConfig saved_config;
  try {
    saved_config = OptimizerConfig::from_json(header.at("optimizer"));
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::kDataLoss, "checkpoint '", path, "': malformed optimizer section: ", e.what());
  }
  PF_CHECK_ARG(saved_config.kind == trainer.optimizer().config().kind, "checkpoint '", path,
               "': saved with optimizer '", saved_config.to_json()["kind"].get<std::string>(),
               "' but the trainer uses '", trainer.optimizer().config().to_json()["kind"].get<std::string>(), "'");

  Model& model = trainer.model();
  for (Parameter* p : model.parameters()) {
    auto it = spans.find("param/" + p->name);
    PF_CHECK_ARG(it != spans.end(), "checkpoint '", path, "': has no parameter '", p->name, "'");
    PF_CHECK_ARG(it->second.second == p->value.nbytes(), "checkpoint '", path, "': parameter '", p->name,
                 "' has ", it->second.second, " bytes, the model expects ", p->value.nbytes());
  }
  for (const auto& kv : spans) {
    if (kv.first.rfind("param/", 0) == 0) {
      PF_CHECK_ARG(model.find_parameter(kv.first.substr(6)) != nullptr, "checkpoint '", path,
                   "': parameter '", kv.first.substr(6), "' does not exist in this model");
    } else {
      const std::string slot = kv.first.substr(6);  // "optim/<param>/<slot>"
      const std::string param = slot.substr(0, slot.rfind('/'));
      Parameter* p = model.find_parameter(param);
      PF_CHECK_ARG(p != nullptr && kv.second.second == p->value.nbytes(), "checkpoint '", path,
                   "': optimizer state '", slot, "' does not match the model");
    }
  }

  int64_t step = 0, data_position = 0, optimizer_steps = 0;
  try {
    step = header.at("step").get<int64_t>();
    data_position = header.at("data_position").get<int64_t>();
    optimizer_steps = header.at("optimizer_steps").get<int64_t>();
  } catch (const nlohmann::json::exception& e) {
    fail(ErrorCode::kDataLoss, "checkpoint '", path, "': malformed progress fields: ", e.what());
  }

  // Commit: nothing below can fail on file content.
  for (Parameter* p : model.parameters()) {
    const auto& span = spans["param/" + p->name];
    // Into device parameters through the device hook; optimizer state below stays on the host
    // until the optimizer moves it to its parameter's device.
    copy_bytes(p->value.data<char>(), p->value.device(), bytes.data() + data_start + span.first, Device::cpu(),
               span.second, "load_checkpoint");
  }
  auto& state = trainer.optimizer().state();
  state.clear();
  MemoryCategoryScope scope(MemoryCategory::kOptimizerState);
  for (const auto& kv : spans) {
    if (kv.first.rfind("optim/", 0) != 0) continue;
    const std::string slot = kv.first.substr(6);
    Parameter* p = model.find_parameter(slot.substr(0, slot.rfind('/')));
    Tensor t = Tensor::empty(p->value.shape());
    std::memcpy(t.data<char>(), bytes.data() + data_start + kv.second.first, kv.second.second);
    state.emplace(slot, t);
  }
  trainer.restore_progress(step, data_position);
  trainer.optimizer().set_steps_taken(optimizer_steps);
  log(LogLevel::kInfo, "loaded checkpoint '" + path + "' at step " + std::to_string(step));
}

}  // namespace pf
