#include "tools/cli/predict_command.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/gpu_model/gpu_system.h"
#include "tools/cli/cli.h"
#include "tools/cli/train_setup.h"

namespace pf::cli {
namespace {

// A file in the presets' format when it looks like a path (a '/' or ".json"), else a preset's name
// (an unknown one: the error with the closest name).
gpu::GpuSystem system_of(const std::string& gpu_option) {
  if (gpu_option.find('/') == std::string::npos && gpu_option.find(".json") == std::string::npos)
    return gpu::gpu_preset(gpu_option);
  return gpu::gpu_system_from_json(read_json_file(gpu_option, "--gpu"), gpu_option);
}

double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

}  // namespace

CLI::App* add_predict_command(CLI::App& app, PredictArgs& a) {
  CLI::App* cmd = app.add_subcommand(
      "predict", "predict the step time, TFLOP/s and memory per GPU of a GPT model at T x P x D on a GPU cluster");
  cmd->add_option("--gpu", a.gpu, "a100-40gb, a100-80gb, h100-sxm, h200, or a JSON file in the presets' format")
      ->required();
  cmd->add_option("--gpus", a.gpus, "GPUs in all: T x P x D")->check(CLI::Range(1, 1 << 20))->required();
  cmd->add_option("--tensor-parallel", a.tensor, "tensor-parallel degree T (divides --heads)")
      ->check(CLI::Range(1, 1 << 16))
      ->capture_default_str();
  cmd->add_option("--stages", a.stages, "pipeline degree P")->check(CLI::Range(1, 1 << 16))->capture_default_str();
  cmd->add_option("--data-parallel", a.data, "data-parallel degree D")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  cmd->add_option("--chunks", a.chunks, "model chunks per pipeline rank v (interleaved schedules)")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--schedule", a.schedule, "a synchronous schedule (default: 1f1b, or interleaved-1f1b with --chunks > 1)");
  cmd->add_option("--global-batch", a.global_batch, "sequences per step, all replicas")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->required();
  cmd->add_option("--micro-batch", a.micro_batch, "sequences per micro-batch")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  cmd->add_option("--recompute", a.recompute, "activation recompute")
      ->check(CLI::IsMember({"none", "selective", "full"}))
      ->capture_default_str();
  cmd->add_flag("--sequence-parallel", a.sequence_parallel, "split the norm and dropout regions along the sequence");
  cmd->add_option("--precision", a.precision, "bf16 or fp16")->check(CLI::IsMember({"bf16", "fp16"}))->capture_default_str();
  cmd->add_option("--attention", a.attention, "flash (fused kernels) or unfused (Megatron-LM 2021-22's)")
      ->check(CLI::IsMember({"flash", "unfused"}))
      ->capture_default_str();
  cmd->add_option("--layers", a.model.layers, "transformer layers l")->check(CLI::Range(1, 1 << 16))->required();
  cmd->add_option("--d-model", a.model.d_model, "hidden size h")->check(CLI::Range(1, 1 << 20))->required();
  cmd->add_option("--heads", a.model.heads, "attention heads a")->check(CLI::Range(1, 1 << 16))->required();
  cmd->add_option("--vocab", a.model.vocab, "vocabulary V")->check(CLI::Range(1, 1 << 24))->required();
  cmd->add_option("--seq-len", a.model.seq_len, "sequence length s")->check(CLI::Range(1, 1 << 24))->required();
  cmd->add_flag("--json", a.json, "print one JSON object on stdout");
  cmd->add_option("--chakra", a.chakra, "write the step's Chakra execution traces here: pipeforge.<rank>.et per GPU");
  return cmd;
}

int run_predict(const PredictArgs& a) {
  gpu::StepRequest request;
  gpu::StepPrediction p;
  try {
    PF_CHECK_ARG(a.gpus == a.tensor * a.stages * a.data, "--gpus ", a.gpus, " is not --tensor-parallel x --stages x "
                 "--data-parallel = ", a.tensor, " x ", a.stages, " x ", a.data, " = ", a.tensor * a.stages * a.data);
    request.system = system_of(a.gpu);
    request.model = a.model;
    request.grid = {a.tensor, a.stages, a.data};
    request.chunks = a.chunks;
    request.schedule = a.schedule;
    request.global_batch = a.global_batch;
    request.micro_batch = a.micro_batch;
    request.recompute = gpu::parse_recompute(a.recompute, "--recompute");
    request.sequence_parallel = a.sequence_parallel;
    request.precision = gpu::parse_precision(a.precision, "--precision");
    request.attention = gpu::parse_attention(a.attention, "--attention");
    p = gpu::predict_step(request);
  } catch (const Error& e) {
    if (e.code() != ErrorCode::kInvalidArgument) throw;
    std::cerr << "pipeforge predict: " << e.what() << "\n";
    return kExitUsage;
  }
  int traces = 0;
  if (!a.chakra.empty()) traces = gpu::write_step_traces(request, p, a.chakra, "pipeforge");
  if (a.json) {
    nlohmann::json out = gpu::prediction_to_json(request, p);
    if (!a.chakra.empty()) out["chakra"] = {{"dir", a.chakra}, {"files", traces}};
    std::cout << out.dump() << std::endl;
    return kExitOk;
  }
  std::printf("%s: %d GPUs, T=%d P=%d D=%d, %s v=%d, m=%d micro-batches of %lld, recompute %s%s, %s, %s attention\n",
              request.system.name.c_str(), request.grid.size(), a.tensor, a.stages, a.data, p.schedule.c_str(),
              p.chunks, p.micro_batches, static_cast<long long>(a.micro_batch), a.recompute.c_str(),
              a.sequence_parallel ? ", sequence parallel" : "", a.precision.c_str(), a.attention.c_str());
  std::printf("  step            %10.3f s  (pipeline %.3f, data-parallel all-reduce %.3f, embedding %.3f, optimizer %.3f)\n",
              p.step_seconds, p.pipeline_seconds, p.data_parallel_seconds, p.embedding_sync_seconds,
              p.optimizer_seconds);
  std::printf("  per GPU         %10.1f TFLOP/s  (MFU %.1f%%), bubble %.1f%%\n", p.tflops_per_gpu,
              100 * p.model_flops_utilization, 100 * p.bubble_rate);
  std::printf("  memory per GPU  %10.1f GiB  (parameters, gradients, optimizer %.1f + activations %.1f) of %.1f usable: %s\n",
              gib(p.memory_per_gpu_bytes), gib(p.parameter_state_bytes), gib(p.activation_bytes),
              gib(p.usable_memory_bytes), p.fits ? "fits" : "DOES NOT FIT");
  if (traces > 0)
    std::printf("  Chakra traces   %s/pipeforge.<rank>.et, %d files\n", a.chakra.c_str(), traces);
  return kExitOk;
}

}  // namespace pf::cli
