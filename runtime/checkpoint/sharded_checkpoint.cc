#include "runtime/checkpoint/sharded_checkpoint.h"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <exception>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/checkpoint_file.h"
#include "runtime/checkpoint/tensor_parallel_checkpoint.h"
#include "runtime/comm/world.h"
#include "runtime/core/error.h"
#include "runtime/core/json_text.h"
#include "runtime/core/limits.h"
#include "runtime/core/log.h"
#include "runtime/core/sha256.h"

namespace pf {
namespace {

constexpr const char* kManifestFormat = "pipeforge.checkpoint.sharded/1";
// step-<step>.rank-<r>[.<save>].pfck; <save> (since 0.11) makes every save's files new, so a save
// never overwrites the shards the current manifest names.
const std::regex kShardName(R"(step-[0-9]{1,16}\.rank-[0-9]{1,5}(\.[0-9a-f]{16})?\.pfck)");

// A name for this save's files that no earlier save used: rank 0 of the pipeline group draws it
// (time, pid and a counter) and every process of the group takes it.
std::string save_token(comm::World& pipeline, double timeout) {
  static std::atomic<uint64_t> counter{0};
  std::string token;
  if (pipeline.rank() == 0) {
    const uint64_t now = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()) ^
                         static_cast<uint64_t>(std::chrono::system_clock::now().time_since_epoch().count());
    uint64_t x = now ^ (static_cast<uint64_t>(::getpid()) << 32) ^ (counter++ * 0x9e3779b97f4a7c15ull);
    x ^= x >> 31;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 29;
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(x));
    token = hex;
  }
  comm::broadcast_string(pipeline, &token, 0, timeout);
  return token;
}

// The process groups of a trainer whose parameters are spread over processes (also through a
// wrapper such as the adaptive trainer), or nullopt for a trainer in one process.
std::optional<ProcessGroups> sharded(const Trainer& trainer) {
  const ProcessGroups g = trainer.process_groups();
  if (g.pipeline == nullptr) return std::nullopt;
  return g;
}


// Every process of the grid learns whether all got through `what`: one round along each axis
// (pipeline, data-parallel, tensor-parallel), each process passing on what it has learnt, so a
// failure anywhere reaches every process. When one failed, every process throws: the failed one
// its own error, the others `code` naming the first failed peer they heard of.
void agree(const ProcessGroups& t, std::exception_ptr mine, ErrorCode code, const std::string& what) {
  const double timeout = t.timeout_seconds;
  std::string failed;
  for (comm::World* group : {t.pipeline, t.data_parallel, t.tensor_parallel}) {
    if (!group) continue;
    const char ok = mine || !failed.empty() ? 0 : 1;
    const std::vector<char> all = group->all_gather(&ok, 1, timeout);
    for (size_t r = 0; r < all.size(); ++r)
      if (!all[r] && failed.empty())
        failed = (group == t.pipeline ? "rank " : group == t.data_parallel ? "replica " : "tensor parallel rank ") +
                 std::to_string(r);
  }
  if (mine) std::rethrow_exception(mine);
  if (!failed.empty()) fail(code, what, ": ", failed, " failed (its own error says why)");
}

std::string manifest_path(const std::string& folder) { return folder + "/manifest.json"; }

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// Shard files in `folder` that `keep` does not name (a save interrupted earlier, older steps).
void remove_unnamed_shards(const std::string& folder, const std::vector<std::string>& keep) {
  DIR* dir = ::opendir(folder.c_str());
  if (!dir) return;
  while (dirent* e = ::readdir(dir)) {
    const std::string name = e->d_name;
    if (!std::regex_match(name, kShardName)) continue;
    if (std::find(keep.begin(), keep.end(), name) != keep.end()) continue;
    if (::unlink((folder + "/" + name).c_str()) != 0)
      log(LogLevel::kWarning, "checkpoint '" + folder + "': could not remove the stale shard " + name);
  }
  ::closedir(dir);
}

void save_shards(Trainer& t, const ProcessGroups& groups, const std::string& folder) {
  const double timeout = groups.timeout_seconds;
  comm::World& pipeline = *groups.pipeline;
  // Replica 0 writes (the replicas are equal); of a split model, tensor-parallel rank 0 writes the
  // whole tensors it gathered from its group.
  const bool writer = (!groups.data_parallel || groups.data_parallel->rank() == 0) &&
                      (!groups.tensor_parallel || groups.tensor_parallel->rank() == 0);
  const int rank = pipeline.rank();
  const std::vector<Parameter*> local = t.local_parameters();
  const int64_t step = t.metrics().step;
  // New names for this save's shards: the manifest in place names the old ones until the new
  // manifest replaces it (atomically), so a save that fails anywhere leaves the last good checkpoint.
  const std::string file = "step-" + std::to_string(step) + ".rank-" + std::to_string(rank) + "." +
                           save_token(pipeline, timeout) + ".pfck";
  // This process's new shard goes again when the save fails after writing it.
  struct Abandon {
    std::string path;
    bool keep = false;
    ~Abandon() {
      if (!keep && !path.empty()) ::unlink(path.c_str());
    }
  } abandon;
  nlohmann::json shard;
  std::exception_ptr error;
  WholeEntries whole;
  try {
    if (const auto& group = t.model().tensor_parallel_group()) whole = gather_whole_entries(t, local, *group);
  } catch (...) {
    error = std::current_exception();
  }
  if (writer && !error) {
    try {
      struct stat st;
      if (::lstat(folder.c_str(), &st) == 0) {
        PF_CHECK_ARG(S_ISDIR(st.st_mode), "checkpoint '", folder, "': with one process per rank a checkpoint is a ",
                     "folder, and this path exists and is not one");
      } else if (::mkdir(folder.c_str(), 0755) != 0 && errno != EEXIST) {
        fail(ErrorCode::kIoError, "checkpoint '", folder, "': cannot create the folder: ", std::strerror(errno));
      }
      const std::string bytes = whole.entries.empty() ? encode_checkpoint(t, local, folder + "/" + file)
                                                      : encode_checkpoint_entries(t, whole.entries, folder + "/" + file);
      write_checkpoint_file(folder + "/" + file, bytes);
      abandon.path = folder + "/" + file;
      nlohmann::json names = nlohmann::json::array();
      for (const Parameter* p : local) names.push_back(p->name);
      shard = {{"file", file}, {"rank", rank}, {"sha256", sha256_hex(bytes.data(), bytes.size())},
               {"parameters", names}};
    } catch (...) {
      error = std::current_exception();
    }
  }
  agree(groups, error, ErrorCode::kFailedPrecondition, "checkpoint '" + folder + "': writing the shards");
  if (writer) {
    // Rank 0 of replica 0 collects every shard's description and writes the manifest.
    nlohmann::json shards = nlohmann::json::array();
    for (int r = 0; r < pipeline.size(); ++r) {
      std::string text = r == rank ? shard.dump() : std::string();
      comm::broadcast_string(pipeline, &text, r, timeout);
      shards.push_back(nlohmann::json::parse(text));
    }
    if (rank == 0) {
      try {
        const nlohmann::json manifest = {{"format", kManifestFormat},
                                         {"step", step},
                                         {"data_position", t.metrics().data_position},
                                         {"optimizer_steps", t.optimizer().steps_taken()},
                                         {"ranks", pipeline.size()},
                                         {"replicas", groups.replicas},
                                         {"shards", shards}};
        write_checkpoint_file(manifest_path(folder), manifest.dump(1));
        std::vector<std::string> keep;
        for (const auto& s : shards) keep.push_back(s["file"].get<std::string>());
        remove_unnamed_shards(folder, keep);
      } catch (...) {
        error = std::current_exception();
      }
    }
  }
  agree(groups, error, ErrorCode::kFailedPrecondition, "checkpoint '" + folder + "': writing the manifest");
  abandon.keep = true;
  if (rank == 0 && writer)
    log(LogLevel::kInfo, "saved checkpoint '" + folder + "' (" + std::to_string(pipeline.size()) +
                             " shards) at step " + std::to_string(step));
}

struct Manifest {
  int64_t step = 0, data_position = 0, optimizer_steps = 0;
  struct Shard {
    std::string file, sha256;
    std::vector<std::string> parameters;
  };
  std::vector<Shard> shards;
};

Manifest read_manifest(const std::string& folder) {
  const std::string path = manifest_path(folder);
  std::string text;
  try {
    text = read_checkpoint_file(path, static_cast<uint64_t>(limits::kMaxCheckpointHeaderBytes));
  } catch (const Error& e) {
    fail(e.code() == ErrorCode::kNotFound ? ErrorCode::kDataLoss : e.code(), "checkpoint '", folder,
         "': no complete checkpoint (", e.what(), ")");
  }
  const nlohmann::json m = parse_json_text(text, "checkpoint '" + path + "'", limits::kMaxCheckpointHeaderBytes,
                                           ErrorCode::kDataLoss);
  auto bad = [&](const std::string& what) -> void { fail(ErrorCode::kDataLoss, "checkpoint '", path, "': ", what); };
  if (!m.is_object() || m.value("format", std::string()) != kManifestFormat) bad("not a " + std::string(kManifestFormat) + " manifest");
  Manifest out;
  auto count = [&](const char* key) {
    const auto it = m.find(key);
    if (it == m.end() || !it->is_number_unsigned() || it->get<uint64_t>() > static_cast<uint64_t>(limits::kMaxStepCount))
      bad(std::string("\"") + key + "\" must be an integer in [0, 2^53]");
    return static_cast<int64_t>(it->get<uint64_t>());
  };
  out.step = count("step");
  out.data_position = count("data_position");
  out.optimizer_steps = count("optimizer_steps");
  const auto shards = m.find("shards");
  if (shards == m.end() || !shards->is_array() || shards->empty() || shards->size() > static_cast<size_t>(limits::kMaxRanks))
    bad("\"shards\" must be a list of 1 to " + std::to_string(limits::kMaxRanks) + " shards");
  std::map<std::string, std::string> owner;  // parameter -> shard file
  for (size_t i = 0; i < shards->size(); ++i) {
    const nlohmann::json& s = (*shards)[i];
    const std::string where = "shards[" + std::to_string(i) + "]";
    if (!s.is_object() || !s.contains("file") || !s["file"].is_string() || !s.contains("sha256") ||
        !s["sha256"].is_string() || !s.contains("parameters") || !s["parameters"].is_array())
      bad(where + ": expected {file, sha256, parameters}");
    Manifest::Shard shard;
    shard.file = s["file"].get<std::string>();
    shard.sha256 = s["sha256"].get<std::string>();
    if (!std::regex_match(shard.file, kShardName)) bad(where + ": '" + shard.file + "' is not a shard file name");
    for (const auto& n : s["parameters"]) {
      if (!n.is_string()) bad(where + ".parameters: expected names");
      const std::string name = n.get<std::string>();
      auto [it, inserted] = owner.emplace(name, shard.file);
      if (!inserted) bad("parameter '" + name + "' is in two shards (" + it->second + " and " + shard.file + ")");
      shard.parameters.push_back(name);
    }
    out.shards.push_back(std::move(shard));
  }
  return out;
}

// Reads the shards holding `wanted` and applies them (kDataLoss naming a missing, damaged or
// foreign shard, before anything changes). With a world every process agrees first.
void load_shards(Trainer& trainer, const std::string& folder, const std::vector<Parameter*>& wanted,
                 const std::optional<ProcessGroups>& t) {
  std::exception_ptr error;
  Manifest manifest;
  std::vector<std::shared_ptr<const CheckpointImage>> images;
  try {
    manifest = read_manifest(folder);
    // Every parameter the manifest lists must be the model's, as the single-file loader requires,
    // also in shards this process does not read.
    std::set<std::string> model_names;
    for (const Parameter* p : trainer.model().parameters()) model_names.insert(p->name);
    for (const Manifest::Shard& shard : manifest.shards)
      for (const std::string& name : shard.parameters)
        PF_CHECK_ARG(model_names.count(name) != 0, "checkpoint '", folder, "': shard '", shard.file,
                     "' holds parameter '", name, "', which does not exist in this model");
    for (const Manifest::Shard& shard : manifest.shards) {
      bool needed = false;
      for (const Parameter* p : wanted)
        needed = needed || std::find(shard.parameters.begin(), shard.parameters.end(), p->name) != shard.parameters.end();
      if (!needed) continue;
      const std::string path = folder + "/" + shard.file;
      // Shards are read only from inside the folder: PipeForge never writes a link there, and one
      // could point anywhere.
      struct stat st {};
      if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
        fail(ErrorCode::kDataLoss, "checkpoint '", folder, "': shard '", shard.file,
             "' is a symbolic link; shards are read only from inside the checkpoint folder");
      std::shared_ptr<const CheckpointImage> image;
      try {
        image = read_checkpoint_image(trainer, path);
      } catch (const Error& e) {
        fail(e.code() == ErrorCode::kNotFound ? ErrorCode::kDataLoss : e.code(), "checkpoint '", folder, "': shard '",
             shard.file, "': ", e.what());
      }
      if (checkpoint_image_sha256(*image) != shard.sha256)
        fail(ErrorCode::kDataLoss, "checkpoint '", folder, "': shard '", shard.file,
             "' is not the one the manifest names (SHA-256 differs: from another save?)");
      if (checkpoint_image_step(*image) != manifest.step)
        fail(ErrorCode::kDataLoss, "checkpoint '", folder, "': shard '", shard.file, "' is of step ",
             checkpoint_image_step(*image), ", the manifest of step ", manifest.step);
      for (const std::string& name : shard.parameters)
        if (!checkpoint_image_has_parameter(*image, name))
          fail(ErrorCode::kDataLoss, "checkpoint '", folder, "': shard '", shard.file, "' lacks parameter '", name,
               "' that the manifest lists");
      images.push_back(image);
    }
    for (const Parameter* p : wanted) {
      bool found = false;
      for (const auto& s : manifest.shards)
        found = found || std::find(s.parameters.begin(), s.parameters.end(), p->name) != s.parameters.end();
      PF_CHECK_ARG(found, "checkpoint '", folder, "': has no parameter '", p->name, "'");
    }
  } catch (...) {
    error = std::current_exception();
  }
  if (t) agree(*t, error, ErrorCode::kDataLoss, "checkpoint '" + folder + "': reading the shards");
  else if (error) std::rethrow_exception(error);
  std::vector<const CheckpointImage*> raw;
  for (const auto& image : images) raw.push_back(image.get());
  apply_checkpoint_images(trainer, raw, wanted, manifest.step, manifest.data_position, manifest.optimizer_steps);
}

// What the trainer refuses (an asynchronous pipeline is saved and loaded empty, after drain()).
void refuse(const Trainer& trainer, bool loading, const std::string& path) {
  const CheckpointRefusal r = trainer.checkpoint_refusal(loading);
  if (!r.why.empty()) fail(static_cast<ErrorCode>(r.code), "checkpoint '", path, "': ", r.why);
}

}  // namespace

void save_trainer_checkpoint(Trainer& trainer, const std::string& path) {
  refuse(trainer, false, path);
  if (const std::optional<ProcessGroups> groups = sharded(trainer)) save_shards(trainer, *groups, path);
  else if (trainer.model().tensor_parallel_group()) save_tensor_parallel_checkpoint(trainer, path);
  else save_checkpoint(trainer, path);
}

nlohmann::json checkpoint_header(const std::string& path) {
  if (!is_directory(path)) return read_checkpoint_header(path);
  const Manifest manifest = read_manifest(path);
  return read_checkpoint_header(path + "/" + manifest.shards.front().file);
}

void load_trainer_checkpoint(Trainer& trainer, const std::string& path) {
  refuse(trainer, true, path);
  const std::optional<ProcessGroups> t = sharded(trainer);
  const std::vector<Parameter*> wanted = trainer.local_parameters();
  if (is_directory(path)) {
    load_shards(trainer, path, wanted, t);
    log(LogLevel::kInfo, "loaded checkpoint '" + path + "' at step " + std::to_string(trainer.metrics().step));
    return;
  }
  if (!t) return load_checkpoint(trainer, path);
  // A single-file checkpoint into one process per rank: each takes its own parameters from it.
  std::exception_ptr error;
  std::shared_ptr<const CheckpointImage> image;
  try {
    image = read_checkpoint_image(trainer, path);
    for (const Parameter* p : wanted)
      PF_CHECK_ARG(checkpoint_image_has_parameter(*image, p->name), "checkpoint '", path, "': has no parameter '",
                   p->name, "'");
  } catch (...) {
    error = std::current_exception();
  }
  agree(*t, error, ErrorCode::kDataLoss, "checkpoint '" + path + "': reading it");
  apply_checkpoint_images(trainer, {image.get()}, wanted, checkpoint_image_step(*image),
                          checkpoint_image_data_position(*image), checkpoint_image_optimizer_steps(*image));
}

}  // namespace pf
