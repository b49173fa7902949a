// The step time and memory of a GPT configuration trained with tensor (T), pipeline (P) and data (D)
// parallelism on a GPU cluster this machine need not have (docs/PREDICT.md). Each pipeline stage's
// forward (F), input-gradient (B) and weight-gradient (W) times are built from the operators of its
// layers (operator_costs.h) and its tensor-parallel collectives (collectives.h); the schedule
// simulator (runtime/schedules/simulator.h) times the pipeline over them; the data-parallel gradient
// all-reduce, the tied embedding's gradient all-reduce and the optimizer step follow it, as in
// Megatron-LM without overlap of the gradient reduction. Memory per GPU: parameters, gradients and
// optimizer state (mixed precision: 2 + 4 + 12 bytes per parameter with bf16, 2 + 2 + 12 with fp16),
// the schedule's in-flight activations (Korthikanti et al.'s per-layer bytes) and the transient
// of a recomputed layer.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "runtime/gpu_model/collectives.h"
#include "runtime/gpu_model/gpu_system.h"

namespace pf::gpu {

struct GptShape {
  int layers = 0;      // l
  int d_model = 0;     // h
  int heads = 0;       // a
  int vocab = 0;       // V
  int seq_len = 0;     // s
};

enum class Recompute { kNone, kSelective, kFull };
Recompute parse_recompute(const std::string& text, const std::string& what);  // none|selective|full
const char* recompute_name(Recompute r);

// kFlash: one fused kernel per direction (FlashAttention, cuDNN); kUnfused: two batched GEMMs
// around a fused scale-mask-softmax and a dropout on the scores, as Megatron-LM ran in 2021-22
// (the published measurements docs/PREDICT.md compares with).
enum class Attention { kFlash, kUnfused };
Attention parse_attention(const std::string& text, const std::string& what);  // flash|unfused
const char* attention_name(Attention a);

struct StepRequest {
  GpuSystem system;
  GptShape model;
  Grid grid;                    // T, P, D; T x P x D GPUs
  int chunks = 1;               // v, model chunks per pipeline rank
  std::string schedule;         // a synchronous schedule; empty: 1f1b (v = 1) or interleaved-1f1b
  int64_t global_batch = 0;     // sequences per step, all replicas
  int64_t micro_batch = 1;      // sequences per micro-batch
  Recompute recompute = Recompute::kNone;
  bool sequence_parallel = false;
  Precision precision = Precision::kBf16;
  Attention attention = Attention::kFlash;
  // The slowest GPU's speed relative to the others (ResiHP's fail-slow GPU; 1: all alike): its
  // tensor-parallel group, and so the busiest pipeline stage, runs that much slower.
  double slowest_gpu_speed = 1;
};

struct StageCost {
  int layers = 0;
  bool embedding = false, head = false;
  double forward_s = 0, backward_input_s = 0, backward_weight_s = 0;
  double tensor_parallel_s = 0;     // of F + B: the exposed tensor-parallel communication
  double forward_tp_s = 0, backward_tp_s = 0;  // of it, in F and in B
  double forward_collective_bytes = 0, backward_collective_bytes = 0;  // what F's and B's collectives move
  double parameters = 0;            // per GPU
  double activation_bytes = 0;      // kept per micro-batch from F until its backward
  double weight_pending_bytes = 0;  // kept per micro-batch from B until W (split schedules)
};

struct StepPrediction {
  std::string schedule;
  int chunks = 1;
  int micro_batches = 0;            // m per pipeline
  double step_seconds = 0;
  double pipeline_seconds = 0;      // the simulated schedule
  double data_parallel_seconds = 0; // gradient all-reduce over D
  double embedding_sync_seconds = 0;// the tied embedding's gradient between the first and last stage
  double optimizer_seconds = 0;
  double bubble_rate = 0;           // the simulated schedule's (makespan - ideal) / makespan
  double flops_per_step = 0;        // SC21's count (96 x ... with full recompute, 72 x ... otherwise)
  double tflops_per_gpu = 0;        // flops_per_step / (step_seconds x GPUs) / 1e12
  double model_flops_utilization = 0;  // the 72 x ... count / (step x GPUs x peak)
  double memory_per_gpu_bytes = 0;  // the largest pipeline rank's
  double parameter_state_bytes = 0; // of it: parameters, gradients, optimizer state
  double activation_bytes = 0;      // of it: in-flight activations and the recompute transient
  double usable_memory_bytes = 0;   // the GPU's memory less its reserve
  bool fits = false;
  std::vector<StageCost> stages;    // one pipeline's, P x v
};

// SC21's FLOPs of one GPT iteration of `batch` sequences: 72 B s l h^2 (1 + s/6h + V/12lh), or with
// full recompute 96 B s l h^2 (1 + s/6h + V/16lh).
double megatron_flops(const GptShape& model, double batch, bool full_recompute);

// kInvalidArgument naming the option at fault (GPUs, heads % T, batch % (micro-batch x D), layers
// < P x v, an unknown or asynchronous schedule, ...).
StepPrediction predict_step(const StepRequest& request);

// Lower bounds of predict_step's step_seconds and memory_per_gpu_bytes without generating or
// simulating the schedule (a rank works at least the average rank's m x (F + B + W) and holds at
// least stage 0 and one micro-batch of its activations): what a search prunes with.
struct StepBounds {
  double step_seconds = 0;
  double memory_per_gpu_bytes = 0;
};
StepBounds step_bounds(const StepRequest& request);

// Writes the Chakra execution traces of `prediction` (predict_step's of `request`; chakra_trace.h):
// one file <prefix>.<rank>.et per GPU under `dir`; returns how many.
int write_step_traces(const StepRequest& request, const StepPrediction& prediction, const std::string& dir,
                      const std::string& prefix);

nlohmann::json prediction_to_json(const StepRequest& request, const StepPrediction& prediction);

}  // namespace pf::gpu
