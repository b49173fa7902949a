// Tensor parallelism on a CUDA device (docs/EXECUTION.md, "Tensor parallelism on CUDA devices"):
// T members as threads of one ThreadWorld, every member's split model on cuda:0, against the whole
// model trained on the CPU by the sequential trainer. Covers the column/row linears (the MLP), the
// GPT's heads and vocabulary-parallel embedding and loss, the Llama block (grouped-query heads,
// rotary positions, SwiGLU, RMSNorm), sequence parallelism, both reductions, and a checkpoint saved
// by the GPU members and resumed whole on the CPU. Skips without a CUDA device.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/checkpoint/sharded_checkpoint.h"
#include "runtime/comm/thread_world.h"
#include "runtime/models/builders.h"
#include "runtime/run/make_trainer.h"
#include "tests/gpu/gpu_test_util.h"
#include "tests/runtime/trainer_fixtures.h"
#include "tests/tensor_parallel/small_models.h"

namespace pf {
namespace {

using namespace gpu_test;
using namespace tp_test;

TrainerOptions sgd() {
  TrainerOptions o;
  o.micro_batches = 2;
  o.seed = 7;
  o.optimizer.kind = OptimizerConfig::Kind::kSgd;
  o.optimizer.lr = 0.1f;
  o.optimizer.momentum = 0.9f;
  o.optimizer.weight_decay = 0.01f;
  o.optimizer.clip_norm = 1.0f;
  return o;
}

std::shared_ptr<Model> llama24() { return llama(24); }

struct Member {
  std::vector<float> losses;
  std::vector<Parameter> slices;            // names, shapes and splits (no tensors)
  std::vector<std::vector<float>> values;   // host copies of the slices
  std::string error;
};

struct GpuRun {
  std::function<std::shared_ptr<Model>()> model;
  std::vector<Batch> data;
  int T = 2;
  std::string reduction = "allreduce";
  bool sequence_parallel = false;
  std::string checkpoint;  // saved by the members after the last step when not empty
  std::string resume;      // loaded by the members before the first step when not empty
};

std::vector<Member> run_on_gpu(const GpuRun& run, const TrainerOptions& o) {
  comm::ThreadWorld world(run.T);
  std::vector<Member> members(static_cast<size_t>(run.T));
  std::vector<std::thread> threads;
  for (int r = 0; r < run.T; ++r) {
    threads.emplace_back([&, r] {
      Member& out = members[static_cast<size_t>(r)];
      try {
        TrainingConfig c;
        c.base = o;
        c.tensor_parallel = run.T;
        c.tensor_parallel_world = std::shared_ptr<comm::World>(&world.member(r), [](comm::World*) {});
        c.tensor_reduction = run.reduction;
        c.sequence_parallel = run.sequence_parallel;
        c.recv_timeout_seconds = 60;
        c.devices = {gpu()};
        std::shared_ptr<Model> model = run.model();
        std::unique_ptr<Trainer> trainer = make_trainer(model, c);
        if (!run.resume.empty()) load_trainer_checkpoint(*trainer, run.resume);
        for (const Batch& b : run.data) out.losses.push_back(static_cast<float>(trainer->step(b).loss));
        if (!run.checkpoint.empty()) save_trainer_checkpoint(*trainer, run.checkpoint);
        for (Parameter* p : model->parameters()) {
          if (p->value.device() != gpu()) throw std::runtime_error(p->name + " is not on cuda:0");
          Parameter meta = *p;
          meta.value = meta.grad = Tensor();
          out.slices.push_back(meta);
          out.values.push_back(p->value.to_device(Device::cpu()).to_vector());
        }
      } catch (const std::exception& e) {
        out.error = e.what();
        world.member(r).abort(e.what());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return members;
}

struct Whole {
  std::shared_ptr<Model> model;
  std::vector<float> losses;
};

Whole train_on_cpu(const GpuRun& run, const TrainerOptions& o) {
  Whole w{run.model(), {}};
  std::unique_ptr<Trainer> trainer = make_trainer(w.model, TrainingConfig{o});
  for (const Batch& b : run.data) w.losses.push_back(static_cast<float>(trainer->step(b).loss));
  return w;
}

// Every member's losses within 1e-4 (relative) of the whole CPU run, and every element of its slices
// within 1e-4 of the whole model's element at its place.
void expect_near_cpu(const std::vector<Member>& members, const Whole& whole) {
  for (size_t r = 0; r < members.size(); ++r) {
    const Member& m = members[r];
    ASSERT_EQ(m.error, "") << "member " << r;
    ASSERT_EQ(m.losses.size(), whole.losses.size());
    for (size_t s = 0; s < m.losses.size(); ++s)
      EXPECT_NEAR(m.losses[s], whole.losses[s], 1e-4 * std::max(1.0f, std::fabs(whole.losses[s])))
          << "member " << r << ", step " << s;
    const std::vector<Parameter*> params = whole.model->parameters();
    ASSERT_EQ(m.slices.size(), params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const float* want = params[i]->value.f32();
      int reported = 0;
      for (size_t e = 0; e < m.values[i].size() && reported < 5; ++e) {
        const float w = want[full_tensor_index(m.slices[i], static_cast<int64_t>(e))];
        if (std::fabs(m.values[i][e] - w) > 1e-4f * std::max(1.0f, std::fabs(w))) {
          ADD_FAILURE() << "member " << r << ": " << m.slices[i].name << "[" << e << "] = " << m.values[i][e]
                        << ", the whole model's " << w;
          ++reported;
        }
      }
    }
  }
}

void expect_run_near_cpu(const GpuRun& run) {
  const TrainerOptions o = sgd();
  expect_near_cpu(run_on_gpu(run, o), train_on_cpu(run, o));
}

TEST(TensorParallelGpu, ColumnAndRowLinearsStayNearTheWholeCpuModel) {
  PF_SKIP_WITHOUT_GPU();
  for (const char* reduction : {"allreduce", "deterministic"}) {
    SCOPED_TRACE(reduction);
    GpuRun run{mlp, batches()};
    run.reduction = reduction;
    expect_run_near_cpu(run);
  }
}

TEST(TensorParallelGpu, GptWithVocabularyParallelEmbeddingAndLoss) {
  PF_SKIP_WITHOUT_GPU();
  for (int T : {2, 4}) {
    for (const char* reduction : {"allreduce", "deterministic"}) {
      SCOPED_TRACE(std::string("T ") + std::to_string(T) + ", " + reduction);
      GpuRun run{gpt, gpt_batches()};
      run.T = T;
      run.reduction = reduction;
      expect_run_near_cpu(run);
    }
  }
}

TEST(TensorParallelGpu, GptWithSequenceParallelism) {
  PF_SKIP_WITHOUT_GPU();
  for (const char* reduction : {"allreduce", "deterministic"}) {
    SCOPED_TRACE(reduction);
    GpuRun run{gpt, gpt_batches()};
    run.reduction = reduction;
    run.sequence_parallel = true;
    expect_run_near_cpu(run);
  }
}

TEST(TensorParallelGpu, LlamaWithAndWithoutSequenceParallelism) {
  PF_SKIP_WITHOUT_GPU();
  for (bool sp : {false, true}) {
    SCOPED_TRACE(sp ? "sequence parallel" : "tensor parallel");
    GpuRun run{llama24, gpt_batches()};
    run.sequence_parallel = sp;
    expect_run_near_cpu(run);
  }
}

// The deterministic mode on the device: the same bits from run to run.
TEST(TensorParallelGpu, DeterministicIsReproducible) {
  PF_SKIP_WITHOUT_GPU();
  GpuRun run{gpt, gpt_batches()};
  run.reduction = "deterministic";
  run.sequence_parallel = true;
  const std::vector<Member> a = run_on_gpu(run, sgd()), b = run_on_gpu(run, sgd());
  for (size_t r = 0; r < a.size(); ++r) {
    ASSERT_EQ(a[r].error, "") << "member " << r;
    ASSERT_EQ(b[r].error, "") << "member " << r;
    EXPECT_EQ(a[r].losses, b[r].losses) << "member " << r;
    EXPECT_EQ(a[r].values, b[r].values) << "member " << r;
  }
}

// A checkpoint the GPU members save (their slices gathered from the device) resumes as the whole
// model in one CPU process, and in GPU members again (each slice taken on the host and copied to
// the device): both equal to the saved members' slices, bit for bit.
TEST(TensorParallelGpu, ACheckpointSavedOnTheDeviceResumesOnTheCpuAndTheDevice) {
  PF_SKIP_WITHOUT_GPU();
  const std::string path = ::testing::TempDir() + "/tensor_parallel_gpu.ckpt";
  std::remove(path.c_str());
  GpuRun run{gpt, gpt_batches()};
  run.checkpoint = path;
  const std::vector<Member> members = run_on_gpu(run, sgd());
  std::shared_ptr<Model> whole = gpt();
  std::unique_ptr<Trainer> trainer = make_trainer(whole, TrainingConfig{sgd()});
  load_trainer_checkpoint(*trainer, path);
  GpuRun again{gpt, {}};
  again.resume = path;
  const std::vector<Member> resumed = run_on_gpu(again, sgd());
  for (size_t r = 0; r < members.size(); ++r) {
    ASSERT_EQ(members[r].error, "") << "member " << r;
    ASSERT_EQ(resumed[r].error, "") << "member " << r;
    EXPECT_EQ(resumed[r].values, members[r].values) << "member " << r;
    const std::vector<Parameter*> params = whole->parameters();
    ASSERT_EQ(members[r].slices.size(), params.size());
    for (size_t i = 0; i < params.size(); ++i)
      for (size_t e = 0; e < members[r].values[i].size(); ++e)
        ASSERT_EQ(members[r].values[i][e],
                  params[i]->value.f32()[full_tensor_index(members[r].slices[i], static_cast<int64_t>(e))])
            << "member " << r << ": " << members[r].slices[i].name << "[" << e << "]";
  }
  std::remove(path.c_str());
}

}  // namespace
}  // namespace pf
