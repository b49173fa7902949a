// Measured costs of a model, per top-level layer, for the planner: the forward, input-gradient (B)
// and weight-gradient (W) times of one micro-batch, the bytes each pass keeps, and what the
// parameters, gradients and optimizer state take. One profile holds several micro-batch sizes,
// because a candidate's micro-batch rows (batch / (D x m)) decide its layer times. A profile is
// saved as JSON ("pipeforge.profile/1") and read back strictly: every error names the JSON path.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/models/model.h"
#include "runtime/optim/optimizer.h"
#include "runtime/train/batch.h"

namespace pf::plan {

struct LayerCosts {
  std::string name;
  std::string type;
  int64_t parameters = 0;           // elements
  double forward_s = 0;             // F of one micro-batch (the last layer: with the loss)
  double backward_input_s = 0;      // B (the last layer: with the loss's backward)
  double backward_weight_s = 0;     // W
  int64_t activation_bytes = 0;     // kept from F until B (the simulator's m_b), the layer alone
  // Of activation_bytes, what the previous layer's context holds too (the tensor between them,
  // saved by both): a stage of layers [a, b) keeps sum activation_bytes - sum over (a, b) of this.
  int64_t shared_with_previous_bytes = 0;
  int64_t weight_pending_bytes = 0; // kept from B until W (m_w)
  int64_t input_bytes = 0;          // the layer's input: what crosses a stage boundary before it (m_in)
  // A tensor-parallel member's all-reduces in F and in B (tensor_parallel_costs sets them; not
  // saved in profiles, not scaled by the calibration's compute scales).
  double tensor_parallel_forward_s = 0;
  double tensor_parallel_backward_s = 0;
};

// The layers at one micro-batch size.
struct MicroBatchCosts {
  int64_t rows = 0;
  int64_t tokens = 0;  // targets per micro-batch (GPT: rows x seq_len; MLP: rows)
  std::vector<LayerCosts> layers;
};

// How the real runtime differs from the simulation on the machine profiled (calibration.h); the
// identity when not measured.
struct Calibration {
  bool measured = false;
  double sequential_step_overhead_s = 0;  // the sequential trainer: per step, beyond its passes and update
  // The sequential trainer: its passes' and update's scale (measured step / profiled), measured in
  // the same rounds as the pipelined runs, so that a machine busier (or quieter) during the
  // calibration than during the profile shifts both alike. 1: not measured.
  double sequential_compute_scale = 1;
  double compute_scale = 1;               // pipelined: layer times with ranks computing side by side
  // How the runtime's layer time per micro-batch size departs from the profile's beyond
  // compute_scale: per calibrated row count (ascending), the measured busy time over the
  // profiled one there, divided by compute_scale. Small micro-batches profiled one layer at a time
  // come out slower per row than the trainer runs them; this corrects each size by itself.
  // Empty: 1 at every size.
  struct RowsScale {
    int64_t rows = 0;
    double relative = 1;
  };
  std::vector<RowsScale> relative_scale_by_rows;
  double action_overhead_s = 0;           // pipelined: per F, B and W (a fused BW pays it twice)
  double transfer_overhead_s = 0;         // pipelined: per cross-rank activation or gradient, beyond the link
  double step_overhead_s = 0;             // pipelined: per step, beyond the makespan and the update
  // One process per rank (D > 1 under mpirun): the layer times' scale there, fitted from a measured
  // data-parallel step; 0: not measured (compute_scale applies). Both scales are multiplied by
  // relative_scale(rows).
  double process_compute_scale = 0;

  // relative_scale_by_rows at `rows`: linear in log(rows) between the two calibrated sizes around
  // it, the nearest one's outside them, 1 when none was calibrated.
  double relative_scale(int64_t rows) const;
};

// How the model splits over a tensor-parallel group (split_model_for_tensor_parallel's splits:
// transformer and Llama blocks by heads, column / row pairs of linears), per top-level layer; the
// same at every micro-batch size and every T. Empty `degrees`: the model does not split.
// The largest T a profile's degrees go up to (profile_tensor_parallel tries 2 .. this).
inline constexpr int kMaxProfiledTensorParallel = 16;
struct TensorParallelProfile {
  std::vector<int> degrees;               // the T > 1 it splits at, ascending (heads divisible, ...)
  std::vector<int64_t> split_parameters;  // per layer: the elements each member holds 1/T of
  std::vector<int64_t> forward_floats;    // per layer, per token: all-reduced in F (row splits' outputs)
  std::vector<int64_t> backward_floats;   // per layer, per token: in B (column splits' input gradients)
  // What one member of the split model keeps per top-level layer (LayerCosts' byte fields),
  // measured by running the split model's T members (threads of a ThreadWorld) on a sample
  // micro-batch of member_bytes_rows rows, the largest over the members; one entry per degree
  // and, where the model splits by sequence steps, per degree with sequence parallelism.
  // Empty (no sample, or a profile saved before them): the planner keeps a member's activations
  // whole.
  struct MemberBytes {
    int tensor_parallel = 2;
    bool sequence_parallel = false;
    std::vector<int64_t> activation_bytes, shared_with_previous_bytes, weight_pending_bytes, input_bytes;
  };
  int64_t member_bytes_rows = 0;
  std::vector<MemberBytes> member_bytes;
  // The entry of (T, sequence_parallel), or null when it was not measured.
  const MemberBytes* member(int T, bool sequence_parallel) const;
};

struct ModelProfile {
  nlohmann::json model;                    // what was profiled (the CLI's model options), for reports
  std::string optimizer = "adamw";
  int optimizer_state_floats = 2;          // per parameter element (AdamW 2, SGD with momentum 1)
  double update_seconds_per_parameter = 0; // zeroing the gradient plus one optimizer update, per element
  std::vector<MicroBatchCosts> sizes;      // ascending rows
  Calibration calibration;
  // Filled by the front-ends that plan T (`pipeforge plan`: profile_tensor_parallel); empty
  // otherwise, and the planner then searches T = 1 only.
  TensorParallelProfile tensor_parallel;

  int num_layers() const;
  int64_t parameter_elements() const;
  // The costs at `rows`: the measured size when there is one, else the nearest measured size with
  // times and bytes scaled by rows / its rows (kInvalidArgument when the profile is empty).
  MicroBatchCosts at_rows(int64_t rows) const;
};

// Floats of optimizer state per parameter element for `config` (AdamW 2, SGD 1 with momentum, 0 without).
int optimizer_state_floats(const OptimizerConfig& config);

// Runs each top-level layer of `model` on `micro_batch` (one thread, the BLAS threads as set):
// F, B and W timed separately, the median of `repeats` runs, and the bytes of each layer's saved
// context after F and after B. The model's gradients are left modified.
MicroBatchCosts measure_micro_batch(Model& model, const Batch& micro_batch, int repeats);
// One untimed F, B, W pass: only the byte fields of measure_micro_batch's layers (and rows, tokens,
// names, types and the model's own parameter counts). Works on a member of a split model (its
// group's collectives run: every member must call it).
MicroBatchCosts measure_micro_batch_bytes(Model& model, const Batch& micro_batch);

// Seconds per parameter element of zeroing the gradients and one `config` update of every
// parameter of `model` (median of `repeats`). Parameter values change; optimizer state is thrown away.
double measure_update_seconds(Model& model, const OptimizerConfig& config, int repeats);

// The whole profile: measure_micro_batch at each of `rows` (ascending; micro_batch(r) returns a
// micro-batch of r rows) and measure_update_seconds.
ModelProfile profile_model(Model& model, const std::vector<int64_t>& rows,
                           const std::function<Batch(int64_t rows)>& micro_batch, const OptimizerConfig& optimizer,
                           int repeats);

// The profile of a copy of `model` (profiling leaves gradients behind, and the planner's calibration
// trains the copy) at each of `rows` (ascending; each divides batch.rows()), every micro-batch cut
// from the front of `batch`; works on a model whose parameters this process does not all hold.
// *copy, when not null, receives the copy.
ModelProfile profile_model_copy(const Model& model, const Batch& batch, const std::vector<int64_t>& rows,
                                const OptimizerConfig& optimizer, int repeats, std::shared_ptr<Model>* copy = nullptr);

nlohmann::json profile_to_json(const ModelProfile& profile);
// Strict: kInvalidArgument naming `where` and the JSON path of the first bad or unknown field.
ModelProfile profile_from_json(const nlohmann::json& value, const std::string& where);

}  // namespace pf::plan
