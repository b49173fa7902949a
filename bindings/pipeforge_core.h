// The C++ layer that SWIG wraps for every language (bindings/pipeforge.i): one class per C handle
// (Model, Trainer, Schedule, Simulation), value types for configs, options, costs and results,
// Tensor for host data, and LoaderCallback, a director class that Python, Java and Go subclass to
// serve micro-batches.
//
// It is header-only and calls nothing but the C API, so each language's wrapper library compiles it
// in and links libpipeforge.so dynamically: there is one runtime, never a copy per binding.
//
// Errors. Every fallible call takes a trailing `Status* status`.
//   - NULL throws pipeforge::Error. Python and Java pass NULL (their interface files hide the
//     argument) and turn the exception into the language's own.
//   - A Status object records the error instead, and the call returns a default value. Go passes
//     one: it has no exceptions, and a panic must never unwind through C. The Go package turns the
//     Status into an `error`.
// No thread-local "last error" anywhere: the status travels with the call.
//
// Threads: as in the C API, objects are externally synchronised. A LoaderCallback runs on the
// thread that calls Trainer::step_from_loader.
//
// Adding a C API object: a class here that owns its handle in a detail::OwnedHandle member (which
// destroys it, makes the class non-copyable and reports "the <what> is closed"), has one-line close()
// and closed() that forward to it, and takes a Status* on every fallible call (mostly one line each
// through OwnedHandle's call/read/read_string; Schedule and Simulation are the latest example); then
// the per-language layers wrap it (docs/BINDINGS.md, "How it is built").
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "pipeforge.h"

namespace pipeforge {

// ---------------------------------------------------------------------------------------------
// Errors

#ifndef SWIG
class Error : public std::exception {
 public:
  Error(int code, std::string message) : code_(code), message_(std::move(message)) {}
  int code() const { return code_; }
  std::string code_name() const { return pf_code_name(static_cast<pf_code>(code_)); }
  const std::string& message() const { return message_; }
  const char* what() const noexcept override { return message_.c_str(); }

 private:
  int code_;
  std::string message_;
};
#endif  // SWIG

// Where a fallible call reports its error when the caller does not want an exception (Go).
class Status {
 public:
  bool ok() const { return code_ == PF_OK; }
  int code() const { return code_; }
  std::string code_name() const { return pf_code_name(static_cast<pf_code>(code_)); }
  std::string message() const { return message_; }
  void clear() {
    code_ = PF_OK;
    message_.clear();
  }
  void set(int code, std::string message) {
    code_ = code;
    message_ = std::move(message);
  }

 private:
  int code_ = PF_OK;
  std::string message_;
};

#ifndef SWIG
namespace detail {

// Reports an error: throws when `status` is NULL, records it otherwise.
inline void report(Status* status, int code, std::string message) {
  if (status == nullptr) throw Error(code, std::move(message));
  status->set(code, std::move(message));
}

// Consumes a C API status (transferred). Returns true on success.
inline bool ok(pf_status* s, Status* status) {
  if (status != nullptr) status->clear();
  if (s == nullptr) return true;
  const int code = pf_status_code(s);
  std::string message = pf_status_message(s);
  pf_status_destroy(s);
  report(status, code, std::move(message));
  return false;
}

// Runs `body` (which reports through `status`), turning an allocation failure into
// PF_OUT_OF_MEMORY so that nothing but pipeforge::Error leaves a call.
template <typename F>
bool guarded(Status* status, F&& body) {
  if (status != nullptr) status->clear();
  try {
    return body();
  } catch (const std::bad_alloc&) {
    report(status, PF_OUT_OF_MEMORY, "out of memory in the language binding");
    return false;
  }
}

// A zeroed C result struct with its struct_size set, for a C API getter to fill.
template <typename S>
S sized() {
  S s;
  std::memset(&s, 0, sizeof(s));
  s.struct_size = sizeof(s);
  return s;
}

// The C handle a core class owns (Model, Trainer, Schedule, Simulation each hold one as `handle_`):
// destroyed with `Destroy` by close() (idempotent) or the destructor, not copyable (so neither is
// the class), and named `what` in the PF_FAILED_PRECONDITION "the <what> is closed" that calls on
// a closed handle report. The classes keep their own close()/closed(), one line each, so that SWIG
// wraps them on every class without seeing this template.
template <typename T, void (*Destroy)(T*)>
class OwnedHandle {
 public:
  OwnedHandle(T* handle, const char* what) : handle_(handle), what_(what) {}
  OwnedHandle(const OwnedHandle&) = delete;
  OwnedHandle& operator=(const OwnedHandle&) = delete;
  ~OwnedHandle() { close(); }

  void close() {
    Destroy(handle_);
    handle_ = nullptr;
  }
  bool closed() const { return handle_ == nullptr; }
  T* get() const { return handle_; }

  // True while open; otherwise reports PF_FAILED_PRECONDITION "the <what> is closed".
  bool open(Status* status) const {
    if (handle_ != nullptr) return true;
    report(status, PF_FAILED_PRECONDITION, std::string("the ") + what_ + " is closed");
    return false;
  }
  // fn(handle, args...), a C call that returns a pf_status*. True on success; false after
  // reporting (the handle is closed, or the call failed).
  template <typename Fn, typename... Args>
  bool call(Status* status, Fn fn, Args... args) const {
    return open(status) && ok(fn(handle_, args...), status);
  }
  // The value a C getter fn(handle, args..., &out) writes, or Out() after reporting.
  template <typename Out, typename Fn, typename... Args>
  Out read(Status* status, Fn fn, Args... args) const {
    Out out{};
    return call(status, fn, args..., &out) ? out : Out{};
  }
  // The text a C getter fn(handle, args..., &text) points at (it stays the handle's), copied; ""
  // after reporting.
  template <typename Fn, typename... Args>
  std::string read_string(Status* status, Fn fn, Args... args) const {
    const char* text = read<const char*>(status, fn, args...);
    return text != nullptr ? text : std::string();
  }

 private:
  T* handle_;
  const char* what_;
};

// A partitioner's stage count, for its *_into form: 1 .. INT32_MAX (the C API's num_stages).
inline bool check_stage_count(size_t count, Status* status) {
  if (count >= 1 && count <= INT32_MAX) return true;
  report(status, PF_INVALID_ARGUMENT, "stages is " + std::to_string(count) + " (expected >= 1)");
  return false;
}

// A partitioner's vector form (Python, Java) over its *_into form into(out, count, status): the
// layers of `stages` stages, as the int64 every language's array takes; {} after reporting.
template <typename Into>
std::vector<int64_t> stage_counts(int32_t stages, Status* status, Into into) {
  if (stages < 1) {
    report(status, PF_INVALID_ARGUMENT, "stages is " + std::to_string(stages) + " (expected >= 1)");
    return {};
  }
  std::vector<int32_t> counts(static_cast<size_t>(stages));
  into(counts.data(), counts.size(), status);
  if (status != nullptr && !status->ok()) return {};
  return std::vector<int64_t>(counts.begin(), counts.end());
}

}  // namespace detail
#endif  // SWIG

// ---------------------------------------------------------------------------------------------
// Version

// The ABI version of the loaded libpipeforge.so.
inline int library_abi_version() { return static_cast<int>(pf_get_abi_version()); }
// The ABI version of the header this binding was compiled against.
inline int header_abi_version() { return PF_ABI_VERSION; }
inline std::string version() { return pf_get_version_string(); }
inline std::string code_name(int code) { return pf_code_name(static_cast<pf_code>(code)); }

// Every binding calls this when it loads: PF_FAILED_PRECONDITION if the library it found is not the
// one it was compiled for.
inline void check_abi(Status* status) {
  if (status != nullptr) status->clear();
  if (pf_get_abi_version() != PF_ABI_VERSION) {
    detail::report(status, PF_FAILED_PRECONDITION,
                   "libpipeforge.so has ABI version " + std::to_string(pf_get_abi_version()) + " (version " +
                       pf_get_version_string() + ") but this binding was built for ABI version " +
                       std::to_string(PF_ABI_VERSION) + " (version " PF_VERSION_STRING ")");
  }
}

// ---------------------------------------------------------------------------------------------
// Tensors

enum DType { F32 = PF_DTYPE_F32, BF16 = PF_DTYPE_BF16, F16 = PF_DTYPE_F16, I32 = PF_DTYPE_I32 };

// Host data with a dtype and a row-major shape. Either owns a copy (from_floats, from_ints: Java and
// Go, whose arrays cannot outlive a call) or borrows memory kept alive by a keeper (borrow: Python
// buffers, no copy). Copies of a Tensor share the data.
class Tensor {
 public:
  Tensor() = default;

  static Tensor from_floats(const float* data, size_t count, const int64_t* shape, size_t ndim, Status* status) {
    return copy_of(data, count, sizeof(float), F32, shape, ndim, status);
  }
  static Tensor from_ints(const int32_t* data, size_t count, const int64_t* shape, size_t ndim, Status* status) {
    return copy_of(data, count, sizeof(int32_t), I32, shape, ndim, status);
  }
#ifndef SWIG
  // `data` must stay valid while `keeper` lives.
  static Tensor borrow(const void* data, int dtype, std::vector<int64_t> shape, std::shared_ptr<const void> keeper) {
    Tensor t;
    t.data_ = data;
    t.dtype_ = dtype;
    t.shape_ = std::move(shape);
    t.keeper_ = std::move(keeper);
    return t;
  }
#endif  // SWIG

  // False for a default-constructed Tensor (no data set).
  bool defined() const { return keeper_ != nullptr; }
  int dtype() const { return dtype_; }
  size_t ndim() const { return shape_.size(); }
  int64_t dim(size_t i) const { return i < shape_.size() ? shape_[i] : 0; }
  std::vector<int64_t> shape() const { return shape_; }
  int64_t size() const {
    int64_t n = 1;
    for (int64_t d : shape_) n *= d;
    return n;
  }

  // Copy the elements out into `out`, which holds exactly size() of them.
  void copy_floats(float* out, size_t count, Status* status) const { copy_out(out, count, F32, "float32", status); }
  void copy_ints(int32_t* out, size_t count, Status* status) const { copy_out(out, count, I32, "int32", status); }

#ifndef SWIG
  // A borrowed view, valid while this Tensor lives.
  pf_tensor_view view() const {
    pf_tensor_view v;
    std::memset(&v, 0, sizeof(v));
    v.data = data_;
    v.dtype = dtype_;
    v.device_kind = PF_DEVICE_CPU;
    v.device_ordinal = 0;
    v.ndim = static_cast<int32_t>(shape_.size());
    v.shape = shape_.data();
    v.strides = nullptr;
    return v;
  }
#endif  // SWIG

 private:
  static Tensor copy_of(const void* data, size_t count, size_t element_size, int dtype, const int64_t* shape,
                        size_t ndim, Status* status) {
    Tensor t;
    detail::guarded(status, [&] {
      int64_t elements = 1;
      for (size_t i = 0; i < ndim; ++i) {
        if (shape[i] < 0) {
          detail::report(status, PF_INVALID_ARGUMENT, "shape[" + std::to_string(i) + "] is negative");
          return false;
        }
        elements *= shape[i];
      }
      if (static_cast<size_t>(elements) != count) {
        detail::report(status, PF_INVALID_ARGUMENT,
                       "the shape has " + std::to_string(elements) + " elements but the data has " +
                           std::to_string(count));
        return false;
      }
      auto storage = std::make_shared<std::vector<unsigned char>>(count * element_size);
      if (count > 0) std::memcpy(storage->data(), data, count * element_size);
      t.data_ = storage->data();
      t.dtype_ = dtype;
      t.shape_.assign(shape, shape + ndim);
      t.keeper_ = std::move(storage);
      return true;
    });
    return t;
  }

  void copy_out(void* out, size_t count, int dtype, const char* type_name, Status* status) const {
    detail::guarded(status, [&] {
      if (dtype_ != dtype) {
        detail::report(status, PF_INVALID_ARGUMENT, std::string("the tensor does not hold ") + type_name);
        return false;
      }
      if (static_cast<int64_t>(count) != size()) {
        detail::report(status, PF_INVALID_ARGUMENT,
                       "the destination holds " + std::to_string(count) + " elements but the tensor has " +
                           std::to_string(size()));
        return false;
      }
      if (count > 0) std::memcpy(out, data_, count * (dtype == F32 ? sizeof(float) : sizeof(int32_t)));
      return true;
    });
  }

  const void* data_ = nullptr;
  int dtype_ = F32;
  std::vector<int64_t> shape_;
  std::shared_ptr<const void> keeper_;  // owns or pins the data
};

// ---------------------------------------------------------------------------------------------
// Models

// Preset configs; the constructors take the C API's defaults.
struct MlpConfig {
  int64_t input_dim;
  int64_t classes;
  std::string activation;
  std::vector<int64_t> hidden;

  MlpConfig() {
    pf_mlp_config c;
    pf_mlp_config_init(&c);
    input_dim = c.input_dim;
    classes = c.classes;
    activation = c.activation != nullptr ? c.activation : "";
    if (c.hidden != nullptr) hidden.assign(c.hidden, c.hidden + c.num_hidden);
  }
  void set_hidden(const int64_t* values, size_t count) { hidden.assign(values, values + count); }
  size_t num_hidden() const { return hidden.size(); }
  int64_t hidden_width(size_t i) const { return i < hidden.size() ? hidden[i] : 0; }
};

struct GptConfig {
  int64_t vocab, seq_len, d_model, heads, layers, mlp_hidden;

  GptConfig() {
    pf_gpt_config c;
    pf_gpt_config_init(&c);
    vocab = c.vocab;
    seq_len = c.seq_len;
    d_model = c.d_model;
    heads = c.heads;
    layers = c.layers;
    mlp_hidden = c.mlp_hidden;
  }
};

class Model {
 public:
  // Factories return a new Model, or NULL after reporting the error.
  static Model* from_json(const std::string& json, Status* status) {
    pf_model* m = nullptr;
    return detail::ok(pf_model_create_from_json(json.c_str(), &m), status) ? new Model(m) : nullptr;
  }
  // Since 0.17: the model of a Hugging Face Transformers folder's config.json (a Llama or a
  // GPT-2); its weights go in with Trainer::load_hf_weights.
  static Model* from_hf(const std::string& dir, Status* status) {
    pf_model* m = nullptr;
    return detail::ok(pf_model_create_from_hf(dir.c_str(), &m), status) ? new Model(m) : nullptr;
  }
  static Model* mlp(const MlpConfig& config, Status* status) {
    pf_mlp_config c;
    pf_mlp_config_init(&c);
    c.input_dim = config.input_dim;
    c.hidden = config.hidden.data();
    c.num_hidden = config.hidden.size();
    c.classes = config.classes;
    c.activation = config.activation.c_str();
    pf_model* m = nullptr;
    return detail::ok(pf_model_create_mlp(&c, &m), status) ? new Model(m) : nullptr;
  }
  static Model* gpt(const GptConfig& config, Status* status) {
    pf_gpt_config c;
    pf_gpt_config_init(&c);
    c.vocab = config.vocab;
    c.seq_len = config.seq_len;
    c.d_model = config.d_model;
    c.heads = config.heads;
    c.layers = config.layers;
    c.mlp_hidden = config.mlp_hidden;
    pf_model* m = nullptr;
    return detail::ok(pf_model_create_gpt(&c, &m), status) ? new Model(m) : nullptr;
  }

  // Releases the handle (a trainer built on the model keeps it alive); so does the destructor.
  // Later calls fail with PF_FAILED_PRECONDITION. Idempotent.
  void close() { handle_.close(); }
  bool closed() const { return handle_.closed(); }

  std::string to_json(Status* status) { return handle_.read_string(status, pf_model_to_json); }
  int64_t num_parameters(Status* status) const {
    return static_cast<int64_t>(handle_.read<size_t>(status, pf_model_num_parameters));
  }
  int64_t num_parameter_elements(Status* status) const {
    return handle_.read<int64_t>(status, pf_model_num_parameter_elements);
  }
  std::string parameter_name(int64_t index, Status* status) const {
    if (!handle_.open(status)) return {};
    if (index < 0) {
      detail::report(status, PF_INVALID_ARGUMENT, "index is negative");
      return {};
    }
    return handle_.read_string(status, pf_model_parameter_name, static_cast<size_t>(index));
  }

  // The balanced partitioner: layers per stage minimising the slowest of `stages` stages, from
  // each top-level layer's time measured on one micro-batch (pass the result as
  // TrainerOptions::set_layers_per_stage).
  std::vector<int64_t> partition_balanced(const Tensor& inputs, const Tensor& targets, int32_t stages,
                                          Status* status) {
    if (!handle_.open(status)) return {};
    return detail::stage_counts(stages, status, [&](int32_t* out, size_t count, Status* s) {
      partition_balanced_into(inputs, targets, out, count, s);
    });
  }
  // The same into `out`, one entry per stage (Go, which takes no returned vector).
  void partition_balanced_into(const Tensor& inputs, const Tensor& targets, int32_t* out, size_t count,
                               Status* status) {
    if (!handle_.open(status) || !detail::check_stage_count(count, status)) return;
    const pf_tensor_view in = inputs.view(), tg = targets.view();
    detail::ok(pf_model_partition_balanced(handle_.get(), &in, &tg, static_cast<int32_t>(count), out), status);
  }

  // Since 0.10: the split minimising the largest stage's parameter count, from the parameters'
  // shapes only (the command line's default partition; pass it as set_layers_per_stage).
  std::vector<int64_t> partition_by_parameters(int32_t stages, Status* status) {
    if (!handle_.open(status)) return {};
    return detail::stage_counts(stages, status, [&](int32_t* out, size_t count, Status* s) {
      partition_by_parameters_into(out, count, s);
    });
  }
  // The same into `out`, one entry per stage (Go).
  void partition_by_parameters_into(int32_t* out, size_t count, Status* status) {
    if (!handle_.open(status) || !detail::check_stage_count(count, status)) return;
    detail::ok(pf_model_partition_by_parameters(handle_.get(), static_cast<int32_t>(count), out), status);
  }

#ifndef SWIG
  pf_model* handle() const { return handle_.get(); }
#endif

 private:
  explicit Model(pf_model* model) : handle_(model, "model") {}

  detail::OwnedHandle<pf_model, pf_model_destroy> handle_;
};

// ---------------------------------------------------------------------------------------------
// Training

// Trainer options; the constructor takes the C API's defaults. Pipelined training (docs/EXECUTION.md):
// a non-empty `schedule` (a name, e.g. "1f1b", for `ranks` (or its older name `stages`) pipeline
// ranks and `chunks` model chunks per rank) or `schedule_text` (a schedule in the text form) makes
// the trainer run one worker per rank; both empty (the default) is the sequential trainer. The
// parameters are bitwise equal either way. `processes` says whether the ranks are threads or, under
// mpirun, one process each (C API pf_processes). The asynchronous schedules ("pipedream",
// "pipedream-2bw", "spectrain", "pipemare") and the local-learning ones ("ppll", "local-updates")
// leave micro-batches in flight after a step: call Trainer::drain before reading the final
// parameters.
struct TrainerOptions {
  int micro_batches;
  int64_t seed;
  int blas_threads;
  std::string optimizer;  // "adamw" or "sgd"
  float lr, momentum, weight_decay, beta1, beta2, eps, clip_norm;
  std::string schedule;       // a schedule name; "" = none
  std::string schedule_text;  // or a schedule in the text form; "" = none
  int32_t stages;             // pipeline ranks P for a schedule name (older name of `ranks`); default 1
  int32_t chunks;             // model chunks per rank V; default 0: the schedule's own (2 looped or V, else 1)
  double recv_timeout_seconds;  // a rank waiting longer for a peer fails the step; default 60
  std::vector<int64_t> layers_per_stage;  // top-level layers per stage; empty = balanced parameter counts
  // Activation memory of pipelined training (docs/MEMORY.md); the results stay bitwise equal.
  std::string activation_policy;   // "none", "recompute", "offload-host", "offload-file", "selective",
                                   // "balance"; "" = none
  double activation_budget_bytes;  // selective: device-resident activation bytes per rank (> 0)
  std::string offload_dir;         // offload-file (and selective): folder for the files; "" = $TMPDIR or /tmp
  // Where to train (docs/CUDA.md): "cpu", "cuda:N", or for a pipeline one device per rank,
  // comma-separated ("cuda:0,cuda:1"; one entry = every rank); "" = cpu.
  std::string devices;
  // One process per rank and data parallelism (C API 0.3, docs/EXECUTION.md, "Several processes").
  std::string processes;           // "auto" (or ""): one process per rank under mpirun with more
                                   // than one process and a schedule, else threads; "threads";
                                   // "mpi": one process per rank, an error unless launched by mpirun
  int32_t data_parallel;           // D pipeline replicas (mpirun -np D*P); micro_batches is per replica
  std::string gradient_reduction;  // "allreduce" (or "") or "deterministic"
  int32_t ranks;                   // pipeline ranks P for a schedule name; 0 = `stages`
  // Asynchronous schedules (C API 0.4, docs/SCHEDULES.md, "Asynchronous schedules"): the methods'
  // options, in the runtime's terms (0 means 0 here; the C API's -1 sentinels are this layer's
  // business). Setting one to other than its default for another schedule is refused naming both.
  bool vertical_sync;               // pipedream: vertical sync; default false
  int32_t spectrain_version;        // spectrain: 1 (the paper, the default) or 2
  int64_t pipemare_anneal_updates;  // pipemare: updates over which lr anneals (>= 0); default 100; 0 = none
  float pipemare_decay;             // pipemare: decay g of the discrepancy average, in [0, 1); default 0.9
  // Local learning (C API 0.4, docs/SCHEDULES.md, "Local learning"; schedule "ppll" or
  // "local-updates"): the kind of every stage's auxiliary head, "auto" (the default; "" too),
  // "linear", "layernorm-linear" or "mlp". A kind other than "auto" with another schedule is refused
  // naming local_head and the schedule.
  std::string local_head;
  // The learning-rate schedule (C API 0.5, docs/TRAINING.md): "constant" (or ""), "cosine" or
  // "linear", with a linear warm-up of warmup_steps; cosine and linear decay to min_lr over
  // decay_steps after it. StepResult::lr reports each step's rate.
  std::string lr_schedule;
  int64_t warmup_steps;
  int64_t decay_steps;
  double min_lr;
  // Sequence-sliced 1F1B (C API 0.7, docs/SCHEDULES.md, "Sequence-sliced 1F1B"): schedule "seq1f1b"
  // runs each micro-batch as seq_slices slices of its token sequence (a token model whose seq_len
  // it divides; the CPU, threads, one replica, activation policy none); the losses equal 1f1b's
  // within 1e-5 relative. Default 1 (0 means 1 too, as in the C API); anything the runtime cannot
  // slice is refused naming seq_slices.
  int32_t seq_slices;
  // Fail-slow adaptation (C API 0.9, docs/PLANNING.md, "Adapting to a slow rank"): a synchronous
  // schedule's trainer profiles the model on the first step's micro-batch and re-partitions live
  // when a rank stays adapt_threshold times slower than predicted for adapt_patience steps; the
  // results stay bitwise equal to the run without it. Trainer::adaptations_json lists the moves.
  bool adapt;
  double adapt_threshold;  // > 1; default 1.5
  int32_t adapt_patience;  // >= 1; default 3
  // Test and benchmark knobs: pipeline rank slow_rank's compute takes slow_factor times as long.
  int32_t slow_rank;       // -1 (the default): none
  double slow_factor;      // >= 1; default 1

  TrainerOptions() {
    pf_trainer_options o;
    pf_trainer_options_init(&o);
    micro_batches = o.micro_batches;
    seed = static_cast<int64_t>(o.seed);
    blas_threads = o.blas_threads;
    optimizer = o.optimizer == PF_OPTIMIZER_SGD ? "sgd" : "adamw";
    lr = o.lr;
    momentum = o.momentum;
    weight_decay = o.weight_decay;
    beta1 = o.beta1;
    beta2 = o.beta2;
    eps = o.eps;
    clip_norm = o.clip_norm;
    schedule = o.schedule != nullptr ? o.schedule : "";
    schedule_text = o.schedule_text != nullptr ? o.schedule_text : "";
    stages = o.stages;
    chunks = o.chunks;
    recv_timeout_seconds = o.recv_timeout_seconds;
    activation_policy = o.activation_policy != nullptr ? o.activation_policy : "";
    activation_budget_bytes = o.activation_budget_bytes;
    offload_dir = o.offload_dir != nullptr ? o.offload_dir : "";
    devices = o.devices != nullptr ? o.devices : "";
    processes = "auto";
    data_parallel = o.data_parallel;
    gradient_reduction = o.gradient_reduction != nullptr ? o.gradient_reduction : "";
    ranks = o.ranks;
    vertical_sync = o.vertical_sync != 0;
    spectrain_version = o.spectrain_version;
    pipemare_anneal_updates = o.pipemare_anneal_updates;
    pipemare_decay = o.pipemare_decay;
    local_head = o.local_head != nullptr ? o.local_head : "auto";
    lr_schedule = o.lr_schedule != nullptr ? o.lr_schedule : "constant";
    warmup_steps = o.warmup_steps;
    decay_steps = o.decay_steps;
    min_lr = o.min_lr;
    seq_slices = o.seq_slices;
    adapt = o.adapt != 0;
    adapt_threshold = o.adapt_threshold;
    adapt_patience = o.adapt_patience;
    slow_rank = o.slow_rank;
    slow_factor = o.slow_factor;
  }
  // Any option as a key/value entry (C API 0.11, pf_trainer_options.config_entries;
  // docs/CAPABILITIES.md, "Config keys"), e.g. set("partition", "even"): applied after the fields
  // above, so it wins; the runtime checks the key and the value. New options arrive as keys.
  void set(const std::string& key, const std::string& value) {
    config_keys.push_back(key);
    config_values.push_back(value);
  }
  void clear_config() {
    config_keys.clear();
    config_values.clear();
  }
  size_t num_config_entries() const { return config_keys.size(); }
#ifndef SWIG
  std::vector<std::string> config_keys, config_values;
#endif
  // Top-level layers per stage (one entry per stage), instead of the default split.
  void set_layers_per_stage(const int64_t* values, size_t count) { layers_per_stage.assign(values, values + count); }
  // Back to an even split.
  void clear_layers_per_stage() { layers_per_stage.clear(); }
  size_t num_layers_per_stage() const { return layers_per_stage.size(); }
  int64_t layers_in_stage(size_t i) const { return i < layers_per_stage.size() ? layers_per_stage[i] : 0; }
};

// Where a trainer's process stands (pf_trainer_process): its rank in the launch and the launch's
// number of processes; 0 and 1 when the ranks are threads.
struct ProcessInfo {
  int32_t rank = 0, size = 1;
};

struct StepResult {
  double loss = 0, grad_norm = 0;
  int64_t samples = 0, tokens = 0;
  double seconds = 0;
  double lr = 0;           // the learning rate the step used
  double bubble_rate = 0;  // pipelines: the step's measured idle share
};

// A forward-only pass over held-out data (pf_eval_result).
struct EvalResult {
  double loss = 0, accuracy = 0;
  int64_t micro_batches = 0, samples = 0, targets = 0;
};

// The training loop (pf_run_options): `steps` steps with evaluation every eval_every steps,
// a checkpoint into checkpoint_dir every checkpoint_every steps (keeping keep_checkpoints, 0 =
// all) and a JSON Lines metrics log; 0 and "" turn each off.
struct RunOptions {
  int64_t steps = 0;
  int64_t eval_every = 0;
  int32_t eval_micro_batches = 0;  // 0: the trainer's micro_batches
  int64_t checkpoint_every = 0;
  std::string checkpoint_dir;
  int32_t keep_checkpoints = 0;
  std::string metrics_log;
};

// What Trainer::run did (pf_run_result); eval_loss and eval_accuracy are NaN when none ran.
struct RunResult {
  int64_t step = 0, steps_run = 0;
  double loss = 0, eval_loss = 0, eval_accuracy = 0;
  int32_t evaluations = 0, checkpoints = 0;
  bool diverged = false;
  bool stopped = false;         // a StepCallback ended the run early (0.12)
  std::string last_checkpoint;  // "" when none was saved
  std::string divergence;       // with diverged: why (pf_run_result.divergence, 0.13); "" otherwise
};

// What a StepCallback sees after a step (pf_step_report, 0.12).
struct StepInfo {
  int64_t step = 0, steps_run = 0, tokens = 0;
  double loss = 0, lr = 0, seconds = 0;
};

// Watches Trainer::run_watched, subclassed in the language (SWIG director): on_step runs after
// every step but the last, on the thread that called run_watched, and returns true to end the run
// after that step (its checkpoint is written as for the last). The language side catches its own
// exceptions (and Ctrl-C) and returns true, so none crosses into C.
class StepCallback {
 public:
  virtual ~StepCallback() = default;
  virtual bool on_step(const StepInfo& info) = 0;
};

// A built-in data source (pf_builtin_data_options): kind "char_text" (a text file or folder; ""
// = the licence texts), "synthetic", "csv" (path required), since 0.17 "token_file" (path and
// vocab required: a nanoGPT or llm.c token file) or, since 0.18, "cifar10" (path required: a
// CIFAR-10 .bin file or the cifar-10-batches-bin folder).
struct DataOptions {
  std::string kind = "char_text";
  int64_t rows = 8;
  int64_t seed = 0;
  std::string path;
  int64_t seq_len = 64;            // char_text, token_file
  double held_out_fraction = 0;    // char_text, token_file, csv, one cifar10 file: the share held out
  bool held_out = false;           // serve the held-out split
  float feature_scale = 1.0f;      // csv
  int64_t features = 32, classes = 10;  // synthetic
  int64_t vocab = 0;               // token_file: the vocabulary (tokens >= vocab are refused)
};

// What a model for a built-in data source needs: char_text and token_file: vocab_size and seq_len;
// synthetic, csv and cifar10: features and classes.
struct DataInfo {
  int64_t vocab_size = 0, seq_len = 0, features = 0, classes = 0;
};

struct Metrics {
  int64_t step = 0;
  double last_loss = 0, last_grad_norm = 0, tokens_per_second = 0;
  int64_t total_tokens = 0, data_position = 0;
};

// One rank's results (pf_rank_stats): of a simulation (in the cost model's unit) or of a pipelined
// trainer's last step (measured, in microseconds from the step start).
struct RankStats {
  double busy = 0, idle = 0, first_start = 0, finish = 0;
  int64_t peak_activations = 0;
  double peak_activation_bytes = 0;
  double offloaded_bytes = 0;  // bytes its OFFLOADs move off the device per step (the same comes back)
  int64_t recomputes = 0;      // RECOMPUTE actions per step
  bool local = false;          // trainers: this process ran the rank (every rank for threads)

#ifndef SWIG
  static RankStats from_c(const pf_rank_stats& c) {
    RankStats r;
    r.busy = c.busy;
    r.idle = c.idle;
    r.first_start = c.first_start;
    r.finish = c.finish;
    r.peak_activations = c.peak_activations;
    r.peak_activation_bytes = c.peak_activation_bytes;
    r.offloaded_bytes = c.offloaded_bytes;
    r.recomputes = c.recomputes;
    r.local = c.local != 0;
    return r;
  }
#endif  // SWIG
};

// What a data loader fills: the micro-batch's inputs and targets.
class MicroBatch {
 public:
  void set_inputs(const Tensor& inputs) { inputs_ = inputs; }
  void set_targets(const Tensor& targets) { targets_ = targets; }
  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }
  void clear() {
    inputs_ = Tensor();
    targets_ = Tensor();
  }

 private:
  Tensor inputs_, targets_;
};

// A data loader, subclassed in the language (SWIG director). Both methods return "" on success or
// an error message, which fails the step with PF_CALLBACK_ERROR carrying it: the language side
// catches its own exceptions (and Go panics), so none crosses into C. They run on the thread that
// calls Trainer::step_from_loader.
class LoaderCallback {
 public:
  virtual ~LoaderCallback() = default;
  // Fill `batch` with micro-batch number `position` (0, 1, 2, ... across steps).
  virtual std::string next(int64_t position, MicroBatch& batch) = 0;
  // The next call to next() will ask for `position` (after a failed step or a checkpoint load).
  virtual std::string seek(int64_t position) {
    (void)position;
    return {};
  }
};

#ifndef SWIG
namespace detail {

// The pf_data_loader behind a LoaderCallback. The callback is borrowed: the language object that
// implements it is kept alive by the language's Trainer until it is replaced or the trainer closed.
struct LoaderBridge {
  LoaderCallback* callback;
  MicroBatch batch;  // keeps the last micro-batch alive until the next call, as the C API asks

  static pf_status* failure(const std::string& message) {
    return pf_status_create(PF_CALLBACK_ERROR, message.empty() ? "the data loader failed" : message.c_str());
  }

  static pf_status* next(void* user_data, int64_t position, pf_micro_batch* out) {
    auto* self = static_cast<LoaderBridge*>(user_data);
    try {
      self->batch.clear();
      const std::string error = self->callback->next(position, self->batch);
      if (!error.empty()) return failure(error);
      if (!self->batch.inputs().defined() || !self->batch.targets().defined()) {
        return failure("the data loader did not set both inputs and targets");
      }
      out->inputs = self->batch.inputs().view();
      out->targets = self->batch.targets().view();
      return nullptr;
    } catch (const std::exception& e) {
      return failure(e.what());
    } catch (...) {
      return failure("unknown exception in the data loader");
    }
  }

  static pf_status* seek(void* user_data, int64_t position) {
    auto* self = static_cast<LoaderBridge*>(user_data);
    try {
      const std::string error = self->callback->seek(position);
      return error.empty() ? nullptr : failure(error);
    } catch (const std::exception& e) {
      return failure(e.what());
    } catch (...) {
      return failure("unknown exception in the data loader's seek");
    }
  }

  static void destroy(void* user_data) { delete static_cast<LoaderBridge*>(user_data); }
};

// A pf_data_loader over a built-in source; false after reporting the error.
inline bool create_builtin_loader(const DataOptions& options, pf_data_loader* out, int64_t info[2], Status* status) {
  pf_builtin_data_options o;
  pf_builtin_data_options_init(&o);
  if (options.kind == "char_text") {
    o.kind = PF_DATA_CHAR_TEXT;
  } else if (options.kind == "synthetic") {
    o.kind = PF_DATA_SYNTHETIC;
  } else if (options.kind == "csv") {
    o.kind = PF_DATA_CSV;
  } else if (options.kind == "token_file") {
    o.kind = PF_DATA_TOKEN_FILE;
  } else if (options.kind == "cifar10") {
    o.kind = PF_DATA_CIFAR10;
  } else {
    report(status, PF_INVALID_ARGUMENT,
           "data kind is '" + options.kind +
               "' (expected \"char_text\", \"synthetic\", \"csv\", \"token_file\" or \"cifar10\")");
    return false;
  }
  o.rows = options.rows;
  o.seed = static_cast<uint64_t>(options.seed);
  o.path = options.path.empty() ? nullptr : options.path.c_str();
  o.seq_len = options.seq_len;
  o.held_out_fraction = options.held_out_fraction;
  o.held_out = options.held_out ? 1 : 0;
  o.feature_scale = options.feature_scale;
  o.features = options.features;
  o.classes = options.classes;
  o.vocab = options.vocab;
  return ok(pf_data_loader_create_builtin(&o, out, info), status);
}

}  // namespace detail
#endif  // SWIG

// What a model for the built-in data source `options` needs (reads the text or CSV once; maps the
// token file or the CIFAR-10 files).
inline DataInfo builtin_data_info(const DataOptions& options, Status* status) {
  DataInfo info;
  pf_data_loader loader;
  int64_t needs[2] = {0, 0};
  if (!detail::create_builtin_loader(options, &loader, needs, status)) return info;
  loader.destroy(loader.user_data);
  if (options.kind == "char_text" || options.kind == "token_file") {
    info.vocab_size = needs[0];
    info.seq_len = needs[1];
  } else {
    info.features = needs[0];
    info.classes = needs[1];
  }
  return info;
}

#ifndef SWIG
namespace detail {
// The C API's trainer options for `options` (strings point into it; the partition into `layers`,
// which must outlive `o`). False after reporting a value the C struct cannot carry.
// What a pf_trainer_options made by to_c points at; it must outlive the C call.
struct TrainerOptionsStorage {
  std::vector<int32_t> layers;
  std::vector<pf_config_entry> entries;
};

inline bool to_c(const TrainerOptions& options, pf_trainer_options& o, TrainerOptionsStorage& storage,
                 Status* status) {
  std::vector<int32_t>& layers = storage.layers;
  pf_trainer_options_init(&o);
  o.micro_batches = options.micro_batches;
  o.seed = static_cast<uint64_t>(options.seed);
  o.blas_threads = options.blas_threads;
  if (options.optimizer == "adamw") {
    o.optimizer = PF_OPTIMIZER_ADAMW;
  } else if (options.optimizer == "sgd") {
    o.optimizer = PF_OPTIMIZER_SGD;
  } else {
    detail::report(status, PF_INVALID_ARGUMENT,
                   "optimizer is '" + options.optimizer + "' (expected \"adamw\" or \"sgd\")");
    return false;
  }
  o.lr = options.lr;
  o.momentum = options.momentum;
  o.weight_decay = options.weight_decay;
  o.beta1 = options.beta1;
  o.beta2 = options.beta2;
  o.eps = options.eps;
  o.clip_norm = options.clip_norm;
  o.schedule = options.schedule.empty() ? nullptr : options.schedule.c_str();
  o.schedule_text = options.schedule_text.empty() ? nullptr : options.schedule_text.c_str();
  o.stages = options.stages;
  o.chunks = options.chunks;
  o.recv_timeout_seconds = options.recv_timeout_seconds;
  o.activation_policy = options.activation_policy.empty() ? nullptr : options.activation_policy.c_str();
  o.activation_budget_bytes = options.activation_budget_bytes;
  o.offload_dir = options.offload_dir.empty() ? nullptr : options.offload_dir.c_str();
  o.devices = options.devices.empty() ? nullptr : options.devices.c_str();
  if (options.processes.empty() || options.processes == "auto") {
    o.processes = PF_PROCESSES_AUTO;
  } else if (options.processes == "threads") {
    o.processes = PF_PROCESSES_THREADS;
  } else if (options.processes == "mpi") {
    o.processes = PF_PROCESSES_MPI;
  } else {
    detail::report(status, PF_INVALID_ARGUMENT,
                   "processes is '" + options.processes + "' (expected \"auto\", \"threads\" or \"mpi\")");
    return false;
  }
  o.data_parallel = options.data_parallel;
  o.gradient_reduction = options.gradient_reduction.empty() ? nullptr : options.gradient_reduction.c_str();
  o.ranks = options.ranks;
  // The C fields take 0 for the default and -1 for the runtime's 0.
  o.vertical_sync = options.vertical_sync ? 1 : 0;
  o.spectrain_version = options.spectrain_version;
  if (options.pipemare_anneal_updates < 0) {
    detail::report(status, PF_INVALID_ARGUMENT,
                   "pipemare_anneal_updates is " + std::to_string(options.pipemare_anneal_updates) +
                       " (expected >= 0; 0 = no annealing)");
    return false;
  }
  o.pipemare_anneal_updates = options.pipemare_anneal_updates == 0 ? -1 : options.pipemare_anneal_updates;
  if (!(options.pipemare_decay >= 0.0f && options.pipemare_decay < 1.0f)) {
    detail::report(status, PF_INVALID_ARGUMENT,
                   "pipemare_decay is " + std::to_string(options.pipemare_decay) + " (expected [0, 1))");
    return false;
  }
  o.pipemare_decay = options.pipemare_decay == 0.0f ? -1.0f : options.pipemare_decay;
  o.local_head = options.local_head.empty() ? nullptr : options.local_head.c_str();
  o.lr_schedule = options.lr_schedule.empty() ? nullptr : options.lr_schedule.c_str();
  o.warmup_steps = options.warmup_steps;
  o.decay_steps = options.decay_steps;
  o.min_lr = options.min_lr;
  o.seq_slices = options.seq_slices;
  o.adapt = options.adapt ? 1 : 0;
  o.adapt_threshold = options.adapt_threshold;
  o.adapt_patience = options.adapt_patience;
  o.slow_rank = options.slow_rank;
  o.slow_factor = options.slow_factor;
  layers.clear();
  for (size_t i = 0; i < options.layers_per_stage.size(); ++i) {
    const int64_t n = options.layers_per_stage[i];
    if (n < INT32_MIN || n > INT32_MAX) {
      detail::report(status, PF_INVALID_ARGUMENT,
                     "layers_per_stage[" + std::to_string(i) + "] is " + std::to_string(n) +
                         ", outside the int32 range");
      return false;
    }
    layers.push_back(static_cast<int32_t>(n));
  }
  o.layers_per_stage = layers.empty() ? nullptr : layers.data();
  o.num_layers_per_stage = layers.size();
  storage.entries.clear();
  for (size_t i = 0; i < options.config_keys.size(); ++i)
    storage.entries.push_back({options.config_keys[i].c_str(), options.config_values[i].c_str()});
  o.config_entries = storage.entries.empty() ? nullptr : storage.entries.data();
  o.num_config_entries = storage.entries.size();
  return true;
}
}  // namespace detail
#endif  // SWIG

class Trainer {
 public:
  // Returns a new Trainer on `model` (the trainer retains it), or NULL after reporting the error.
  static Trainer* create(Model& model, const TrainerOptions& options, Status* status) {
    if (model.closed()) {
      detail::report(status, PF_FAILED_PRECONDITION, "the model is closed");
      return nullptr;
    }
    pf_trainer_options o;
    detail::TrainerOptionsStorage storage;
    if (!detail::to_c(options, o, storage, status)) return nullptr;
    pf_trainer* t = nullptr;
    return detail::ok(pf_trainer_create(model.handle(), &o, &t), status) ? new Trainer(t) : nullptr;
  }

  // Destroys the trainer and its data loader; so does the destructor. Later calls fail with
  // PF_FAILED_PRECONDITION. Idempotent.
  void close() { handle_.close(); }
  bool closed() const { return handle_.closed(); }

  // One step on a whole batch (split into options.micro_batches). The tensors are copied by the
  // runtime during the call.
  StepResult step(const Tensor& inputs, const Tensor& targets, Status* status) {
    const pf_tensor_view in = inputs.view(), tg = targets.view();
    pf_step_result r = detail::sized<pf_step_result>();
    return handle_.call(status, pf_trainer_step, &in, &tg, &r) ? convert(r) : StepResult();
  }

  // Installs `callback` (borrowed: see LoaderBridge), or removes the loader for NULL.
  void set_data_loader(LoaderCallback* callback, Status* status) {
    install_callback(pf_trainer_set_data_loader, callback, status);
  }
  // The held-out loader that evaluate() and run() evaluate on (borrowed the same way).
  void set_eval_loader(LoaderCallback* callback, Status* status) {
    install_callback(pf_trainer_set_eval_loader, callback, status);
  }
  // A built-in data source as the training (or, for set_builtin_eval_data, the held-out) loader.
  void set_builtin_data(const DataOptions& options, Status* status) {
    install_builtin(pf_trainer_set_data_loader, options, status);
  }
  void set_builtin_eval_data(const DataOptions& options, Status* status) {
    install_builtin(pf_trainer_set_eval_loader, options, status);
  }

  // Forward-only over the eval loader's micro-batches 0 .. micro_batches - 1: no gradient, no update.
  EvalResult evaluate(int32_t micro_batches, Status* status) {
    EvalResult e;
    pf_eval_result c = detail::sized<pf_eval_result>();
    if (handle_.call(status, pf_trainer_evaluate, micro_batches, &c)) {
      e.loss = c.loss;
      e.accuracy = c.accuracy;
      e.micro_batches = c.micro_batches;
      e.samples = c.samples;
      e.targets = c.targets;
    }
    return e;
  }

  // The training loop: steps from the data loader with evaluation, checkpoints and a metrics log.
  RunResult run(const RunOptions& options, Status* status) { return run_watched(options, nullptr, status); }

  // run() with `callback` (borrowed; may be null) told after every step, able to stop the run.
  RunResult run_watched(const RunOptions& options, StepCallback* callback, Status* status) {
    pf_run_options o;
    pf_run_options_init(&o);
    o.steps = options.steps;
    o.eval_every = options.eval_every;
    o.eval_micro_batches = options.eval_micro_batches;
    o.checkpoint_every = options.checkpoint_every;
    o.checkpoint_dir = options.checkpoint_dir.empty() ? nullptr : options.checkpoint_dir.c_str();
    o.keep_checkpoints = options.keep_checkpoints;
    o.metrics_log = options.metrics_log.empty() ? nullptr : options.metrics_log.c_str();
    if (callback != nullptr) {
      o.on_step = [](const pf_step_report* report, void* user_data) -> int32_t {
        StepInfo info;
        info.step = report->step;
        info.steps_run = report->steps_run;
        info.tokens = report->tokens;
        info.loss = report->loss;
        info.lr = report->lr;
        info.seconds = report->seconds;
        try {
          return static_cast<StepCallback*>(user_data)->on_step(info) ? 1 : 0;
        } catch (...) {
          return 1;  // a language that let an exception through: stop rather than unwind through C
        }
      };
      o.on_step_user_data = callback;
    }
    pf_run_result c = detail::sized<pf_run_result>();
    RunResult r;
    if (!handle_.call(status, pf_trainer_run, &o, &c)) return r;
    r.stopped = c.stopped != 0;
    r.step = c.step;
    r.steps_run = c.steps_run;
    r.loss = c.loss;
    r.eval_loss = c.eval_loss;
    r.eval_accuracy = c.eval_accuracy;
    r.evaluations = c.evaluations;
    r.checkpoints = c.checkpoints;
    r.diverged = c.diverged != 0;
    r.last_checkpoint = c.last_checkpoint != nullptr ? c.last_checkpoint : "";
    r.divergence = c.divergence != nullptr ? c.divergence : "";
    return r;
  }

  // Top-level layers per stage of the partition in use (one entry for the sequential trainer).
  std::vector<int64_t> partition(Status* status) const {
    size_t n = 0;
    if (!handle_.call(status, pf_trainer_partition, nullptr, 0, &n)) return {};
    std::vector<int32_t> counts(n);
    if (!handle_.call(status, pf_trainer_partition, counts.data(), n, &n)) return {};
    return std::vector<int64_t>(counts.begin(), counts.end());
  }
  // The same into `out` (Go, which takes no returned vector): the number of stages, with the
  // counts written when `count` holds them (count 0 asks for the number only).
  int64_t partition_into(int32_t* out, size_t count, Status* status) const {
    size_t n = 0;
    if (!handle_.call(status, pf_trainer_partition, count > 0 ? out : nullptr, count, &n)) return 0;
    return static_cast<int64_t>(n);
  }

  StepResult step_from_loader(Status* status) {
    pf_step_result r = detail::sized<pf_step_result>();
    return handle_.call(status, pf_trainer_step_from_loader, &r) ? convert(r) : StepResult();
  }

  // Asynchronous and local-learning schedules: runs the micro-batches still in flight, so that every
  // stage has applied every micro-batch (call it before reading the final parameters); a no-op
  // otherwise.
  void drain(Status* status) { handle_.call(status, pf_trainer_drain); }

  Metrics metrics(Status* status) const {
    Metrics m;
    pf_metrics c = detail::sized<pf_metrics>();
    if (handle_.call(status, pf_trainer_get_metrics, &c)) {
      m.step = c.step;
      m.last_loss = c.last_loss;
      m.last_grad_norm = c.last_grad_norm;
      m.tokens_per_second = c.tokens_per_second;
      m.total_tokens = c.total_tokens;
      m.data_position = c.data_position;
    }
    return m;
  }

  std::vector<int64_t> parameter_shape(const std::string& name, Status* status) const {
    size_t ndim = 0;
    int64_t dims[8] = {0};
    if (!handle_.call(status, pf_trainer_parameter_shape, name.c_str(), dims, 8, &ndim)) return {};
    return std::vector<int64_t>(dims, dims + ndim);
  }
  // Copies parameter `name` into `out`, which holds exactly its element count.
  void copy_parameter(const std::string& name, float* out, size_t count, Status* status) const {
    handle_.call(status, pf_trainer_get_parameter, name.c_str(), out, count);
  }
  // Parameter `name` as a new float32 Tensor with its shape.
  Tensor parameter(const std::string& name, Status* status) const {
    const std::vector<int64_t> shape = parameter_shape(name, status);
    if (status != nullptr && !status->ok()) return Tensor();
    int64_t count = 1;
    for (int64_t d : shape) count *= d;
    std::vector<float> values(static_cast<size_t>(count));
    copy_parameter(name, values.data(), values.size(), status);
    if (status != nullptr && !status->ok()) return Tensor();
    return Tensor::from_floats(values.data(), values.size(), shape.data(), shape.size(), status);
  }
  // Overwrites parameter `name` with `values` (float32, its element count; the shape is not checked).
  void set_parameter(const std::string& name, const Tensor& values, Status* status) {
    if (!handle_.open(status)) return;
    if (values.dtype() != F32) {
      detail::report(status, PF_INVALID_ARGUMENT, "parameter values must be float32");
      return;
    }
    const pf_tensor_view v = values.view();
    detail::ok(pf_trainer_set_parameter(handle_.get(), name.c_str(), static_cast<const float*>(v.data),
                                        static_cast<size_t>(values.size())),
               status);
  }

  // SHA-256 (hex) of every parameter: equal checksums mean bitwise-equal parameters. With one
  // process per rank every process must call it (collective).
  std::string checksum(Status* status) const {
    char hex[65] = {0};
    return handle_.call(status, pf_trainer_parameter_checksum, hex) ? hex : std::string();
  }
  void save_checkpoint(const std::string& path, Status* status) const {
    handle_.call(status, pf_trainer_save_checkpoint, path.c_str());
  }
  void load_checkpoint(const std::string& path, Status* status) {
    handle_.call(status, pf_trainer_load_checkpoint, path.c_str());
  }
  // Since 0.17: Hugging Face Transformers folders. Loads the weights of `dir` into the parameters
  // this process holds (all checked first: a mismatch changes nothing).
  void load_hf_weights(const std::string& dir, Status* status) {
    handle_.call(status, pf_trainer_load_hf_weights, dir.c_str());
  }
  // Writes config.json and model.safetensors of the model and its current weights to `dir` with
  // the names of family `names` ("hf-llama" or "hf-gpt2"); this process must hold every parameter.
  void export_hf(const std::string& dir, const std::string& names, Status* status) const {
    handle_.call(status, pf_trainer_export_hf, names.c_str(), dir.c_str());
  }

  // This process's rank in the launch and the launch's size (0 and 1 when the ranks are threads).
  ProcessInfo process(Status* status) const {
    ProcessInfo p;
    int32_t rank = 0, size = 1;
    if (handle_.call(status, pf_trainer_process, &rank, &size)) {
      p.rank = rank;
      p.size = size;
    }
    return p;
  }

  // ---- pipelined training: measurements of the last step ----
  // Pipeline ranks (1 for the sequential trainer).
  int32_t num_ranks(Status* status) const { return handle_.read<int32_t>(status, pf_trainer_num_ranks); }
  // Rank `rank` (in [0, num_ranks)) over the last step, in microseconds from the step start.
  // PF_FAILED_PRECONDITION for the sequential trainer or before the first step.
  RankStats rank_stats(int32_t rank, Status* status) const {
    pf_rank_stats c = detail::sized<pf_rank_stats>();
    return handle_.call(status, pf_trainer_get_rank_stats, rank, &c) ? RankStats::from_c(c) : RankStats();
  }
  // (makespan - busiest rank's busy time) / makespan of the last step.
  double bubble_rate(Status* status) const { return handle_.read<double>(status, pf_trainer_get_bubble_rate); }
  // The last step's measured timeline as Chrome trace JSON (https://ui.perfetto.dev) or SVG.
  std::string timeline_to_chrome_trace(Status* status) {
    return handle_.read_string(status, pf_trainer_timeline_to_chrome_trace);
  }
  std::string timeline_to_svg(Status* status) { return handle_.read_string(status, pf_trainer_timeline_to_svg); }
  // The re-partitions of an adaptive trainer (TrainerOptions::adapt) so far, as a JSON array of
  // {"step", "slowdown" (per rank), "from", "to" (layers per stage)}; "[]" without adaptation.
  std::string adaptations_json(Status* status) { return handle_.read_string(status, pf_trainer_adaptations_json); }
  // What the fill job (config entry "fill", e.g. "sweep:grid.json") has done so far, as one JSON
  // object; "null" without one.
  std::string fill_report_json(Status* status) { return handle_.read_string(status, pf_trainer_fill_report_json); }

 private:
  explicit Trainer(pf_trainer* trainer) : handle_(trainer, "trainer") {}
  static StepResult convert(const pf_step_result& r) {
    StepResult s;
    s.loss = r.loss;
    s.grad_norm = r.grad_norm;
    s.samples = r.samples;
    s.tokens = r.tokens;
    s.seconds = r.seconds;
    s.lr = r.lr;
    s.bubble_rate = r.bubble_rate;
    return s;
  }
  // Installs a loader through `install` (pf_trainer_set_data_loader or _set_eval_loader).
  void install_callback(pf_status* (*install)(pf_trainer*, const pf_data_loader*), LoaderCallback* callback,
                        Status* status) {
    if (!handle_.open(status)) return;
    if (callback == nullptr) {
      detail::ok(install(handle_.get(), nullptr), status);
      return;
    }
    detail::guarded(status, [&] {
      auto bridge = std::unique_ptr<detail::LoaderBridge>(new detail::LoaderBridge{callback, MicroBatch()});
      pf_data_loader loader;
      std::memset(&loader, 0, sizeof(loader));
      loader.struct_size = sizeof(loader);
      loader.user_data = bridge.get();
      loader.next = &detail::LoaderBridge::next;
      loader.seek = &detail::LoaderBridge::seek;
      loader.destroy = &detail::LoaderBridge::destroy;
      if (!detail::ok(install(handle_.get(), &loader), status)) return false;
      bridge.release();  // the trainer owns it now
      return true;
    });
  }
  void install_builtin(pf_status* (*install)(pf_trainer*, const pf_data_loader*), const DataOptions& options,
                       Status* status) {
    if (!handle_.open(status)) return;
    pf_data_loader loader;
    if (!detail::create_builtin_loader(options, &loader, nullptr, status)) return;
    if (!detail::ok(install(handle_.get(), &loader), status)) loader.destroy(loader.user_data);
  }

  detail::OwnedHandle<pf_trainer, pf_trainer_destroy> handle_;
};

// ---------------------------------------------------------------------------------------------
// Schedules: generate, parse, validate, lower, simulate, render (C API "Schedules", docs/SCHEDULES.md)

// What Schedule::generate builds; the constructor takes the C API's defaults. `stages` (P) and
// `micro_batches` (M) have none: 0 is an error. The costs and mem_limit are used by the cost-driven
// "zb-auto", "v-half" and "v-min" only (mem_limit 0: the schedule's own cap).
struct ScheduleOptions {
  int32_t stages, micro_batches, chunks;
  double t_f, t_b, t_w, t_comm, mem_limit;

  ScheduleOptions() {
    pf_schedule_options o;
    pf_schedule_options_init(&o);
    stages = o.stages;
    micro_batches = o.micro_batches;
    chunks = o.chunks;
    t_f = o.t_f;
    t_b = o.t_b;
    t_w = o.t_w;
    t_comm = o.t_comm;
    mem_limit = o.mem_limit;
  }
};

// Costs for Schedule::simulate (and the activation-policy pass); the constructor takes the C API's
// defaults. The scalars apply to every stage; a per-stage array, once set (one entry per stage of the
// schedule), overrides its scalar. m_in: what a recomputed micro-batch keeps from F until RECOMPUTE;
// transfer_bandwidth: bytes per time unit of an OFFLOAD/RELOAD copy (0 = free).
class CostModel {
 public:
  double t_f, t_b, t_w, t_comm, m_b, m_w, m_in, transfer_bandwidth;

  CostModel() {
    pf_cost_model c;
    pf_cost_model_init(&c);
    t_f = c.t_f;
    t_b = c.t_b;
    t_w = c.t_w;
    t_comm = c.t_comm;
    m_b = c.m_b;
    m_w = c.m_w;
    m_in = c.m_in;
    transfer_bandwidth = c.transfer_bandwidth;
  }

  void set_stage_t_f(const double* values, size_t count) { stage_[0].set(values, count); }
  void set_stage_t_b(const double* values, size_t count) { stage_[1].set(values, count); }
  void set_stage_t_w(const double* values, size_t count) { stage_[2].set(values, count); }
  void set_stage_m_b(const double* values, size_t count) { stage_[3].set(values, count); }
  void set_stage_m_w(const double* values, size_t count) { stage_[4].set(values, count); }
  void set_stage_m_in(const double* values, size_t count) { stage_[5].set(values, count); }
  // Back to the scalars for every stage.
  void clear_stage_costs() {
    for (PerStage& p : stage_) p = PerStage();
  }

#ifndef SWIG
  // The C struct, borrowing this object's arrays; false (reported) if the arrays' lengths differ.
  bool to_c(pf_cost_model* c, Status* status) const {
    pf_cost_model_init(c);
    c->t_f = t_f;
    c->t_b = t_b;
    c->t_w = t_w;
    c->t_comm = t_comm;
    c->m_b = m_b;
    c->m_w = m_w;
    c->m_in = m_in;
    c->transfer_bandwidth = transfer_bandwidth;
    static const char* const kNames[kFields] = {"stage_t_f", "stage_t_b", "stage_t_w",
                                                "stage_m_b", "stage_m_w", "stage_m_in"};
    const double** arrays[kFields] = {&c->stage_t_f, &c->stage_t_b, &c->stage_t_w,
                                      &c->stage_m_b, &c->stage_m_w, &c->stage_m_in};
    static const double kEmpty = 0.0;  // a set but empty array is still "set" (the C API then says why)
    int first = -1;
    for (int i = 0; i < kFields; ++i) {
      if (!stage_[i].given) continue;
      if (first < 0) {
        first = i;
        c->num_stages = stage_[i].values.size();
      } else if (stage_[i].values.size() != c->num_stages) {
        detail::report(status, PF_INVALID_ARGUMENT,
                       std::string("costs: ") + kNames[first] + " has " + std::to_string(c->num_stages) +
                           " entries but " + kNames[i] + " has " + std::to_string(stage_[i].values.size()) +
                           " (one per stage each)");
        return false;
      }
      *arrays[i] = stage_[i].values.empty() ? &kEmpty : stage_[i].values.data();
    }
    return true;
  }
#endif  // SWIG

 private:
  struct PerStage {
    bool given = false;
    std::vector<double> values;
    void set(const double* v, size_t n) {
      given = true;
      values.assign(v, v + n);
    }
  };
  static constexpr int kFields = 6;
  PerStage stage_[kFields];
};

// The whole-schedule results of a simulation (pf_simulation_summary).
struct SimulationSummary {
  double makespan = 0, ideal = 0, bubble_rate = 0;
  int32_t num_ranks = 0;
  double max_span = 0, span_bubble_rate = 0;
};

// A simulated timeline: results and renderings. Independent of the schedule it came from.
class Simulation {
 public:
  // Destroys the simulation; so does the destructor. Later calls fail with PF_FAILED_PRECONDITION.
  // Idempotent.
  void close() { handle_.close(); }
  bool closed() const { return handle_.closed(); }

  SimulationSummary summary(Status* status) const {
    SimulationSummary s;
    pf_simulation_summary c = detail::sized<pf_simulation_summary>();
    if (handle_.call(status, pf_simulation_get_summary, &c)) {
      s.makespan = c.makespan;
      s.ideal = c.ideal;
      s.bubble_rate = c.bubble_rate;
      s.num_ranks = c.num_ranks;
      s.max_span = c.max_span;
      s.span_bubble_rate = c.span_bubble_rate;
    }
    return s;
  }
  // `rank` in [0, num_ranks).
  RankStats rank_stats(int32_t rank, Status* status) const {
    pf_rank_stats c = detail::sized<pf_rank_stats>();
    return handle_.call(status, pf_simulation_get_rank_stats, rank, &c) ? RankStats::from_c(c) : RankStats();
  }

  // Chrome trace JSON (chrome://tracing, https://ui.perfetto.dev): a track per rank, an event per action.
  std::string to_chrome_trace(Status* status) { return handle_.read_string(status, pf_simulation_to_chrome_trace); }
  std::string to_svg(Status* status) { return handle_.read_string(status, pf_simulation_to_svg); }
  // A terminal grid `width` (>= 10) characters wide.
  std::string to_ascii(int32_t width, Status* status) {
    return handle_.read_string(status, pf_simulation_to_ascii, width);
  }

 private:
  friend class Schedule;
  explicit Simulation(pf_simulation* simulation) : handle_(simulation, "simulation") {}

  detail::OwnedHandle<pf_simulation, pf_simulation_destroy> handle_;
};

// A pipeline schedule: which rank runs which action (F, B, W, ...) of which micro-batch and stage, in
// order. Every Schedule was validated when it was made.
class Schedule {
 public:
  // Generates schedule `name` ("gpipe", "1f1b", "interleaved-1f1b", "bfs", "zb-h1", "zb-h2", "zb-v",
  // "zb-auto", "interleaved-zb", "dualpipe-v", "v-half", "v-min", "bitpipe", "seq1f1b" (one sequence
  // slice per micro-batch: 1f1b's order), the asynchronous "pipedream", "pipedream-2bw", "spectrain",
  // "pipemare", or the local-learning "ppll", "local-updates"). Returns a new Schedule, or NULL
  // after reporting the error (an unknown name lists the known ones).
  static Schedule* generate(const std::string& name, const ScheduleOptions& options, Status* status) {
    pf_schedule_options o;
    pf_schedule_options_init(&o);
    o.stages = options.stages;
    o.micro_batches = options.micro_batches;
    o.chunks = options.chunks;
    o.t_f = options.t_f;
    o.t_b = options.t_b;
    o.t_w = options.t_w;
    o.t_comm = options.t_comm;
    o.mem_limit = options.mem_limit;
    pf_schedule* s = nullptr;
    return detail::ok(pf_schedule_generate(name.c_str(), &o, &s), status) ? new Schedule(s) : nullptr;
  }
  // Parses the text form (or PyTorch-style compact action lists, one rank per line) and validates it
  // (under rendezvous send/recv, else under posted ones: validate("posted")).
  static Schedule* parse(const std::string& text, Status* status) {
    pf_schedule* s = nullptr;
    return detail::ok(pf_schedule_parse(text.c_str(), &s), status) ? new Schedule(s) : nullptr;
  }
  // Parses PyTorch's pipeline-schedule CSV (torch.distributed.pipelining's dump: one row per rank,
  // one action per cell, PyTorch's B being our BW) and validates it as parse() does. UNSHARD/RESHARD
  // cells are dropped, with one warning in the library's log.
  static Schedule* parse_pytorch_csv(const std::string& text, Status* status) {
    pf_schedule* s = nullptr;
    return detail::ok(pf_schedule_parse_pytorch_csv(text.c_str(), &s), status) ? new Schedule(s) : nullptr;
  }

  // Destroys the schedule (simulations of it stay valid); so does the destructor. Later calls fail
  // with PF_FAILED_PRECONDITION. Idempotent.
  void close() { handle_.close(); }
  bool closed() const { return handle_.closed(); }

  // The text form; parse() reads it back to the same schedule.
  std::string to_text(Status* status) { return handle_.read_string(status, pf_schedule_to_text); }
  // PyTorch's CSV (parse_pytorch_csv reads it back); with_comms also writes SEND/RECV and ALLREDUCE
  // (as REDUCE_GRAD). A kind the format cannot carry (OFFLOAD, RECOMPUTE, ...) is PF_INVALID_ARGUMENT.
  std::string to_pytorch_csv(bool with_comms, Status* status) {
    return handle_.read_string(status, pf_schedule_to_pytorch_csv, static_cast<int32_t>(with_comms ? 1 : 0));
  }
  // Checks the schedule under rendezvous send/recv (validate) or under `comm` (validate_comm):
  // "rendezvous" or "posted" (a SEND never blocks, only the compute that consumes a RECV's tensor
  // waits). Distinct names, not overloads, so that Go's SWIG keeps typed signatures.
  void validate(Status* status) const { handle_.call(status, pf_schedule_validate); }
  void validate_comm(const std::string& comm, Status* status) const {
    handle_.call(status, pf_schedule_validate_comm, comm.c_str());
  }
  // A new Schedule with SEND/RECV actions for every cross-rank dependency, in a deadlock-free order.
  Schedule* lower(Status* status) const {
    pf_schedule* s = nullptr;
    return handle_.call(status, pf_schedule_lower, &s) ? new Schedule(s) : nullptr;
  }
  int32_t num_ranks(Status* status) const { return handle_.read<int32_t>(status, pf_schedule_num_ranks); }
  int32_t num_stages(Status* status) const { return handle_.read<int32_t>(status, pf_schedule_num_stages); }
  int32_t num_micro_batches(Status* status) const {
    return handle_.read<int32_t>(status, pf_schedule_num_micro_batches);
  }

  // Times the schedule under `costs`, with rendezvous send/recv (simulate) or the semantics `comm`
  // ("rendezvous", "posted"; simulate_comm). Returns a new Simulation, or NULL after reporting the
  // error.
  Simulation* simulate(const CostModel& costs, Status* status) const {
    return simulate_comm(costs, "rendezvous", status);
  }
  Simulation* simulate_comm(const CostModel& costs, const std::string& comm, Status* status) const {
    if (!handle_.open(status)) return nullptr;
    pf_cost_model c;
    if (!costs.to_c(&c, status)) return nullptr;
    pf_simulation* sim = nullptr;
    return detail::ok(pf_schedule_simulate_comm(handle_.get(), &c, comm.c_str(), &sim), status) ? new Simulation(sim)
                                                                                                 : nullptr;
  }

  // A new Schedule with activation policy `policy` ("none", "recompute", "offload-host",
  // "offload-file", "selective", "balance"; docs/MEMORY.md) applied as a pass: OFFLOAD / RELOAD /
  // RECOMPUTE (and HOLD / RETURN for "balance") are inserted, so that simulate() predicts each rank's
  // peak under it. `costs` gives the per-stage bytes (m_b, m_w, m_in); `budget_bytes` is selective's
  // per-rank limit (> 0, else ignored). A budget that cannot be met is PF_INVALID_ARGUMENT naming the
  // smallest budget that works. Returns NULL after reporting the error.
  Schedule* apply_activation_policy(const std::string& policy, const CostModel& costs, double budget_bytes,
                                    Status* status) const {
    if (!handle_.open(status)) return nullptr;
    pf_cost_model c;
    if (!costs.to_c(&c, status)) return nullptr;
    pf_schedule* s = nullptr;
    if (!detail::ok(pf_schedule_apply_activation_policy(handle_.get(), policy.c_str(), &c, budget_bytes, &s),
                    status)) {
      return nullptr;
    }
    return new Schedule(s);
  }
  // The smallest per-rank activation budget "selective" can meet for this schedule under `costs`.
  double min_activation_budget(const CostModel& costs, Status* status) const {
    if (!handle_.open(status)) return 0;
    pf_cost_model c;
    if (!costs.to_c(&c, status)) return 0;
    return handle_.read<double>(status, pf_schedule_min_activation_budget, &c);
  }

 private:
  explicit Schedule(pf_schedule* schedule) : handle_(schedule, "schedule") {}

  detail::OwnedHandle<pf_schedule, pf_schedule_destroy> handle_;
};

// ---------------------------------------------------------------------------------------------
// Planning (C API 0.8 "Planning", docs/PLANNING.md)

// Plan options (pf_plan_options); the constructor takes the C API's defaults.
struct PlanOptions {
  std::string cluster_json;   // the cluster description (docs/PLANNING.md); "" = measure this machine
  int32_t devices;            // cluster_json "": this machine's devices; 0 = one per core
  double memory_limit_bytes;  // per device; 0 = the cluster's
  std::string schedules;      // comma-separated schedules to search; "" = every synchronous one
  std::string policies;       // comma-separated activation policies; "" = none and recompute
  int32_t max_micro_batches, max_chunks, repeats, calibration_steps;

  PlanOptions() {
    pf_plan_options o;
    pf_plan_options_init(&o);
    devices = o.devices;
    memory_limit_bytes = o.memory_limit_bytes;
    max_micro_batches = o.max_micro_batches;
    max_chunks = o.max_chunks;
    repeats = o.repeats;
    calibration_steps = o.calibration_steps;
  }
};

// A plan: the candidates that fit, fastest first, each as JSON (schedule, ranks, chunks,
// micro_batches, data_parallel, activation_policy, layers_per_stage, step_seconds,
// tokens_per_second, peak_memory_bytes, ...), the whole plan as JSON and as an SVG chart.
class Plan {
 public:
  // Profiles and calibrates a copy of `model` on row slices of one step's batch (all replicas'
  // rows) with the optimizer of `trainer_options`, and plans. A new Plan, or NULL after reporting.
  static Plan* create(Model& model, const Tensor& inputs, const Tensor& targets, const TrainerOptions& trainer_options,
                      const PlanOptions& options, Status* status) {
    if (model.closed()) {
      detail::report(status, PF_FAILED_PRECONDITION, "the model is closed");
      return nullptr;
    }
    pf_trainer_options t;
    detail::TrainerOptionsStorage layers;
    if (!detail::to_c(trainer_options, t, layers, status)) return nullptr;
    pf_plan_options o;
    pf_plan_options_init(&o);
    o.cluster_json = options.cluster_json.empty() ? nullptr : options.cluster_json.c_str();
    o.devices = options.devices;
    o.memory_limit_bytes = options.memory_limit_bytes;
    o.schedules = options.schedules.empty() ? nullptr : options.schedules.c_str();
    o.policies = options.policies.empty() ? nullptr : options.policies.c_str();
    o.max_micro_batches = options.max_micro_batches;
    o.max_chunks = options.max_chunks;
    o.repeats = options.repeats;
    o.calibration_steps = options.calibration_steps;
    const pf_tensor_view in = inputs.view(), tg = targets.view();
    pf_plan* p = nullptr;
    return detail::ok(pf_plan_create(model.handle(), &in, &tg, &t, &o, &p), status) ? new Plan(p) : nullptr;
  }

  // Destroys the plan; so does the destructor. Later calls fail with PF_FAILED_PRECONDITION. Idempotent.
  void close() { handle_.close(); }
  bool closed() const { return handle_.closed(); }

  int32_t num_candidates(Status* status) const { return handle_.read<int32_t>(status, pf_plan_num_candidates); }
  // Candidate `index` in [0, num_candidates) as JSON.
  std::string candidate_json(int32_t index, Status* status) {
    return handle_.read_string(status, pf_plan_candidate_json, index);
  }
  std::string to_json(Status* status) { return handle_.read_string(status, pf_plan_to_json); }
  std::string to_svg(Status* status) { return handle_.read_string(status, pf_plan_to_svg); }
  // Sets the fields of `options` that run candidate `index` (micro_batches, data_parallel,
  // schedule, ranks, stages, chunks, layers_per_stage, activation_policy); the rest stay.
  void apply(int32_t index, TrainerOptions& options, Status* status) const {
    pf_trainer_options o;
    pf_trainer_options_init(&o);
    if (!handle_.call(status, pf_plan_apply, index, &o)) return;
    options.micro_batches = o.micro_batches;
    options.data_parallel = o.data_parallel;
    options.schedule = o.schedule != nullptr ? o.schedule : "";
    options.stages = o.stages;
    options.ranks = o.ranks;
    options.chunks = o.chunks;
    options.layers_per_stage.assign(o.layers_per_stage, o.layers_per_stage + o.num_layers_per_stage);
    options.activation_policy = o.activation_policy != nullptr ? o.activation_policy : "none";
  }

 private:
  explicit Plan(pf_plan* plan) : handle_(plan, "plan") {}

  detail::OwnedHandle<pf_plan, pf_plan_destroy> handle_;
};

// ---------------------------------------------------------------------------------------------
// Linear models by parallel coordinate descent (pf_glm_*, 0.13)

// What GlmModel::train does; the defaults are pf_glm_options_init's.
struct GlmOptions {
  std::string loss = "logistic";  // "logistic", "squared" (ridge) or "hinge" (linear SVM)
  double lambda = 1e-4;           // λ of (1/n) Σ loss + (λ/2) ‖w‖² + μ ‖w‖₁
  double l1 = 0;                  // μ (0.15; 0: L2 only)
  std::string solver = "syscd";   // "syscd", "sequential" or "async"
  int32_t threads = 0;            // 0: every hardware thread (sequential: 1)
  double tol = 1e-6;              // stop at a duality gap <= tol x the objective
  int32_t max_epochs = 1000;
  int64_t seed = 0;
  int64_t bucket_rows = 0;        // syscd: examples per bucket; 0 = about 1 KiB of values

  GlmOptions() {
    pf_glm_options o;
    pf_glm_options_init(&o);
    lambda = o.lambda;
    threads = o.threads;
    tol = o.tol;
    max_epochs = o.max_epochs;
    seed = static_cast<int64_t>(o.seed);
    bucket_rows = o.bucket_rows;
    l1 = o.l1;
  }
};

// The examples to train on: dense (set_dense) or CSR (set_csr and set_row_start), and the labels.
class GlmData {
 public:
  // n x d float32 values, row-major.
  void set_dense(const Tensor& values) {
    values_ = values;
    row_start_.clear();
    indices_.clear();
  }
  // CSR: int32 0-based feature indices and float32 values of the stored entries, d features; the
  // offsets come from set_row_start.
  void set_csr(const Tensor& indices, const Tensor& values, int64_t cols) {
    indices_.assign(static_cast<size_t>(indices.size()), 0);
    const pf_tensor_view v = indices.view();
    for (size_t i = 0; i < indices_.size(); ++i) {
      const int32_t index = v.data ? static_cast<const int32_t*>(v.data)[i] : 0;
      indices_[i] = index < 0 ? 0xffffffffu : static_cast<uint32_t>(index);  // refused by the runtime, naming the row
    }
    values_ = values;
    cols_ = cols;
  }
  // rows + 1 offsets into the CSR entries.
  void set_row_start(const int64_t* values, size_t count) { row_start_.assign(values, values + count); }
  void set_labels(const double* values, size_t count) { labels_.assign(values, values + count); }

#ifndef SWIG
  bool dense() const { return row_start_.empty(); }
  const Tensor& values() const { return values_; }
  const std::vector<int64_t>& row_start() const { return row_start_; }
  const std::vector<uint32_t>& indices() const { return indices_; }
  const std::vector<double>& labels() const { return labels_; }
  int64_t cols() const { return cols_; }
#endif  // SWIG

 private:
  Tensor values_;
  std::vector<int64_t> row_start_;
  std::vector<uint32_t> indices_;
  std::vector<double> labels_;
  int64_t cols_ = 0;
};

// What training reached (pf_glm_result).
struct GlmResult {
  int32_t epochs = 0;
  double objective = 0, dual_objective = 0, duality_gap = 0, seconds = 0, accuracy = 0;
  bool converged = false;
  int64_t features = 0;
  double negative_label = 0, positive_label = 0;  // a libsvm file's labels read as -1 / +1 (NaN: none)
};

class GlmModel {
 public:
  // Trains on a libsvm-format file (features 0: the largest index in it). A new GlmModel, or NULL
  // after reporting the error.
  static GlmModel* train_libsvm(const std::string& path, int64_t features, const GlmOptions& options, Status* status) {
    pf_glm_options o;
    if (!to_c(options, o, status)) return nullptr;
    pf_glm_model* m = nullptr;
    return detail::ok(pf_glm_train_libsvm(path.c_str(), features, &o, &m), status) ? new GlmModel(m) : nullptr;
  }
  // Trains on arrays (labels ±1 for logistic and hinge).
  static GlmModel* train(const GlmData& data, const GlmOptions& options, Status* status) {
    pf_glm_options o;
    if (!to_c(options, o, status)) return nullptr;
    const pf_tensor_view v = data.values().view();
    const int64_t rows = static_cast<int64_t>(data.labels().size());
    int64_t cols = data.cols();
    if (data.dense()) {
      if (v.ndim != 2 || v.dtype != PF_DTYPE_F32) {
        detail::report(status, PF_INVALID_ARGUMENT, "values: expected a 2-D float32 array (examples x features)");
        return nullptr;
      }
      if (v.shape[0] != rows) {
        detail::report(status, PF_INVALID_ARGUMENT, "labels: " + std::to_string(rows) + " for " +
                                                        std::to_string(v.shape[0]) + " rows of values");
        return nullptr;
      }
      cols = v.shape[1];
    } else if (static_cast<int64_t>(data.row_start().size()) != rows + 1) {
      detail::report(status, PF_INVALID_ARGUMENT, "row_start: " + std::to_string(data.row_start().size()) +
                                                      " offsets for " + std::to_string(rows) + " labels (expected rows + 1)");
      return nullptr;
    } else if (v.dtype != PF_DTYPE_F32 || static_cast<int64_t>(data.indices().size()) != data.row_start().back() ||
               data.values().size() != data.row_start().back()) {
      detail::report(status, PF_INVALID_ARGUMENT, "indices and values: expected row_start[rows] = " +
                                                      std::to_string(data.row_start().back()) + " entries each (float32 values)");
      return nullptr;
    }
    pf_glm_model* m = nullptr;
    const bool done = detail::ok(
        pf_glm_train(rows, cols, data.dense() ? nullptr : data.row_start().data(),
                     data.dense() ? nullptr : data.indices().data(), static_cast<const float*>(v.data),
                     data.labels().data(), &o, &m),
        status);
    return done ? new GlmModel(m) : nullptr;
  }

  void close() { handle_.close(); }
  bool closed() const { return handle_.closed(); }

  GlmResult result(Status* status) const {
    GlmResult r;
    pf_glm_result c = detail::sized<pf_glm_result>();
    if (!handle_.call(status, pf_glm_model_result, &c)) return r;
    r.epochs = c.epochs;
    r.objective = c.objective;
    r.dual_objective = c.dual_objective;
    r.duality_gap = c.duality_gap;
    r.seconds = c.seconds;
    r.accuracy = c.accuracy;
    r.converged = c.converged != 0;
    r.features = c.features;
    r.negative_label = c.negative_label;
    r.positive_label = c.positive_label;
    return r;
  }
  // The result and the weights as JSON ("weights", "history", ...).
  std::string to_json(Status* status) {
    const char* text = nullptr;
    return handle_.call(status, pf_glm_model_to_json, &text) ? std::string(text) : std::string();
  }

 private:
  explicit GlmModel(pf_glm_model* model) : handle_(model, "linear model") {}
  static bool to_c(const GlmOptions& options, pf_glm_options& o, Status* status) {
    pf_glm_options_init(&o);
    if (options.loss == "logistic") o.loss = PF_GLM_LOGISTIC;
    else if (options.loss == "squared") o.loss = PF_GLM_SQUARED;
    else if (options.loss == "hinge") o.loss = PF_GLM_HINGE;
    else {
      detail::report(status, PF_INVALID_ARGUMENT, "loss '" + options.loss + "' is not one of logistic, squared, hinge");
      return false;
    }
    if (options.solver == "syscd") o.solver = PF_GLM_SYSCD;
    else if (options.solver == "sequential") o.solver = PF_GLM_SEQUENTIAL;
    else if (options.solver == "async") o.solver = PF_GLM_ASYNC;
    else {
      detail::report(status, PF_INVALID_ARGUMENT, "solver '" + options.solver + "' is not one of syscd, sequential, async");
      return false;
    }
    o.lambda = options.lambda;
    o.threads = options.threads;
    o.tol = options.tol;
    o.max_epochs = options.max_epochs;
    o.seed = static_cast<uint64_t>(options.seed);
    o.bucket_rows = options.bucket_rows;
    o.l1 = options.l1;
    return true;
  }

  detail::OwnedHandle<pf_glm_model, pf_glm_model_destroy> handle_;
};

}  // namespace pipeforge
