#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/core/error.h"
#include "runtime/models/builders.h"
#include "runtime/train/sequential_trainer.h"
#include "tests/runtime/trainer_fixtures.h"

namespace pf {
namespace {

std::string temp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir ? dir : "/tmp") + "/" + name;
}

std::unique_ptr<SequentialTrainer> make_trainer(OptimizerConfig::Kind kind) {
  MlpConfig c;
  c.input_dim = 16;
  c.hidden = {24, 24};
  c.classes = 4;
  TrainerOptions o;
  o.micro_batches = 2;
  o.seed = 11;
  o.optimizer.kind = kind;
  o.optimizer.lr = 0.01f;
  o.optimizer.momentum = kind == OptimizerConfig::Kind::kSgd ? 0.9f : 0.0f;
  return std::make_unique<SequentialTrainer>(build_mlp(c), o);
}

std::vector<float> params(const SequentialTrainer& t) {
  std::vector<float> out;
  for (Parameter* p : t.model().parameters()) {
    auto v = p->value.to_vector();
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

TEST(Checkpoint, ResumeEqualsUninterruptedRunBitwise) {
  for (auto kind : {OptimizerConfig::Kind::kSgd, OptimizerConfig::Kind::kAdamW}) {
    auto straight = make_trainer(kind);
    testing::TeacherSource source_a(16, 16, 4);
    for (int i = 0; i < 6; ++i) straight->step(source_a);

    auto first = make_trainer(kind);
    testing::TeacherSource source_b(16, 16, 4);
    for (int i = 0; i < 3; ++i) first->step(source_b);
    const std::string path = temp_path("resume.ckpt");
    save_checkpoint(*first, path);
    first.reset();

    auto resumed = make_trainer(kind);
    load_checkpoint(*resumed, path);
    EXPECT_EQ(resumed->metrics().step, 3);
    testing::TeacherSource source_c(16, 16, 4);
    source_c.seek(resumed->metrics().data_position);
    for (int i = 0; i < 3; ++i) resumed->step(source_c);
    EXPECT_TRUE(bitwise_equal(params(*straight), params(*resumed))) << "optimizer " << static_cast<int>(kind);
    EXPECT_EQ(resumed->metrics().data_position, 12);
  }
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

void expect_rejected(const std::string& path, ErrorCode code, const std::string& fragment) {
  auto trainer = make_trainer(OptimizerConfig::Kind::kAdamW);
  const auto before = params(*trainer);
  try {
    load_checkpoint(*trainer, path);
    ADD_FAILURE() << "accepted " << path;
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), code) << e.what();
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
  }
  EXPECT_TRUE(bitwise_equal(before, params(*trainer)));  // a rejected file changes nothing
  EXPECT_EQ(trainer->metrics().step, 0);
}

TEST(Checkpoint, TruncatedCorruptedMissingAndMismatchedFilesAreRejected) {
  auto trainer = make_trainer(OptimizerConfig::Kind::kAdamW);
  trainer->step(testing::teacher_batch(16, 16, 4, 0));
  const std::string good = temp_path("good.ckpt");
  save_checkpoint(*trainer, good);
  const std::string bytes = read_all(good);

  const std::string truncated = temp_path("truncated.ckpt");
  write_all(truncated, bytes.substr(0, bytes.size() / 2));
  expect_rejected(truncated, ErrorCode::kDataLoss, "checksum");

  std::string flipped = bytes;
  flipped[flipped.size() - 100] ^= 0x01;
  const std::string corrupted = temp_path("corrupted.ckpt");
  write_all(corrupted, flipped);
  expect_rejected(corrupted, ErrorCode::kDataLoss, "checksum");

  const std::string garbage = temp_path("garbage.ckpt");
  write_all(garbage, "hello");
  expect_rejected(garbage, ErrorCode::kDataLoss, "not a PipeForge checkpoint");

  expect_rejected(temp_path("missing.ckpt"), ErrorCode::kNotFound, "cannot open");

  // A checkpoint of another model names the parameter that does not fit.
  MlpConfig other;
  other.input_dim = 16;
  other.hidden = {8};
  other.classes = 4;
  SequentialTrainer other_trainer(build_mlp(other), trainer->options());
  const std::string mismatched = temp_path("other_model.ckpt");
  save_checkpoint(other_trainer, mismatched);
  expect_rejected(mismatched, ErrorCode::kInvalidArgument, "fc0.weight");
}

TEST(Checkpoint, SaveReplacesAtomicallyAndLeavesNoTemporaryFiles) {
  auto trainer = make_trainer(OptimizerConfig::Kind::kSgd);
  const std::string path = temp_path("atomic.ckpt");
  save_checkpoint(*trainer, path);
  const std::string first = read_all(path);
  trainer->step(testing::teacher_batch(16, 16, 4, 0));
  save_checkpoint(*trainer, path);
  EXPECT_NE(read_all(path), first);
  EXPECT_NE(access((path + ".tmp." + std::to_string(getpid())).c_str(), F_OK), 0);
  // Saving into a folder that does not exist fails cleanly and keeps nothing half-written.
  try {
    save_checkpoint(*trainer, temp_path("no/such/dir/x.ckpt"));
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kIoError);
    EXPECT_NE(std::string(e.what()).find("no/such/dir"), std::string::npos);
  }
}

}  // namespace
}  // namespace pf
