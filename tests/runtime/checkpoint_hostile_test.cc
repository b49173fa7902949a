// Checkpoints edited as an attacker would: the header is changed and the (non-secret) SHA-256
// recomputed, so every check behind the checksum is reached. Each file is refused with kDataLoss
// (or kInvalidArgument for an intact checkpoint of another model) naming the file and the entry,
// and the trainer is unchanged. Also: what save refuses to write or replace.

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <iterator>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/parameter_checksum.h"
#include "runtime/core/error.h"
#include "runtime/core/sha256.h"
#include "runtime/models/builders.h"
#include "runtime/train/sequential_trainer.h"
#include "tests/runtime/trainer_fixtures.h"
#include "tests/util/catch_error.h"

namespace pf {
namespace {

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

std::unique_ptr<SequentialTrainer> make_trainer() {
  MlpConfig c;
  c.input_dim = 8;
  c.hidden = {6};
  c.classes = 3;
  TrainerOptions o;
  o.micro_batches = 1;
  o.seed = 5;
  return std::make_unique<SequentialTrainer>(build_mlp(c), o);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// The parts of a checkpoint file (layout in checkpoint.h).
struct Parts {
  nlohmann::json header;
  std::string data;
};

constexpr size_t kFixed = 8 + 4 + 8;

Parts split(const std::string& bytes) {
  uint64_t header_len = 0;
  std::memcpy(&header_len, bytes.data() + 12, 8);
  return {nlohmann::json::parse(bytes.substr(kFixed, header_len)),
          bytes.substr(kFixed + header_len, bytes.size() - 32 - kFixed - header_len)};
}

// Reassembles with the SHA-256 recomputed, as anyone can.
std::string join(const std::string& original, const std::string& header_text, const std::string& data) {
  std::string out = original.substr(0, 12);
  const uint64_t len = header_text.size();
  out.append(reinterpret_cast<const char*>(&len), 8);
  out += header_text + data;
  return out + sha256_digest(out.data(), out.size());
}

class HostileCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    auto trainer = make_trainer();
    trainer->step(testing::teacher_batch(4, 8, 3, 1));  // AdamW state exists
    good_path_ = temp_path("hostile_good.ckpt");
    save_checkpoint(*trainer, good_path_);
    good_ = read_all(good_path_);
  }

  // Edits the header, writes the file with a valid checksum, loads it into a fresh trainer and
  // checks the refusal and that nothing changed.
  void expect_refused(const std::function<void(nlohmann::json&)>& edit, ErrorCode code, const std::string& fragment,
                      const std::string& data_suffix = "") {
    Parts parts = split(good_);
    edit(parts.header);
    const std::string path = temp_path("hostile_edit.ckpt");
    std::ofstream(path, std::ios::binary | std::ios::trunc) << join(good_, parts.header.dump(), parts.data + data_suffix);
    expect_file_refused(path, code, fragment);
  }

  void expect_file_refused(const std::string& path, ErrorCode code, const std::string& fragment) {
    auto trainer = make_trainer();
    const std::string before = parameter_checksum(trainer->model().parameters());
    const Error e = pftest::catch_error([&] { load_checkpoint(*trainer, path); });
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << "want '" << fragment << "' in " << e.what();
    EXPECT_EQ(parameter_checksum(trainer->model().parameters()), before);
    EXPECT_EQ(trainer->metrics().step, 0);
    EXPECT_TRUE(trainer->optimizer().state().empty());
  }

  std::string good_path_, good_;
};

TEST_F(HostileCheckpoint, TheUneditedFileLoads) {
  auto trainer = make_trainer();
  load_checkpoint(*trainer, good_path_);
  EXPECT_EQ(trainer->metrics().step, 1);
  EXPECT_EQ(trainer->optimizer().state().size(), 2 * trainer->model().parameters().size());
}

TEST_F(HostileCheckpoint, OffsetsAndLengthsThatWrapOrPointOutsideAreRefused) {
  expect_refused([](nlohmann::json& h) { h["tensors"][0]["offset"] = -64; }, ErrorCode::kDataLoss,
                 "tensors[0].offset: expected a non-negative integer");
  expect_refused([](nlohmann::json& h) { h["tensors"][1]["offset"] = UINT64_MAX - 3; }, ErrorCode::kDataLoss,
                 "outside the");
  // offset + bytes wraps to a small number.
  expect_refused(
      [](nlohmann::json& h) {
        h["tensors"][1]["offset"] = UINT64_MAX - h["tensors"][1]["bytes"].get<uint64_t>() + 8;
      },
      ErrorCode::kDataLoss, "tensors[1] 'param/fc0.bias'");
  expect_refused([](nlohmann::json& h) { h["tensors"][2]["bytes"] = 1u << 30; }, ErrorCode::kDataLoss, "outside the");
}

TEST_F(HostileCheckpoint, MalformedEntriesAreDataLossNamingTheEntry) {
  expect_refused([](nlohmann::json& h) { h["tensors"][0]["name"] = "x"; }, ErrorCode::kDataLoss,
                 "tensors[0] 'x': unknown entry");
  expect_refused([](nlohmann::json& h) { h["tensors"][5]["name"] = "optim/"; }, ErrorCode::kDataLoss,
                 "expected optim/<parameter>/<slot>");
  expect_refused([](nlohmann::json& h) { h["tensors"].push_back(h["tensors"][0]); }, ErrorCode::kDataLoss,
                 "appears twice");
  expect_refused(
      [](nlohmann::json& h) {
        for (auto& t : h["tensors"])
          if (t["name"] == "optim/fc0.weight/exp_avg") t["name"] = "optim/fc0.weight/velocity";
      },
      ErrorCode::kDataLoss, "'velocity' is not a state slot of this optimizer");
  expect_refused(
      [](nlohmann::json& h) {
        for (auto& t : h["tensors"])
          if (t["name"] == "optim/fc0.weight/exp_avg") t["name"] = "optim/fc0.bias/exp_avg";
      },
      ErrorCode::kDataLoss, "shape differs from its parameter's");
  expect_refused([](nlohmann::json& h) { h["tensors"][0]["dtype"] = "f16"; }, ErrorCode::kDataLoss, "not f32");
  expect_refused([](nlohmann::json& h) { h["tensors"][0]["shape"] = {6, 7}; }, ErrorCode::kDataLoss,
                 "bytes for shape [6, 7]");
  expect_refused([](nlohmann::json& h) { h["tensors"] = "all of them"; }, ErrorCode::kDataLoss,
                 "header.tensors: expected a list");
  expect_refused([](nlohmann::json& h) { h["optimizer"]["lr"] = 1e300; }, ErrorCode::kDataLoss, "header.optimizer");
}

TEST_F(HostileCheckpoint, ProgressFieldsOutOfRangeAreRefused) {
  expect_refused([](nlohmann::json& h) { h["step"] = INT64_MAX; }, ErrorCode::kDataLoss,
                 "header.step: value 9223372036854775807 is larger than the limit");
  expect_refused([](nlohmann::json& h) { h["optimizer_steps"] = -1; }, ErrorCode::kDataLoss,
                 "header.optimizer_steps: expected a non-negative integer");
  expect_refused([](nlohmann::json& h) { h.erase("data_position"); }, ErrorCode::kDataLoss,
                 "missing field \"data_position\"");
}

TEST_F(HostileCheckpoint, AnIntactCheckpointOfAnotherShapeNamesTheParameter) {
  expect_refused([](nlohmann::json& h) { h["tensors"][0]["name"] = "param/fc9.weight"; }, ErrorCode::kInvalidArgument,
                 "parameter 'fc9.weight' does not exist in this model");
}

TEST_F(HostileCheckpoint, DeepOrHugeHeadersAndOddFilesAreRefused) {
  expect_refused([](nlohmann::json& h) { h["model"] = nlohmann::json::parse(std::string(70, '[') + std::string(70, ']')); },
                 ErrorCode::kDataLoss, "nested deeper than 64 levels");
  // More bytes than this model's checkpoint can have: refused from the file size, before reading.
  const std::string big = temp_path("hostile_big.ckpt");
  {
    std::ofstream out(big, std::ios::binary | std::ios::trunc);
    out << good_;
  }
  ASSERT_EQ(truncate(big.c_str(), off_t{300} << 20), 0);
  expect_file_refused(big, ErrorCode::kDataLoss, "more than a checkpoint of this model can have");
  expect_file_refused(temp_path(""), ErrorCode::kDataLoss, "not a regular file");  // a directory
  const std::string fifo = temp_path("hostile.fifo");
  ::unlink(fifo.c_str());
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  expect_file_refused(fifo, ErrorCode::kDataLoss, "not a regular file");  // and no hang
}

TEST(CheckpointSave, RefusesToReplaceANonRegularFile) {
  auto trainer = make_trainer();
  const std::string target = temp_path("save_target.txt");
  std::ofstream(target) << "precious";
  const std::string link = temp_path("save_link.ckpt");
  ::unlink(link.c_str());
  ASSERT_EQ(symlink(target.c_str(), link.c_str()), 0);
  Error e = pftest::catch_error([&] { save_checkpoint(*trainer, link); });
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("a symbolic link"), std::string::npos) << e.what();
  EXPECT_EQ(read_all(target), "precious");
  struct stat st;
  ASSERT_EQ(lstat(link.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  const std::string folder = temp_path("save_folder.ckpt");
  ::mkdir(folder.c_str(), 0700);
  e = pftest::catch_error([&] { save_checkpoint(*trainer, folder); });
  EXPECT_NE(std::string(e.what()).find("a directory"), std::string::npos) << e.what();
}

TEST(CheckpointSave, RemovesTemporaryFilesOfDeadWritersOnly) {
  auto trainer = make_trainer();
  const std::string path = temp_path("stale.ckpt");
  // A writer killed mid-save (its pid is gone: a child that has exited) and a live one (our parent).
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  int status = 0;
  waitpid(child, &status, 0);
  const std::string dead = path + ".tmp." + std::to_string(child);
  const std::string live = path + ".tmp." + std::to_string(getppid());
  const std::string other = temp_path("other.ckpt.tmp." + std::to_string(child));
  for (const std::string& f : {dead, live, other}) std::ofstream(f) << "partial";
  save_checkpoint(*trainer, path);
  EXPECT_NE(access(dead.c_str(), F_OK), 0) << "stale temporary file kept";
  EXPECT_EQ(access(live.c_str(), F_OK), 0) << "a running writer's file was removed";
  EXPECT_EQ(access(other.c_str(), F_OK), 0) << "another checkpoint's file was removed";
  auto loaded = make_trainer();
  load_checkpoint(*loaded, path);
}

TEST(CheckpointSave, RefusesNonFiniteParameters) {
  auto trainer = make_trainer();
  const std::string path = temp_path("nan.ckpt");
  save_checkpoint(*trainer, path);
  const std::string before = read_all(path);
  trainer->model().parameters()[1]->value.f32()[2] = std::nanf("");
  const Error e = pftest::catch_error([&] { save_checkpoint(*trainer, path); });
  EXPECT_EQ(e.code(), ErrorCode::kFailedPrecondition);
  EXPECT_NE(std::string(e.what()).find("param/fc0.bias has a NaN at element 2"), std::string::npos) << e.what();
  EXPECT_EQ(read_all(path), before);  // the previous checkpoint is kept
  trainer->model().parameters()[1]->value.f32()[2] = INFINITY;
  EXPECT_NE(std::string(pftest::catch_error([&] { save_checkpoint(*trainer, path); }).what()).find("an infinity"),
            std::string::npos);
}

}  // namespace
}  // namespace pf
