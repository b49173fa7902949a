// A named trainable tensor with its gradient and the rule that initialises it from a seed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/tensor/tensor.h"
#include "runtime/tensor_parallel/group.h"

namespace pf {

struct InitSpec {
  enum class Kind { kZeros, kOnes, kNormal } kind = Kind::kZeros;
  float stddev = 0.0f;  // kNormal only

  static InitSpec zeros() { return {Kind::kZeros, 0.0f}; }
  static InitSpec ones() { return {Kind::kOnes, 0.0f}; }
  static InitSpec normal(float stddev) { return {Kind::kNormal, stddev}; }
};

// Tensor parallelism: the parameter holds part `part` of `parts` equal slices of a tensor of shape
// `full` along dimension `dim`. dim -1: the whole tensor (on every member of a tensor-parallel
// group, a replica). Initialisation draws each element from its place in the full tensor, so the
// slices of a split model hold exactly the values of the unsplit one.
// `blocks`: the full dimension as consecutive blocks of these extents (e.g. attention's q | k | v
// rows), each split into `parts` slices: the parameter holds slice `part` of every block, in block
// order. Empty: one block, the whole dimension.
struct ParameterShard {
  int dim = -1;
  int part = 0;
  int parts = 1;
  Shape full;
  std::vector<int64_t> blocks;
  bool split() const { return dim >= 0 && parts > 1; }
};

struct Parameter {
  std::string name;  // globally unique, e.g. "blocks.0.attn.qkv.weight"
  Shape shape;       // of value and grad (also while they are not allocated)
  Tensor value;      // f32, charged to kParameters; undefined while not allocated
  Tensor grad;       // f32, charged to kGradients; accumulated by backward_weight
  InitSpec init;
  // A tied copy (weight tying, e.g. a head tied to the token embedding on another stage): the name
  // of the parameter it copies, its primary; "" for any other parameter. A copy holds the primary's
  // values (initialised from the primary's stream, runtime/models/init.h) and, before the norm and
  // the update, the same gradient: their sum (exec::TiedGradients, SequentialTrainer). So both stay
  // bitwise equal, and the global gradient norm counts the pair once (grad_squared_norm is 0 for a
  // copy).
  std::string tied_to;
  ParameterShard shard;

  bool allocated() const { return value.defined(); }
};

// Allocates value and grad (zeroed) for a parameter of the given shape. Every dimension must be
// in [1, limits::kMaxDimension]; kInvalidArgument naming the parameter otherwise.
Parameter make_parameter(const std::string& name, const Shape& shape, InitSpec init);

// Gives an unallocated parameter (ParameterSizing, DeferParameterAllocation) its zeroed value and
// gradient; a no-op for an allocated one.
void allocate_parameter(Parameter& parameter);
// Drops a parameter's value and gradient (a process that does not hold its stage); allocate_parameter
// brings them back.
void release_parameter(Parameter& parameter);

// Makes `parameter` slice `part` of `parts` of itself along `dim` (Parameter::shard; of each of
// `blocks` when given): its shape's dim-th extent divided by parts (kInvalidArgument naming the
// parameter unless parts divides it, and each block).
// An allocated parameter gets new zeroed tensors of the slice's shape. Once per parameter.
void split_parameter(Parameter& parameter, int dim, int part, int parts, const std::vector<int64_t>& blocks = {});
// The flat index in the full tensor of element `index` of the parameter's slice (index itself for
// a parameter that is not split).
int64_t full_tensor_index(const Parameter& parameter, int64_t index);
// The unsplit tensor's shape (the parameter's own when it is not split).
const Shape& whole_shape(const Parameter& parameter);
// This member's slice of a whole tensor (whole_shape floats) into `slice` (shape floats), and the
// reverse: the slice of member `part` (the parameter's split with that part) put in its place.
void take_slice(const Parameter& parameter, const float* whole, float* slice);
void place_slice(const Parameter& parameter, int part, const float* slice, float* whole);
// The whole tensor of a split parameter (or of a tensor shaped like it, e.g. an optimizer slot) into
// `whole`, from every member's slice over `group`: `slice` is this member's (a collective; `what`
// names it in errors).
void gather_whole(const Parameter& parameter, const float* slice, TensorParallelGroup& group, const std::string& what,
                  float* whole);

// Sequence parallelism: the weight gradients of a layer kept whole on every member that sees only
// the member's steps (LayerNorm, RMSNorm). `accumulate` adds this member's contribution to each of
// `parameters`' gradients into the tensors it is given; with a `group` those are zeroed scratch on
// the gradients' device, summed over the group (TensorParallelGroup::all_reduce_sum: rank order in
// the deterministic mode) and then added to the gradients, so every member adds the same sum;
// without one (null) they are the gradients themselves. `what` names the reduction in errors.
void accumulate_over_sequence(TensorParallelGroup* group, const std::vector<Parameter*>& parameters,
                              const std::function<void(const std::vector<Tensor>&)>& accumulate,
                              const std::string& what);

// While one is alive on this thread, make_parameter allocates nothing: it checks the shape, adds
// the parameter's bytes to this count and returns the parameter with undefined tensors. The model
// builders build a model once under it to size it before allocating anything.
class ParameterSizing {
 public:
  ParameterSizing();
  ~ParameterSizing();
  ParameterSizing(const ParameterSizing&) = delete;
  ParameterSizing& operator=(const ParameterSizing&) = delete;

  int64_t bytes() const { return bytes_; }  // of the values alone (f32), overflow-checked
  int64_t count() const { return count_; }  // parameters made

 private:
  friend Parameter make_parameter(const std::string&, const Shape&, InitSpec);
  ParameterSizing* outer_;
  int64_t bytes_ = 0;
  int64_t count_ = 0;
};

}  // namespace pf
