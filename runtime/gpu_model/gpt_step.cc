#include "runtime/gpu_model/gpt_step.h"

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

#include "runtime/core/error.h"
#include "runtime/gpu_model/chakra_trace.h"
#include "runtime/gpu_model/operator_costs.h"
#include "runtime/schedules/comm_semantics.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/schedule_request.h"
#include "runtime/schedules/simulator.h"
#include "runtime/schedules/validator.h"

namespace pf::gpu {
namespace {

constexpr double kHalf = 2;  // bytes of a bf16/fp16 element

// One transformer layer's costs on one GPU for one micro-batch (docs/PREDICT.md, "A layer").
struct LayerCost {
  double forward = 0;          // compute and the forward's tensor-parallel collectives
  double forward_comm = 0;     // of forward
  double backward_input = 0;   // B: input gradients, the exposed backward collectives, any recompute
  double backward_comm = 0;    // of backward_input
  double backward_weight = 0;  // W: the four weight-gradient GEMMs
  double activation_bytes = 0; // kept from F to B
  double weight_pending_bytes = 0;   // kept from B to W (split schedules): the linears' inputs and output gradients
  double forward_collective_bytes = 0, backward_collective_bytes = 0;  // the [b s, h] tensors its collectives move
  double full_activation_bytes = 0;  // what F keeps without recompute (a recomputed layer's transient)
};

struct Context {
  const StepRequest& r;
  const GpuSpec& gpu;
  double b, s, h, a, T, bs, vocab_padded;
  bool sp;
  double token_rows;      // rows of the replicated regions: bs, or bs / T with sequence parallelism
  LinkSpec tp_link;
};

double gemm(const Context& c, double m, double n, double k, double batch = 1) {
  return gemm_seconds(c.gpu, c.r.precision, m, n, k, batch);
}
double stream(const Context& c, double bytes) { return streaming_seconds(c.gpu, bytes); }

// The collective that follows a row-parallel linear (forward) or precedes a column-parallel one's
// input gradient: an all-reduce of the [b s, h] activation, or with sequence parallelism a
// reduce-scatter (the same for an all-gather).
double tp_reduce(const Context& c) {
  const double bytes = c.bs * c.h * kHalf;
  return c.sp ? allgather_seconds(c.tp_link, static_cast<int>(c.T), bytes)
              : allreduce_seconds(c.tp_link, static_cast<int>(c.T), bytes);
}
double tp_gather(const Context& c) {
  return c.sp ? allgather_seconds(c.tp_link, static_cast<int>(c.T), c.bs * c.h * kHalf) : 0.0;
}

// Attention over this GPU's heads: forward, and backward.
double attention_forward(const Context& c) {
  const double heads = c.b * c.a / c.T, dh = c.h / c.a;
  if (c.r.attention == Attention::kFlash) return flash_attention_seconds(c.gpu, c.r.precision, heads, c.s, dh, false);
  const double scores = heads * c.s * c.s;
  return gemm(c, c.s, c.s, dh, heads)                   // Q K^T
         + stream(c, scores * kHalf * 2)                 // scale, mask, softmax: read, write
         + stream(c, scores * (kHalf * 2 + 1))           // dropout: read, write, mask
         + gemm(c, c.s, dh, c.s, heads);                 // P V
}

double attention_backward(const Context& c) {
  const double heads = c.b * c.a / c.T, dh = c.h / c.a;
  if (c.r.attention == Attention::kFlash) return flash_attention_seconds(c.gpu, c.r.precision, heads, c.s, dh, true);
  const double scores = heads * c.s * c.s;
  return gemm(c, c.s, c.s, dh, heads)       // dP = dO V^T
         + gemm(c, c.s, dh, c.s, heads)     // dV = P^T dO
         + stream(c, scores * (kHalf * 2 + 1))  // dropout backward
         + stream(c, scores * kHalf * 3)        // softmax backward: read P, dP, write dS
         + gemm(c, c.s, dh, c.s, heads)     // dQ = dS K
         + gemm(c, c.s, dh, c.s, heads);    // dK = dS^T Q
}

LayerCost layer_cost(const Context& c) {
  const double h = c.h, T = c.T, bs = c.bs, rows = c.token_rows;
  LayerCost l;
  // Forward: LN, [all-gather], qkv, attention, proj, all-reduce | reduce-scatter, bias-dropout-add,
  // LN, [all-gather], fc1, bias-GeLU, fc2, all-reduce | reduce-scatter, bias-dropout-add.
  const double layer_norm = stream(c, rows * h * kHalf * 2);
  const double dropout_add = stream(c, rows * h * (kHalf * 3 + 1));
  const double gelu = stream(c, bs * 4 * h / T * kHalf * 2);
  const double attention = attention_forward(c);
  const double compute = 2 * layer_norm + gemm(c, bs, 3 * h / T, h) + attention + gemm(c, bs, h, h / T) +
                         2 * dropout_add + gemm(c, bs, 4 * h / T, h) + gelu + gemm(c, bs, h, 4 * h / T);
  l.forward_comm = 2 * tp_gather(c) + 2 * tp_reduce(c);
  const double tensor_bytes = c.T > 1 ? bs * h * kHalf : 0.0;
  l.forward_collective_bytes = (c.sp ? 4 : 2) * tensor_bytes;
  l.backward_collective_bytes = (c.sp ? 6 : 2) * tensor_bytes;
  l.forward = compute + l.forward_comm;

  // W: the weight gradients of qkv, proj, fc1 and fc2.
  const double w_qkv = gemm(c, h, 3 * h / T, bs), w_proj = gemm(c, h / T, h, bs);
  const double w_fc1 = gemm(c, h, 4 * h / T, bs), w_fc2 = gemm(c, 4 * h / T, h, bs);
  l.backward_weight = w_qkv + w_proj + w_fc1 + w_fc2;

  // B: the input gradients. The reduction of dX after qkv and fc1 runs while their weight
  // gradient computes (Megatron's asynchronous all-reduce), so only what outlasts it is exposed;
  // with sequence parallelism the gradient of the output is all-gathered before proj and fc2, and
  // the all-gather of qkv's and fc1's input is redone for their weight gradients (overlapped with
  // their input-gradient GEMMs).
  const double d_qkv = gemm(c, bs, h, 3 * h / T), d_fc1 = gemm(c, bs, h, 4 * h / T);
  const double exposed_reduce = std::max(0.0, tp_reduce(c) - w_fc1) + std::max(0.0, tp_reduce(c) - w_qkv);
  const double exposed_regather = std::max(0.0, tp_gather(c) - d_fc1) + std::max(0.0, tp_gather(c) - d_qkv);
  l.backward_comm = exposed_reduce + exposed_regather + 2 * tp_gather(c);
  const double b_compute = 2 * stream(c, rows * h * (kHalf * 3 + 1))  // dropout-add backward
                           + 2 * stream(c, rows * h * kHalf * 3)      // LN backward
                           + gemm(c, bs, 4 * h / T, h)                // fc2 dX
                           + stream(c, bs * 4 * h / T * kHalf * 3)    // GeLU backward
                           + d_fc1 + gemm(c, bs, h / T, h)            // fc1 dX, proj dX
                           + attention_backward(c) + d_qkv;
  l.backward_input = b_compute + l.backward_comm;

  // Activations (Korthikanti et al. 2022, bytes per layer): s b h (10 + 24/T) outside the
  // attention core, s b h 34/T with sequence parallelism, plus the core's 5 a s^2 b / T when the
  // attention is unfused and not recomputed. Full recompute keeps the layer's input alone.
  const double sbh = c.s * c.b * h;
  const double outside_core = c.sp ? sbh * 34 / T : sbh * (10 + 24 / T);
  const double core = c.r.attention == Attention::kUnfused ? 5 * c.a * c.s * c.s * c.b / T : 0.0;
  l.full_activation_bytes = outside_core + core;
  // W needs each linear's input (qkv's and fc1's sequence-sharded with SP) and output gradient.
  const double gathered = c.sp ? 1 / T : 1;
  l.weight_pending_bytes = kHalf * sbh * ((gathered + 1 / T + gathered + 4 / T) + (3 / T + 1 + 4 / T + 1));
  switch (c.r.recompute) {
    case Recompute::kNone:
      l.activation_bytes = outside_core + core;
      break;
    case Recompute::kSelective:  // the attention core is recomputed before its backward
      l.activation_bytes = outside_core;
      if (c.r.attention == Attention::kUnfused) l.backward_input += attention;
      break;
    case Recompute::kFull:  // the whole forward is rerun before the backward
      l.activation_bytes = 2 * sbh / (c.sp ? T : 1);
      l.backward_input += l.forward;
      l.backward_comm += l.forward_comm;
      l.backward_collective_bytes += l.forward_collective_bytes;
      break;
  }
  return l;
}

// The first stage's embedding and the last stage's head and loss (vocabulary-parallel).
struct EndCost {
  double forward = 0, backward_input = 0, backward_weight = 0, comm = 0, activation_bytes = 0;
  double forward_comm = 0, backward_comm = 0;  // comm's parts in F and in B
};

EndCost embedding_cost(const Context& c) {
  EndCost e;
  e.comm = e.forward_comm = tp_reduce(c);  // the partial lookups summed over the TP group
  e.forward = stream(c, c.bs * c.h * kHalf * 3) + stream(c, c.token_rows * c.h * (kHalf * 2 + 1)) + e.comm;
  e.backward_weight = stream(c, c.bs * c.h * (kHalf + 4));  // scatter-add into the fp32 gradient
  e.activation_bytes = c.token_rows * c.h;                 // the dropout mask
  return e;
}

EndCost head_cost(const Context& c) {
  EndCost e;
  const double logits = c.bs * c.vocab_padded / c.T;
  // Final LN, [all-gather], logits GEMM, the fp32 cross-entropy passes (and its three all-reduces
  // of per-token values).
  const double reductions = 3 * allreduce_seconds(c.tp_link, static_cast<int>(c.T), c.bs * 4);
  e.comm = e.forward_comm = tp_gather(c) + reductions;
  e.forward = stream(c, c.token_rows * c.h * kHalf * 2) + gemm(c, c.bs, c.vocab_padded / c.T, c.h) +
              stream(c, logits * (kHalf + 4 * 4)) + e.comm;
  const double w = gemm(c, c.vocab_padded / c.T, c.h, c.bs);
  const double reduce = std::max(0.0, tp_reduce(c) - w);
  e.backward_input = stream(c, logits * (4 + kHalf)) + gemm(c, c.bs, c.h, c.vocab_padded / c.T) + reduce +
                     tp_gather(c) + stream(c, c.token_rows * c.h * kHalf * 3);
  e.backward_comm = reduce + tp_gather(c);
  e.comm += e.backward_comm;
  e.backward_weight = w;
  e.activation_bytes = logits * 4 + c.token_rows * c.h * kHalf;  // the fp32 softmax, the LN input
  return e;
}

void check_request(const StepRequest& r) {
  const GptShape& m = r.model;
  PF_CHECK_ARG(m.layers >= 1 && m.d_model >= 1 && m.heads >= 1 && m.vocab >= 1 && m.seq_len >= 1,
               "--layers, --d-model, --heads, --vocab and --seq-len must all be >= 1");
  PF_CHECK_ARG(m.d_model % m.heads == 0, "--d-model ", m.d_model, " is not a multiple of --heads ", m.heads);
  PF_CHECK_ARG(r.grid.tensor >= 1 && r.grid.pipeline >= 1 && r.grid.data >= 1, "T, P and D must be >= 1");
  PF_CHECK_ARG(m.heads % r.grid.tensor == 0, "--heads ", m.heads, " is not divisible by --tensor-parallel ",
               r.grid.tensor);
  PF_CHECK_ARG(r.chunks >= 1, "--chunks must be >= 1");
  PF_CHECK_ARG(m.layers >= r.grid.pipeline * r.chunks, "--layers ", m.layers, " is fewer than the ",
               r.grid.pipeline * r.chunks, " stages of P x v = ", r.grid.pipeline, " x ", r.chunks);
  PF_CHECK_ARG(r.micro_batch >= 1, "--micro-batch must be >= 1");
  PF_CHECK_ARG(r.global_batch >= 1 && r.global_batch % (r.micro_batch * r.grid.data) == 0, "--global-batch ",
               r.global_batch, " is not a multiple of --micro-batch x --data-parallel = ", r.micro_batch, " x ",
               r.grid.data);
  PF_CHECK_ARG(!r.sequence_parallel || m.seq_len % r.grid.tensor == 0, "--seq-len ", m.seq_len,
               " is not divisible by --tensor-parallel ", r.grid.tensor, " (--sequence-parallel)");
  PF_CHECK_ARG(r.global_batch / (r.micro_batch * r.grid.data) <= (1 << 16), "more than 65536 micro-batches per step");
}

// Layers per stage: equal shares, the remainder on the stages after the first (which also
// embeds) and before the last (which also runs the head).
std::vector<int> layers_per_stage(int layers, int stages) {
  std::vector<int> counts(static_cast<size_t>(stages), layers / stages);
  int extra = layers % stages;
  for (int s = 1; s < stages && extra > 0; ++s)
    if (s != stages - 1 || stages == 2) ++counts[static_cast<size_t>(s)], --extra;
  for (int s = 0; extra > 0; ++s) ++counts[static_cast<size_t>(s)], --extra;
  return counts;
}

}  // namespace

Recompute parse_recompute(const std::string& text, const std::string& what) {
  if (text == "none") return Recompute::kNone;
  if (text == "selective") return Recompute::kSelective;
  if (text == "full") return Recompute::kFull;
  fail(ErrorCode::kInvalidArgument, what, ": unknown recompute '", text, "' (none, selective or full)");
}

const char* recompute_name(Recompute r) {
  return r == Recompute::kNone ? "none" : r == Recompute::kSelective ? "selective" : "full";
}

Attention parse_attention(const std::string& text, const std::string& what) {
  if (text == "flash") return Attention::kFlash;
  if (text == "unfused") return Attention::kUnfused;
  fail(ErrorCode::kInvalidArgument, what, ": unknown attention '", text, "' (flash or unfused)");
}

const char* attention_name(Attention a) { return a == Attention::kFlash ? "flash" : "unfused"; }

double megatron_flops(const GptShape& m, double batch, bool full_recompute) {
  const double s = m.seq_len, l = m.layers, h = m.d_model, V = m.vocab;
  const double base = batch * s * l * h * h;
  return full_recompute ? 96 * base * (1 + s / (6 * h) + V / (16 * l * h))
                        : 72 * base * (1 + s / (6 * h) + V / (12 * l * h));
}

namespace {

// The stages of one pipeline (S of them) with their costs, and the latency of a pipeline message.
struct BuiltStages {
  LayerCost layer;
  std::vector<StageCost> stages;
  double t_comm = 0;
  double vocab_padded = 0;
};

BuiltStages build_stages(const StepRequest& r, int S) {
  const GptShape& m = r.model;
  const Grid& g = r.grid;
  const int T = g.tensor, P = g.pipeline;
  PF_CHECK_ARG(m.layers >= S, "--layers ", m.layers, " is fewer than the schedule's ", S, " stages");
  BuiltStages out;
  // Megatron pads the vocabulary to a multiple of 128 x T.
  out.vocab_padded = std::ceil(static_cast<double>(m.vocab) / (128.0 * T)) * 128.0 * T;
  Context c{r, r.system.gpu, static_cast<double>(r.micro_batch), static_cast<double>(m.seq_len),
            static_cast<double>(m.d_model), static_cast<double>(m.heads), static_cast<double>(T),
            static_cast<double>(r.micro_batch) * m.seq_len, out.vocab_padded, r.sequence_parallel, 0,
            group_link(r.system, g.tensor_group())};
  c.token_rows = c.sp ? c.bs / T : c.bs;
  out.layer = layer_cost(c);
  const LayerCost& layer = out.layer;
  const EndCost embedding = embedding_cost(c), head = head_cost(c);
  const std::vector<int> counts = layers_per_stage(m.layers, S);

  const double h = m.d_model;
  const double layer_parameters = 12 * h * h / T + 7 * h / T + 6 * h;
  const double embedding_parameters = out.vocab_padded * h / T + static_cast<double>(m.seq_len) * h;
  const double head_parameters = out.vocab_padded * h / T + 2 * h;  // the tied copy and the final LN
  for (int s = 0; s < S; ++s) {
    StageCost st;
    st.layers = counts[static_cast<size_t>(s)];
    st.embedding = s == 0;
    st.head = s == S - 1;
    st.forward_s = st.layers * layer.forward;
    st.backward_input_s = st.layers * layer.backward_input;
    st.backward_weight_s = st.layers * layer.backward_weight;
    st.tensor_parallel_s = st.layers * (layer.forward_comm + layer.backward_comm);
    st.forward_tp_s = st.layers * layer.forward_comm;
    st.backward_tp_s = st.layers * layer.backward_comm;
    st.forward_collective_bytes = st.layers * layer.forward_collective_bytes;
    st.backward_collective_bytes = st.layers * layer.backward_collective_bytes;
    st.parameters = st.layers * layer_parameters;
    st.activation_bytes = st.layers * layer.activation_bytes;
    st.weight_pending_bytes = st.layers * layer.weight_pending_bytes;
    for (const auto& [on, end, params] : {std::tuple{st.embedding, &embedding, embedding_parameters},
                                          std::tuple{st.head, &head, head_parameters}}) {
      if (!on) continue;
      st.forward_s += end->forward;
      st.backward_input_s += end->backward_input;
      st.backward_weight_s += end->backward_weight;
      st.tensor_parallel_s += end->comm;
      st.forward_tp_s += end->forward_comm;
      st.backward_tp_s += end->backward_comm;
      st.parameters += params;
      st.activation_bytes += end->activation_bytes;
    }
    out.stages.push_back(st);
  }
  // A pipeline message: the [b s, h] activation (or its gradient). Each TP rank sends 1/T of it to
  // its peer of the next stage and the receiving group all-gathers it (Megatron's scatter/gather;
  // with sequence parallelism each already holds its 1/T). Stages T x D ranks apart.
  const double message = c.bs * h * kHalf;
  if (P > 1) {
    const LinkSpec& pp_link = group_link(r.system, {g.rank(0, 0, 0), g.rank(0, 0, 1)});
    out.t_comm = p2p_seconds(pp_link, message / T) + (c.sp ? 0.0 : allgather_seconds(c.tp_link, T, message));
  }
  return out;
}

// The schedule's name (the default for the chunks when none is given), checked.
std::string schedule_of(const StepRequest& r) {
  const std::string name = !r.schedule.empty() ? r.schedule : r.chunks > 1 ? "interleaved-1f1b" : "1f1b";
  const sched::ScheduleTraits traits = sched::schedule_traits(name);
  PF_CHECK_ARG(!traits.windowed() && traits.pipelines == 1 && !traits.slices_sequences,
               "--schedule ", name, ": the cluster model times synchronous one-pipeline schedules");
  return name;
}

double grad_bytes_of(const StepRequest& r) { return r.precision == Precision::kBf16 ? 4 : 2; }

// What follows the pipeline: the data-parallel all-reduce of `parameters` (a rank's), the tied
// embedding's gradient, the optimizer step.
struct AfterPipeline {
  double data_parallel = 0, embedding = 0, optimizer = 0;
  double total() const { return data_parallel + embedding + optimizer; }
};

AfterPipeline after_pipeline(const StepRequest& r, double parameters, double vocab_padded) {
  const Grid& g = r.grid;
  const double grad_bytes = grad_bytes_of(r);  // bf16 reduces fp32 main gradients
  AfterPipeline a;
  a.data_parallel = allreduce_seconds(group_link(r.system, g.data_group()), g.data, parameters * grad_bytes);
  if (g.pipeline > 1)
    a.embedding = allreduce_seconds(group_link(r.system, {g.rank(0, 0, 0), g.rank(0, 0, g.pipeline - 1)}), 2,
                                    vocab_padded * r.model.d_model / g.tensor * grad_bytes);
  // The mixed-precision optimizer step, pass by pass over the rank's parameters (bytes read and
  // written per parameter): unscale the gradients and look for inf/NaN (2 x grad), their norm
  // (grad), clip (2 x grad), Adam on the fp32 master weights (read weight, gradient, m, v; write
  // weight, m, v: 24 + grad), the half-precision copy (4 + 2), zero the gradients (grad).
  const double bytes_per_parameter = 2 * grad_bytes + grad_bytes + 2 * grad_bytes + (24 + grad_bytes) +
                                     (4 + kHalf) + grad_bytes;
  a.optimizer = 6 * r.system.gpu.kernel_overhead_s + streaming_seconds(r.system.gpu, parameters * bytes_per_parameter);
  return a;
}

// A GPU at slowest_gpu_speed slows its tensor-parallel group and so its stage: the busiest
// stage's compute (F, B, W) divided by the speed.
void slow_down_one_stage(const StepRequest& r, BuiltStages* built) {
  if (r.slowest_gpu_speed >= 1) return;
  StageCost* busiest = &built->stages.front();
  for (StageCost& st : built->stages)
    if (st.forward_s + st.backward_input_s + st.backward_weight_s >
        busiest->forward_s + busiest->backward_input_s + busiest->backward_weight_s)
      busiest = &st;
  busiest->forward_s /= r.slowest_gpu_speed;
  busiest->backward_input_s /= r.slowest_gpu_speed;
  busiest->backward_weight_s /= r.slowest_gpu_speed;
}

// Stages per pipeline: P x v (the V schedules: 2 P).
int stage_count(const StepRequest& r) {
  const sched::ScheduleTraits traits = sched::schedule_traits(schedule_of(r));
  const int chunks = traits.chunks == sched::ChunkRule::kTwo ? 2 : traits.chunks == sched::ChunkRule::kAny ? r.chunks : 1;
  return r.grid.pipeline * chunks;
}

}  // namespace

StepBounds step_bounds(const StepRequest& r) {
  check_request(r);
  const int P = r.grid.pipeline;
  BuiltStages built = build_stages(r, stage_count(r));
  slow_down_one_stage(r, &built);
  const double m = static_cast<double>(r.global_batch / (r.micro_batch * r.grid.data));
  double work = 0, parameters = 0;
  for (const StageCost& st : built.stages) {
    work += st.forward_s + st.backward_input_s + st.backward_weight_s;
    parameters += st.parameters;
  }
  StepBounds bounds;
  // Some rank does at least the average rank's work, and holds at least the average parameters.
  bounds.step_seconds = m * work / P + after_pipeline(r, parameters / P, built.vocab_padded).total();
  // Rank 0 holds stage 0 (every placement) and at least one micro-batch of its activations.
  const StageCost& first = built.stages.front();
  bounds.memory_per_gpu_bytes = first.parameters * (kHalf + grad_bytes_of(r) + 12) + first.activation_bytes;
  return bounds;
}

StepPrediction predict_step(const StepRequest& r) {
  check_request(r);
  const GptShape& m = r.model;
  const Grid& g = r.grid;
  const int P = g.pipeline, D = g.data;
  StepPrediction out;
  out.chunks = r.chunks;
  out.micro_batches = static_cast<int>(r.global_batch / (r.micro_batch * D));
  out.schedule = schedule_of(r);
  sched::ScheduleRequest sr;
  sr.name = out.schedule;
  sr.ranks = P;
  sr.micro_batches = out.micro_batches;
  sr.chunks = r.chunks;
  const sched::Schedule schedule = sched::make_schedule(sr);
  const int S = schedule.num_stages();
  BuiltStages built = build_stages(r, S);
  slow_down_one_stage(r, &built);
  const LayerCost& layer = built.layer;
  out.stages = built.stages;
  sched::CostModel cm;
  for (const StageCost& st : out.stages) {
    cm.t_f.push_back(st.forward_s);
    cm.t_b.push_back(st.backward_input_s);
    cm.t_w.push_back(st.backward_weight_s);
    cm.m_b.push_back(st.activation_bytes);
    cm.m_w.push_back(st.weight_pending_bytes);
  }
  cm.t_comm = built.t_comm;
  sched::SimulationOptions so;
  so.comm = sched::communication_semantics(schedule);
  const sched::SimulationResult sim = sched::simulate(schedule, cm, so);
  out.pipeline_seconds = sim.makespan;
  out.bubble_rate = sim.bubble_rate;

  // Per pipeline rank: its stages' parameters, and the largest rank's gradient all-reduce.
  std::vector<double> rank_parameters(static_cast<size_t>(P), 0.0);
  for (int s = 0; s < S; ++s)
    rank_parameters[static_cast<size_t>(schedule.placement.rank_of(s))] += out.stages[static_cast<size_t>(s)].parameters;
  const double most_parameters = *std::max_element(rank_parameters.begin(), rank_parameters.end());
  const double grad_bytes = grad_bytes_of(r);
  const AfterPipeline after = after_pipeline(r, most_parameters, built.vocab_padded);
  out.data_parallel_seconds = after.data_parallel;
  out.embedding_sync_seconds = after.embedding;
  out.optimizer_seconds = after.optimizer;
  out.step_seconds = out.pipeline_seconds + out.data_parallel_seconds + out.embedding_sync_seconds +
                     out.optimizer_seconds;

  const double gpus = g.size();
  out.flops_per_step = megatron_flops(m, static_cast<double>(r.global_batch), r.recompute == Recompute::kFull);
  out.tflops_per_gpu = out.flops_per_step / (out.step_seconds * gpus) / 1e12;
  out.model_flops_utilization = megatron_flops(m, static_cast<double>(r.global_batch), false) /
                                (out.step_seconds * gpus * r.system.gpu.peak(r.precision));

  // Memory: the rank with the largest parameters plus activations.
  const double transient = r.recompute == Recompute::kFull ? layer.full_activation_bytes : 0.0;
  for (int rank = 0; rank < P; ++rank) {
    const double state = rank_parameters[static_cast<size_t>(rank)] * (kHalf + grad_bytes + 12);
    const double activations = sim.peak_activation_bytes[static_cast<size_t>(rank)] + transient;
    if (state + activations > out.memory_per_gpu_bytes) {
      out.memory_per_gpu_bytes = state + activations;
      out.parameter_state_bytes = state;
      out.activation_bytes = activations;
    }
  }
  out.usable_memory_bytes = static_cast<double>(r.system.usable_memory_bytes());
  out.fits = out.memory_per_gpu_bytes <= out.usable_memory_bytes;
  return out;
}

int write_step_traces(const StepRequest& r, const StepPrediction& p, const std::string& dir,
                      const std::string& prefix) {
  sched::ScheduleRequest sr;
  sr.name = p.schedule;
  sr.ranks = r.grid.pipeline;
  sr.micro_batches = p.micro_batches;
  sr.chunks = r.chunks;
  const sched::Schedule schedule = sched::make_schedule(sr);
  TraceCosts costs;
  for (const StageCost& st : p.stages) {
    costs.forward_s.push_back(st.forward_s - st.forward_tp_s);
    costs.backward_input_s.push_back(st.backward_input_s - st.backward_tp_s);
    costs.backward_weight_s.push_back(st.backward_weight_s);
    costs.forward_collective_bytes.push_back(st.forward_collective_bytes);
    costs.backward_collective_bytes.push_back(st.backward_collective_bytes);
  }
  costs.message_bytes = static_cast<double>(r.micro_batch) * r.model.seq_len * r.model.d_model * kHalf / r.grid.tensor;
  costs.gradient_bytes.assign(static_cast<size_t>(r.grid.pipeline), 0.0);
  for (int s = 0; s < schedule.num_stages(); ++s)
    costs.gradient_bytes[static_cast<size_t>(schedule.placement.rank_of(s))] +=
        p.stages[static_cast<size_t>(s)].parameters * grad_bytes_of(r);
  costs.optimizer_s = p.optimizer_seconds;
  return write_chakra_traces(schedule, r.grid, costs, dir, prefix);
}

nlohmann::json prediction_to_json(const StepRequest& r, const StepPrediction& p) {
  nlohmann::json stages = nlohmann::json::array();
  for (const StageCost& s : p.stages)
    stages.push_back({{"layers", s.layers},
                      {"embedding", s.embedding},
                      {"head", s.head},
                      {"forward_seconds", s.forward_s},
                      {"backward_input_seconds", s.backward_input_s},
                      {"backward_weight_seconds", s.backward_weight_s},
                      {"tensor_parallel_seconds", s.tensor_parallel_s},
                      {"parameters_per_gpu", s.parameters},
                      {"activation_bytes_per_micro_batch", s.activation_bytes}});
  return {{"gpu", r.system.name},
          {"gpus", r.grid.size()},
          {"tensor_parallel", r.grid.tensor},
          {"stages", r.grid.pipeline},
          {"data_parallel", r.grid.data},
          {"chunks", p.chunks},
          {"schedule", p.schedule},
          {"global_batch", r.global_batch},
          {"micro_batch", r.micro_batch},
          {"micro_batches", p.micro_batches},
          {"recompute", recompute_name(r.recompute)},
          {"sequence_parallel", r.sequence_parallel},
          {"precision", precision_name(r.precision)},
          {"attention", attention_name(r.attention)},
          {"model",
           {{"layers", r.model.layers},
            {"d_model", r.model.d_model},
            {"heads", r.model.heads},
            {"vocab", r.model.vocab},
            {"seq_len", r.model.seq_len}}},
          {"step_seconds", p.step_seconds},
          {"pipeline_seconds", p.pipeline_seconds},
          {"data_parallel_seconds", p.data_parallel_seconds},
          {"embedding_sync_seconds", p.embedding_sync_seconds},
          {"optimizer_seconds", p.optimizer_seconds},
          {"bubble_rate", p.bubble_rate},
          {"flops_per_step", p.flops_per_step},
          {"tflops_per_gpu", p.tflops_per_gpu},
          {"model_flops_utilization", p.model_flops_utilization},
          {"memory_per_gpu_bytes", p.memory_per_gpu_bytes},
          {"parameter_state_bytes", p.parameter_state_bytes},
          {"activation_bytes", p.activation_bytes},
          {"usable_memory_bytes", p.usable_memory_bytes},
          {"fits", p.fits},
          {"stage_costs", stages}};
}

}  // namespace pf::gpu
