// pf_trainer_evaluate, pf_trainer_run, pf_trainer_partition, pf_model_partition_balanced and the
// built-in data loaders: the training loop of runtime/run and the data sources of runtime/data
// behind the C ABI.
#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "runtime/planner/fail_slow.h"
#include "c_api/guard.h"
#include "c_api/handles.h"
#include "c_api/struct_io.h"
#include "c_api/tensor_view.h"
#include "runtime/core/limits.h"
#include "runtime/data/char_text_dataset.h"
#include "runtime/data/cifar10.h"
#include "runtime/data/csv_classification.h"
#include "runtime/data/synthetic_classification.h"
#include "runtime/data/token_file.h"
#include "runtime/execution/partition.h"
#include "runtime/run/training_loop.h"
#include "runtime/tensor/memory_tracker.h"

namespace {

using pf::capi::guard;
using pf::capi::require;

constexpr size_t kEvalResultV1Size = sizeof(pf_eval_result);
constexpr size_t kRunOptionsV1Size = 56;  // 0.5's: without on_step (0.12)
constexpr size_t kRunResultV1Size = 72;  // 0.5's: without stopped (0.12)
constexpr size_t kBuiltinDataOptionsV1Size = 72;  // 0.5's: without vocab (0.17)
static_assert(kEvalResultV1Size == 48 && sizeof(pf_run_options) == 72 && sizeof(pf_run_result) == 88 &&
                  sizeof(pf_builtin_data_options) == 80 && sizeof(pf_step_report) == 56,
              "a struct layout changed");

pf_run_options default_run_options() {
  pf_run_options o{};
  o.struct_size = sizeof(pf_run_options);
  return o;
}

pf_builtin_data_options default_builtin_options() {
  pf_builtin_data_options o{};
  o.struct_size = sizeof(pf_builtin_data_options);
  o.rows = 8;
  o.seq_len = 64;
  o.feature_scale = 1.0f;
  o.features = 32;
  o.classes = 10;
  return o;
}

pf_eval_result convert(const pf::EvalResult& r) {
  pf_eval_result out{};
  out.loss = r.loss;
  out.accuracy = r.accuracy;
  out.micro_batches = r.micro_batches;
  out.samples = r.samples;
  out.targets = r.targets;
  return out;
}

pf::EvalResult evaluate_from_start(pf_trainer& trainer, int micro_batches) {
  PF_CHECK_STATE(trainer.eval_loader != nullptr,
                 "the trainer has no eval loader: call pf_trainer_set_eval_loader with the held-out data");
  trainer.eval_loader->seek(0);
  trainer.eval_loader->begin_step(0, micro_batches);
  pf::MemoryCategoryScope scope(pf::MemoryCategory::kActivations);  // charges the copied batches
  return trainer.trainer->evaluate(*trainer.eval_loader, micro_batches);
}

// A built-in source behind the pf_data_loader callbacks; the batch served last stays alive for the
// views that point into it.
struct BuiltinLoader {
  std::unique_ptr<pf::DataSource> source;
  pf::Batch current;
  std::vector<int64_t> input_shape, target_shape;

  static pf_tensor_view view(const pf::Tensor& t, std::vector<int64_t>* shape) {
    *shape = t.shape();
    pf_tensor_view v{};
    v.data = t.data<char>();
    v.dtype = t.dtype() == pf::DType::kI32 ? PF_DTYPE_I32 : PF_DTYPE_F32;
    v.device_kind = PF_DEVICE_CPU;
    v.ndim = static_cast<int32_t>(shape->size());
    v.shape = shape->data();
    return v;
  }
  static pf_status* next(void* user_data, int64_t position, pf_micro_batch* out) {
    return guard("builtin data loader", [&] {
      auto* self = static_cast<BuiltinLoader*>(user_data);
      if (self->source->position() != position) self->source->seek(position);
      self->current = self->source->next();
      out->inputs = view(self->current.inputs, &self->input_shape);
      out->targets = view(self->current.targets, &self->target_shape);
    });
  }
  static pf_status* seek(void* user_data, int64_t position) {
    return guard("builtin data loader", [&] { static_cast<BuiltinLoader*>(user_data)->source->seek(position); });
  }
  static void destroy(void* user_data) { delete static_cast<BuiltinLoader*>(user_data); }
};

// One batch, `rows` x `width` 4-byte values, must fit in the memory a model's parameters may take
// (a quarter of this process's): checked before the loader allocates one, naming the options.
void check_batch_size(int64_t rows, int64_t width, const char* width_name) {
  PF_CHECK_ARG(rows <= pf::limits::kMaxDimension, "options->rows is ", rows, ": expected at most ",
               pf::limits::kMaxDimension);
  PF_CHECK_ARG(width >= 1 && width <= pf::limits::kMaxDimension, width_name, " is ", width, ": expected 1 to ",
               pf::limits::kMaxDimension);
  const int64_t limit = pf::limits::max_parameter_bytes();
  const int64_t values = rows * width;  // both < 2^31
  PF_CHECK_ARG(values <= limit / 4, "options->rows x ", width_name, " is ", rows, " x ", width,
               ": one batch would hold ", values, " 4-byte values, more than the limit of ", limit,
               " bytes allows (a quarter of the memory this process may use)");
}

// The options every windowed token source (char text, token file) takes alike.
template <typename WindowOptions>
void copy_window_options(const pf_builtin_data_options& o, WindowOptions* c) {
  check_batch_size(o.rows, o.seq_len, "options->seq_len");
  c->rows = o.rows;
  c->seq_len = o.seq_len;
  c->seed = o.seed;
  c->held_out_fraction = o.held_out_fraction;
  c->split = o.held_out == 1 ? pf::DataSplit::kHeldOut : pf::DataSplit::kTrain;
}

// The source the options ask for, and what a model for it needs (info).

std::unique_ptr<pf::DataSource> make_source(const pf_builtin_data_options& o, int64_t info[2]) {
  PF_CHECK_ARG(o.rows >= 1, "options->rows is ", o.rows, ": expected >= 1");
  PF_CHECK_ARG(o.held_out == 0 || o.held_out == 1, "options->held_out is ", o.held_out, ": expected 0 or 1");
  switch (o.kind) {
    case PF_DATA_CHAR_TEXT: {
      pf::CharTextOptions c;
      if (o.path != nullptr) {
        const std::string path = pf::capi::require_string(o.path, "options->path");
        std::error_code error;  // a path that cannot be examined (a symbolic link loop) is read as a
                                // file, and the reader says why it cannot be opened
        c.files = std::filesystem::is_directory(path, error) ? pf::CharTextDataset::text_files_in(path)
                                                             : std::vector<std::string>{path};
      }
      copy_window_options(o, &c);
      auto text = std::make_unique<pf::CharTextDataset>(c);
      info[0] = text->vocab_size();
      info[1] = c.seq_len;
      return text;
    }
    case PF_DATA_TOKEN_FILE: {
      PF_CHECK_ARG(o.vocab >= 1 && o.vocab <= pf::limits::kMaxDimension, "options->vocab is ", o.vocab,
                   ": a token file needs its vocabulary, 1 to ", pf::limits::kMaxDimension,
                   " (e.g. 50257 for GPT-2's tokenizer)");
      pf::TokenFileOptions c;
      copy_window_options(o, &c);
      c.file = pf::capi::require_string(o.path, "options->path");
      c.vocab = o.vocab;
      info[0] = c.vocab;
      info[1] = c.seq_len;
      return std::make_unique<pf::TokenFileDataset>(c);
    }
    case PF_DATA_SYNTHETIC: {
      check_batch_size(o.rows, o.features, "options->features");
      pf::SyntheticClassificationOptions c;
      c.rows = o.rows;
      c.features = o.features;
      c.classes = o.classes;
      c.seed = o.seed;
      c.held_out = o.held_out == 1;
      info[0] = c.features;
      info[1] = c.classes;
      return std::make_unique<pf::SyntheticClassification>(c);
    }
    case PF_DATA_CSV: {
      pf::CsvClassificationOptions c;
      c.path = pf::capi::require_string(o.path, "options->path");
      c.rows = o.rows;
      c.feature_scale = o.feature_scale;
      c.held_out_fraction = o.held_out_fraction;
      c.shuffle_seed = o.seed;
      const pf::CsvClassificationDataset data = pf::CsvClassificationDataset::load(c);
      check_batch_size(o.rows, data.features(), ("the feature count of '" + c.path + "'").c_str());
      info[0] = data.features();
      info[1] = data.classes();
      if (o.held_out == 0) return data.training_source();
      PF_CHECK_ARG(data.held_out_size() > 0, "options->held_out is 1 but '", c.path,
                   "' has no held-out samples: set options->held_out_fraction > 0");
      return data.held_out_source(o.rows);
    }
    case PF_DATA_CIFAR10: {
      check_batch_size(o.rows, pf::Cifar10Dataset::kFeatures, "an image's 3072 values");
      pf::Cifar10Options c;
      c.path = pf::capi::require_string(o.path, "options->path");
      c.rows = o.rows;
      c.held_out_fraction = o.held_out_fraction;
      c.shuffle_seed = o.seed;
      const pf::Cifar10Dataset data = pf::Cifar10Dataset::load(c);
      info[0] = data.features();
      info[1] = data.classes();
      if (o.held_out == 0) return data.training_source();
      PF_CHECK_ARG(data.held_out_size() > 0, "options->held_out is 1 but '", c.path,
                   "' has no held-out records: set options->held_out_fraction > 0");
      return data.held_out_source();
    }
    default:
      pf::fail(pf::ErrorCode::kInvalidArgument, "options->kind is ", o.kind,
               ", not a pf_builtin_data_kind (PF_DATA_CHAR_TEXT, PF_DATA_SYNTHETIC, PF_DATA_CSV, "
               "PF_DATA_TOKEN_FILE or PF_DATA_CIFAR10)");
  }
}

// A partitioner's num_stages: 1 .. the model's top-level layers.
void check_num_stages(const pf::Model& model, int32_t num_stages) {
  const int layers = static_cast<int>(model.layers().size());
  PF_CHECK_ARG(num_stages >= 1 && num_stages <= layers, "num_stages is ", num_stages, ": expected 1 .. ", layers,
               " (the model's top-level layers)");
}

}  // namespace

extern "C" {

void pf_run_options_init(pf_run_options* options) {
  if (options != nullptr) *options = default_run_options();
}

void pf_builtin_data_options_init(pf_builtin_data_options* options) {
  if (options != nullptr) *options = default_builtin_options();
}

pf_status* pf_trainer_set_eval_loader(pf_trainer* trainer, const pf_data_loader* loader) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    std::unique_ptr<pf::capi::LoaderSource> source = pf::capi::adopt_loader(loader);
    trainer->eval_loader.swap(source);
  });
}

pf_status* pf_trainer_evaluate(pf_trainer* trainer, int32_t micro_batches, pf_eval_result* out) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    require(out, "out");
    pf::capi::check_out_struct(*out, kEvalResultV1Size, "out", "pf_eval_result");
    PF_CHECK_ARG(micro_batches >= 1, "micro_batches is ", micro_batches, ": expected >= 1");
    pf::capi::write_struct(out, convert(evaluate_from_start(*trainer, micro_batches)));
  });
}

pf_status* pf_trainer_run(pf_trainer* trainer, const pf_run_options* options, pf_run_result* out) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    require(options, "options");
    if (out != nullptr) pf::capi::check_out_struct(*out, kRunResultV1Size, "out", "pf_run_result");
    const pf_run_options o =
        pf::capi::read_struct(*options, kRunOptionsV1Size, "options", "pf_run_options", default_run_options());
    PF_CHECK_STATE(trainer->loader != nullptr, "the trainer has no data loader: call pf_trainer_set_data_loader");
    PF_CHECK_STATE(o.eval_every == 0 || trainer->eval_loader != nullptr, "options->eval_every is ", o.eval_every,
                   " but the trainer has no eval loader: call pf_trainer_set_eval_loader");
    PF_CHECK_ARG(o.eval_micro_batches >= 0, "options->eval_micro_batches is ", o.eval_micro_batches,
                 ": expected >= 1, or 0 for options.micro_batches");
    pf::TrainingLoopOptions loop;
    loop.steps = o.steps;
    loop.eval_every = o.eval_every;
    loop.eval_micro_batches = o.eval_micro_batches > 0 ? o.eval_micro_batches : trainer->step_micro_batches;
    loop.checkpoint_every = o.checkpoint_every;
    if (o.checkpoint_dir != nullptr) loop.checkpoint_dir = o.checkpoint_dir;
    loop.keep_checkpoints = o.keep_checkpoints;
    if (o.metrics_log != nullptr) loop.metrics_log = o.metrics_log;
    loop.writes_files = trainer->launch_rank == 0;
    loop.sharded_checkpoints = trainer->per_rank_processes;
    loop.field_prefix = "options->";  // field names as the caller knows them; run_training checks them

    pf_run_result result{};
    result.step = trainer->trainer->metrics().step;
    result.loss = result.eval_loss = result.eval_accuracy = std::numeric_limits<double>::quiet_NaN();
    // The loop's held-out source: the eval loader from micro-batch 0 (run_training seeks it).
    pf::DataSource* held_out = nullptr;
    if (trainer->eval_loader) {
      trainer->eval_loader->begin_step(0, loop.eval_micro_batches);
      held_out = trainer->eval_loader.get();
    }
    if (pf::plan::AdaptiveTrainer* adaptive = trainer->adaptive())
      loop.log_fields = [adaptive](int64_t step) { return pf::plan::adaptation_log_fields(adaptive->adaptations(), step); };
    pf::Trainer& t = *trainer->trainer;
    if (o.on_step != nullptr) {
      loop.should_stop = [&, groups = t.process_groups()](const pf::StepReport& r) {
        pf_step_report report{};
        report.struct_size = sizeof(report);
        report.step = r.step;
        report.steps_run = result.steps_run + 1;
        report.tokens = r.result.tokens;
        report.loss = r.result.loss;
        report.lr = r.result.lr;
        report.seconds = r.result.seconds;
        double stop = o.on_step(&report, o.on_step_user_data) != 0 ? 1.0 : 0.0;
        // One process per rank: stop all at the same step when any asks (the pipeline's ranks,
        // then the replicas of each rank).
        if (groups.pipeline) groups.pipeline->all_reduce_sum(&stop, 1, groups.timeout_seconds);
        if (groups.data_parallel) groups.data_parallel->all_reduce_sum(&stop, 1, groups.timeout_seconds);
        return stop > 0;
      };
    }
    // Each step's start, for the loader's error messages (again after every step).
    trainer->loader->begin_step(t.metrics().data_position, trainer->step_micro_batches);
    pf::MemoryCategoryScope scope(pf::MemoryCategory::kActivations);  // charges the copied batches
    pf::run_training(t, *trainer->loader, held_out, loop, [&](const pf::StepReport& r) {
      result.steps_run += 1;
      result.step = r.step;
      result.loss = r.result.loss;
      if (r.eval) {
        result.evaluations += 1;
        result.eval_loss = r.eval->loss;
        result.eval_accuracy = r.eval->accuracy;
      }
      if (!r.checkpoint.empty()) {
        result.checkpoints += 1;
        trainer->last_checkpoint = r.checkpoint;
      }
      result.diverged = r.divergence.empty() ? 0 : 1;
      trainer->divergence = r.divergence;
      result.stopped = r.stopped ? 1 : 0;
      // Where the next pull starts: with overlapping steps the trainer already pulled the next
      // step's micro-batches, so that is past the trained data position.
      trainer->loader->begin_step(trainer->loader->position(), trainer->step_micro_batches);
      return true;
    });
    result.last_checkpoint = result.checkpoints > 0 ? trainer->last_checkpoint.c_str() : nullptr;
    result.divergence = result.diverged ? trainer->divergence.c_str() : nullptr;
    if (out != nullptr) pf::capi::write_struct(out, result);
  });
}

pf_status* pf_trainer_partition(const pf_trainer* trainer, int32_t* layers_per_stage, size_t capacity,
                                size_t* num_stages) {
  return guard(__func__, [&] {
    require(trainer, "trainer");
    require(num_stages, "num_stages");
    const std::vector<int> counts =
        trainer->pipeline() != nullptr
            ? pf::exec::layer_counts(trainer->pipeline()->parts().stages.ranges())
            : std::vector<int>{static_cast<int>(trainer->trainer->model().layers().size())};
    if (capacity > 0) {
      require(layers_per_stage, "layers_per_stage");
      PF_CHECK_ARG(capacity >= counts.size(), "capacity is ", capacity, " but the trainer has ", counts.size(),
                   " stages");
      std::copy(counts.begin(), counts.end(), layers_per_stage);
    }
    *num_stages = counts.size();
  });
}

pf_status* pf_model_partition_balanced(pf_model* model, const pf_tensor_view* inputs, const pf_tensor_view* targets,
                                       int32_t num_stages, int32_t* layers_per_stage) {
  return guard(__func__, [&] {
    require(model, "model");
    require(inputs, "inputs");
    require(targets, "targets");
    require(layers_per_stage, "layers_per_stage");
    pf::Model& m = *model->model;
    check_num_stages(m, num_stages);
    PF_CHECK_STATE(m.device().kind == pf::DeviceKind::kCpu, "the model is on ", m.device().to_string(),
                   ": the balanced partitioner measures on the CPU");
    for (const pf::Parameter* p : m.parameters())
      PF_CHECK_STATE(p->allocated(), "parameter '", p->name, "' has no values in this process");
    pf::Batch sample;
    {
      pf::MemoryCategoryScope scope(pf::MemoryCategory::kActivations);
      sample.inputs = pf::capi::tensor_from_view(*inputs, "inputs");
      sample.targets = pf::capi::tensor_from_view(*targets, "targets");
    }
    m.check_batch(sample.inputs, sample.targets, "the sample micro-batch");
    const std::vector<double> times = pf::exec::measure_layer_times(m, sample, 3);
    // The measurement ran backwards: the gradients go back to zero.
    for (pf::Parameter* p : m.parameters()) std::memset(p->grad.data<char>(), 0, p->grad.nbytes());
    const std::vector<int> counts = pf::exec::layer_counts(pf::exec::partition_balanced(times, num_stages));
    std::copy(counts.begin(), counts.end(), layers_per_stage);
  });
}

pf_status* pf_model_partition_by_parameters(const pf_model* model, int32_t num_stages, int32_t* layers_per_stage) {
  return guard(__func__, [&] {
    require(model, "model");
    require(layers_per_stage, "layers_per_stage");
    const pf::Model& m = *model->model;
    check_num_stages(m, num_stages);
    const std::vector<int> counts = pf::exec::layer_counts(pf::exec::partition_by_parameters(m, num_stages));
    std::copy(counts.begin(), counts.end(), layers_per_stage);
  });
}

pf_status* pf_data_loader_create_builtin(const pf_builtin_data_options* options, pf_data_loader* out,
                                         int64_t info[2]) {
  return guard(__func__, [&] {
    require(options, "options");
    require(out, "out");
    const pf_builtin_data_options o = pf::capi::read_struct(*options, kBuiltinDataOptionsV1Size, "options",
                                                            "pf_builtin_data_options", default_builtin_options());
    int64_t needs[2] = {0, 0};
    auto loader = std::make_unique<BuiltinLoader>();
    loader->source = make_source(o, needs);
    pf_data_loader l{};
    l.struct_size = sizeof(pf_data_loader);
    l.user_data = loader.release();
    l.next = &BuiltinLoader::next;
    l.seek = &BuiltinLoader::seek;
    l.destroy = &BuiltinLoader::destroy;
    *out = l;
    if (info != nullptr) {
      info[0] = needs[0];
      info[1] = needs[1];
    }
  });
}

}  // extern "C"
