// `--data cifar10:PATH` and CSV pixel rows for models with feature input: an MLP of input width
// 3072 trains on a CIFAR-10 file or folder (pipelined bitwise as sequential), as do the ResNet and
// ViT presets; `eval` scores a checkpoint on the test images whatever the batch; a CSV of 8 x 8
// pixel rows (scikit-learn's digits' shape) feeds an MLP of input width 64 and a model file's;
// wrong widths and damaged files are refused naming both numbers or the file.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/cli/cli_runner.h"

namespace {

using pftest::CommandResult;
using pftest::run;
using pftest::run_json;
using pftest::TempFolder;

// CIFAR-10 records with ids first .. first + count - 1: label id % 10; pixel k bright (200) where
// k % 10 is the label, dark (20) elsewhere, plus (7 id + k) % 13: classes a small MLP separates.
void write_cifar10(const std::string& path, int first, int count) {
  std::string bytes;
  for (int id = first; id < first + count; ++id) {
    bytes.push_back(static_cast<char>(id % 10));
    for (int k = 0; k < 3072; ++k)
      bytes.push_back(static_cast<char>((k % 10 == id % 10 ? 200 : 20) + (7 * id + k) % 13));
  }
  std::ofstream(path, std::ios::binary) << bytes;
}

// cifar-10-batches-bin: 8 images in each of the five training files, 6 in test_batch.bin.
std::string write_cifar10_folder(const std::string& parent) {
  const std::string dir = parent + "/cifar-10-batches-bin";
  std::filesystem::create_directories(dir);
  for (int n = 1; n <= 5; ++n) write_cifar10(dir + "/data_batch_" + std::to_string(n) + ".bin", 8 * n, 8);
  write_cifar10(dir + "/test_batch.bin", 100, 6);
  return dir;
}

const std::string kMlp = " --model mlp --features 3072 --classes 10 --layers 1 --hidden 8 --seed 2";

double eval_loss(const std::string& args) { return run_json("eval" + args)["loss"].get<double>(); }

TEST(ImageDataCli, AnMlpOfWidth3072TrainsOnACifar10FileAndFolder) {
  TempFolder dir("cifar_train");
  write_cifar10(dir.path + "/one.bin", 0, 20);
  const nlohmann::json file = run_json("train --quiet" + kMlp + " --data cifar10:" + dir.path +
                                       "/one.bin --steps 3 --batch-size 4 --eval-every 3");
  EXPECT_EQ(file["steps"], 3);
  EXPECT_EQ(file["config"]["data_format"], "CIFAR-10");
  EXPECT_EQ(file["config"]["features"], 3072);
  EXPECT_EQ(file["config"]["data_samples"], 18);  // 0.1 of 20 held out with --eval-every
  EXPECT_EQ(file["config"]["held_out_samples"], 2);
  for (const auto& loss : file["losses"]) EXPECT_TRUE(std::isfinite(loss.get<double>()));

  // A folder: its five training files, test_batch.bin held out; pipelined bitwise as sequential.
  const std::string folder = write_cifar10_folder(dir.path);
  const std::string common = kMlp + " --data cifar10:" + folder + " --steps 4 --batch-size 4 --micro-batches 2 " +
                             "--eval-every 2";
  const nlohmann::json seq = run_json("train --quiet" + common);
  EXPECT_EQ(seq["config"]["data_samples"], 40);
  EXPECT_EQ(seq["config"]["held_out_samples"], 6);
  EXPECT_EQ(seq["config"]["data_files"].size(), 6u);
  EXPECT_EQ(seq["evaluations"].size(), 2u);
  const nlohmann::json piped = run_json("train --quiet" + common + " --schedule 1f1b --stages 2");
  EXPECT_EQ(piped["param_checksum"], seq["param_checksum"]);
  EXPECT_EQ(piped["losses"], seq["losses"]);
  EXPECT_EQ(piped["evaluations"], seq["evaluations"]);
}

// The vision presets read the same rows: a ResNet and a ViT of 3 x 32 x 32 images train on the
// folder, pipelined bitwise as sequential, and evaluate on test_batch.bin.
TEST(ImageDataCli, TheResNetAndViTPresetsTrainOnCifar10) {
  TempFolder dir("cifar_vision");
  const std::string folder = write_cifar10_folder(dir.path);
  std::ofstream(dir.path + "/resnet.json")
      << R"({"preset": "resnet", "channels": 3, "image_size": 32, "width": 4, "blocks": [1, 1], "groups": 2})";
  std::ofstream(dir.path + "/vit.json")
      << R"({"preset": "vit", "channels": 3, "image_size": 32, "patch": 8, "d_model": 16, "heads": 2, "layers": 1})";
  for (const char* preset : {"resnet", "vit"}) {
    const std::string common = " --model-file " + dir.path + "/" + preset + ".json --data cifar10:" + folder +
                               " --steps 2 --batch-size 4 --micro-batches 2 --eval-every 2";
    const std::string checkpoint = dir.path + "/" + preset + ".ckpt";
    const nlohmann::json seq = run_json("train --quiet" + common + " --checkpoint " + checkpoint);
    EXPECT_EQ(seq["config"]["features"], 3072) << preset;
    EXPECT_EQ(seq["config"]["data_format"], "CIFAR-10") << preset;
    const nlohmann::json piped = run_json("train --quiet" + common + " --schedule 1f1b --stages 2");
    EXPECT_EQ(piped["param_checksum"], seq["param_checksum"]) << preset;
    EXPECT_EQ(piped["losses"], seq["losses"]) << preset;
    const nlohmann::json eval = run_json("eval --resume " + checkpoint + " --data cifar10:" + folder);
    EXPECT_EQ(eval["images"], 6) << preset;
    EXPECT_TRUE(std::isfinite(eval["loss"].get<double>())) << preset;
  }
}

// eval scores a checkpoint on the test images: the folder's test_batch.bin, or all of one file;
// the mean over every image whatever the batch; training lowers it.
TEST(ImageDataCli, EvalScoresTheTestImages) {
  TempFolder dir("cifar_eval");
  const std::string folder = write_cifar10_folder(dir.path);
  run_json("train --quiet" + kMlp + " --data cifar10:" + folder + " --steps 30 --batch-size 8 --checkpoint " +
           dir.path + "/m.ckpt");
  const std::string weights = " --resume " + dir.path + "/m.ckpt --data cifar10:";
  const nlohmann::json on_folder = run_json("eval" + weights + folder);
  EXPECT_EQ(on_folder["images"], 6);
  EXPECT_EQ(on_folder["file_format"], "CIFAR-10");
  EXPECT_EQ(on_folder["data_files"], nlohmann::json::array({folder + "/test_batch.bin"}));
  const double loss = on_folder["loss"].get<double>();
  for (const char* rows : {"1", "4", "64"})
    EXPECT_NEAR(eval_loss(weights + folder + " --batch-size " + rows), loss, 1e-6 * loss) << rows;
  const nlohmann::json on_file = run_json("eval" + weights + folder + "/test_batch.bin");
  EXPECT_EQ(on_file["images"], 6);
  EXPECT_NEAR(on_file["loss"].get<double>(), loss, 1e-6 * loss);
  EXPECT_EQ(run_json("eval" + weights + folder + "/data_batch_2.bin")["images"], 8);
  const double untrained = eval_loss(kMlp + " --data cifar10:" + folder);
  EXPECT_NEAR(untrained, std::log(10.0), 0.5);
  EXPECT_LT(loss, 0.5 * untrained);
}

// Rows of 64 pixel columns (8 x 8 intensities 0..16, as scikit-learn's digits) and a label: the
// CSV source feeds an MLP of input width 64 and a model file's; its held-out split evaluates.
TEST(ImageDataCli, CsvPixelRowsFeedAModelOfInputWidth64) {
  TempFolder dir("csv_pixels");
  std::ofstream csv(dir.path + "/digits.csv");
  for (int row = 0; row < 200; ++row) {
    const int label = row % 10;
    for (int k = 0; k < 64; ++k) csv << ((k % 10 == label ? 12 : 1) + (row * 7 + k) % 3) << ".0,";
    csv << label << "\n";
  }
  csv.close();
  const std::string data = " --data " + dir.path + "/digits.csv --steps 40 --batch-size 16 --eval-every 40 --seed 1";
  const nlohmann::json mlp = run_json("train --quiet --model mlp --features 64 --classes 10" + data);
  EXPECT_EQ(mlp["config"]["data_format"], "CSV");
  EXPECT_EQ(mlp["config"]["data_samples"], 180);
  EXPECT_EQ(mlp["config"]["held_out_samples"], 20);
  EXPECT_LT(mlp["loss"].get<double>(), 0.5 * mlp["first_loss"].get<double>());
  ASSERT_EQ(mlp["evaluations"].size(), 1u);
  std::ofstream(dir.path + "/mlp.json") << R"({"preset": "mlp", "input_dim": 64, "hidden": [16], "classes": 10})";
  const nlohmann::json file = run_json("train --quiet --model-file " + dir.path + "/mlp.json" + data);
  EXPECT_EQ(file["config"]["data_format"], "CSV");
  EXPECT_LT(file["loss"].get<double>(), 0.5 * file["first_loss"].get<double>());

  const CommandResult wide = run("train --quiet --model mlp --features 32" + data);
  EXPECT_EQ(wide.exit_code, 2);
  EXPECT_NE(wide.err.find("its rows have 64 features, but the mlp model's input width (--features) is 32"),
            std::string::npos)
      << wide.err;
  const CommandResult few = run("train --quiet --model mlp --features 64 --classes 4" + data);
  EXPECT_EQ(few.exit_code, 2);
  EXPECT_NE(few.err.find("its labels go up to 9, but the mlp model has 4 classes"), std::string::npos) << few.err;
}

TEST(ImageDataCli, WrongWidthsAndDamagedFilesAreRefusedNamingThem) {
  TempFolder dir("cifar_bad");
  const std::string folder = write_cifar10_folder(dir.path);
  write_cifar10(dir.path + "/good.bin", 0, 4);
  std::filesystem::copy_file(dir.path + "/good.bin", dir.path + "/cut.bin");
  std::filesystem::resize_file(dir.path + "/cut.bin", 3 * 3073 + 10);
  std::filesystem::copy_file(dir.path + "/good.bin", dir.path + "/label10.bin");
  {
    std::fstream f(dir.path + "/label10.bin", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(3073);
    f.put(10);
  }
  std::filesystem::create_directories(dir.path + "/no-test");
  for (int n = 1; n <= 5; ++n)
    std::filesystem::copy_file(folder + "/data_batch_" + std::to_string(n) + ".bin",
                               dir.path + "/no-test/data_batch_" + std::to_string(n) + ".bin");
  std::filesystem::create_directories(dir.path + "/empty");
  std::ofstream(dir.path + "/mlp64.json") << R"({"preset": "mlp", "input_dim": 64, "hidden": [8], "classes": 10})";
  const std::string good = " --data cifar10:" + dir.path + "/good.bin";
  run_json("train --quiet --steps 1 --batch-size 2" + kMlp + good + " --checkpoint " + dir.path + "/m.ckpt");
  struct Case {
    std::string args;
    int exit_code;
    std::string says;
  } cases[] = {
      {"train --steps 1 --batch-size 2 --model mlp" + good, 2,
       "CIFAR-10 images are 3072 values each (3 x 32 x 32), but the mlp model's input width (--features) is 32"},
      {"train --steps 1 --batch-size 2 --model-file " + dir.path + "/mlp64.json" + good, 2,
       "CIFAR-10 images are 3072 values each (3 x 32 x 32), but the model of " + dir.path +
           "/mlp64.json's input width is 64"},
      {"train --steps 1 --batch-size 2 --model mlp --features 3072 --classes 4" + good, 2,
       "CIFAR-10 has 10 classes, but the mlp model has 4"},
      {"train --steps 1 --batch-size 2" + kMlp + " --data cifar10:" + dir.path + "/cut.bin", 2,
       "'" + dir.path + "/cut.bin' holds 9229 bytes, not a positive multiple of 3073"},
      {"train --steps 1 --batch-size 4" + kMlp + " --data cifar10:" + dir.path + "/label10.bin", 1,
       "'" + dir.path + "/label10.bin': record 1 (counting from 0) has label 10"},
      {"train --steps 1" + kMlp + " --data cifar10:" + dir.path + "/no-test", 2,
       "'" + dir.path + "/no-test/test_batch.bin'"},
      {"train --steps 1" + kMlp + " --data cifar10:" + dir.path + "/empty", 2,
       "'" + dir.path + "/empty/data_batch_1.bin'"},
      {"train --steps 1" + kMlp + " --data cifar10:" + dir.path + "/missing", 2, "missing"},
      {"train --steps 1 --eval-every 1 --held-out 0.2" + kMlp + " --data cifar10:" + folder, 2,
       "is its test_batch.bin"},
      {"train --steps 1 --model gpt" + good, 2, "CIFAR-10 images feed a model with feature input"},
      {"train --steps 1" + kMlp + good + " --data " + dir.path + "/good.bin", 2, "CIFAR-10 images are the only data"},
      {"train --steps 1" + kMlp + " --data tokens:" + dir.path + "/good.bin", 2, "a token file feeds a token model"},
      {"eval --model mlp --features 100" + good, 2,
       "CIFAR-10 images are 3072 values each (3 x 32 x 32), but the mlp model's input width (--features) is 100"},
      {"eval --resume " + dir.path + "/m.ckpt --data cifar10:" + dir.path + "/cut.bin", 2, "cut.bin' holds 9229 bytes"},
      {"eval --resume " + dir.path + "/m.ckpt" + good + " --seq-len 4", 2,
       "--seq-len and --logits apply to token files"},
      {"eval --vocab 9 --seq-len 4" + good, 2, "CIFAR-10 images feed a model with feature input"},
  };
  for (const Case& c : cases) {
    const CommandResult r = run(c.args);
    EXPECT_EQ(r.exit_code, c.exit_code) << c.args << "\n" << r.err;
    EXPECT_NE(r.err.find(c.says), std::string::npos) << c.args << "\n" << r.err;
  }
}

}  // namespace
