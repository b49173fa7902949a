// The SWIG interface shared by every language. Each language's own file (python/pipeforge_python.i,
// java/pipeforge_java.i, go/pipeforge_go.i) declares the module, its typemaps, its error handling
// and its renames, then includes this file.
//
// What is wrapped is bindings/pipeforge_core.h, a thin C++ layer over the C API: one class per
// handle (its destructor and close() call pf_*_destroy). The raw pf_* functions are not wrapped.
//
// Typemaps the language files provide (by parameter name, so they match the core header):
//   (const float* data, size_t count), (const int32_t* data, size_t count)  array in, copied
//   (const int64_t* shape, size_t ndim), (const int64_t* values, size_t count)  int64 array in
//   (const double* values, size_t count)                                    float64 array in (costs)
//   (const int64_t* values, size_t count) also carries TrainerOptions::set_layers_per_stage
//   (float* out, size_t count), (int32_t* out, size_t count)                array the call fills
//   std::vector<int64_t>                                                    a returned shape
// Python and Java hide the trailing `pipeforge::Status* status` (NULL: errors throw, and their
// %exception turns pipeforge::Error into the language's exception); Go passes a Status.
//
// Features and renames must come before the %include they modify, or SWIG ignores them.

%{
#include "bindings/pipeforge_core.h"
%}

%include <stdint.i>
%include <std_string.i>

#if !defined(SWIGGO)
// Python and Java: no Status argument; the core throws pipeforge::Error.
%typemap(in, numinputs=0) pipeforge::Status* status "$1 = nullptr;"
%ignore pipeforge::Status;
#endif

// Factories hand a new object to the language, which owns (and destroys) it.
%newobject pipeforge::Model::from_json;
%newobject pipeforge::Model::from_hf;
%newobject pipeforge::Model::mlp;
%newobject pipeforge::Model::gpt;
%newobject pipeforge::Trainer::create;
%newobject pipeforge::Schedule::generate;
%newobject pipeforge::Schedule::parse;
%newobject pipeforge::Schedule::parse_pytorch_csv;
%newobject pipeforge::Schedule::lower;
%newobject pipeforge::Schedule::apply_activation_policy;
%newobject pipeforge::Schedule::simulate;
%newobject pipeforge::Schedule::simulate_comm;
%newobject pipeforge::Plan::create;
%newobject pipeforge::GlmModel::train;
%newobject pipeforge::GlmModel::train_libsvm;

// Serves micro-batches from the language: a director class.
%feature("director") pipeforge::LoaderCallback;
// Watches a training run from the language: a director class.
%feature("director") pipeforge::StepCallback;

// Results are read-only; the preset configs keep `hidden` behind set_hidden/hidden_width.
%immutable pipeforge::StepResult::loss;
%immutable pipeforge::StepResult::grad_norm;
%immutable pipeforge::StepResult::samples;
%immutable pipeforge::StepResult::tokens;
%immutable pipeforge::StepResult::seconds;
%immutable pipeforge::StepResult::lr;
%immutable pipeforge::StepResult::bubble_rate;
%immutable pipeforge::EvalResult::loss;
%immutable pipeforge::EvalResult::accuracy;
%immutable pipeforge::EvalResult::micro_batches;
%immutable pipeforge::EvalResult::samples;
%immutable pipeforge::EvalResult::targets;
%immutable pipeforge::RunResult::step;
%immutable pipeforge::RunResult::steps_run;
%immutable pipeforge::RunResult::loss;
%immutable pipeforge::RunResult::eval_loss;
%immutable pipeforge::RunResult::eval_accuracy;
%immutable pipeforge::RunResult::evaluations;
%immutable pipeforge::RunResult::checkpoints;
%immutable pipeforge::RunResult::diverged;
%immutable pipeforge::RunResult::stopped;
%immutable pipeforge::RunResult::last_checkpoint;
%immutable pipeforge::RunResult::divergence;
%immutable pipeforge::DataInfo::vocab_size;
%immutable pipeforge::DataInfo::seq_len;
%immutable pipeforge::DataInfo::features;
%immutable pipeforge::DataInfo::classes;
%immutable pipeforge::Metrics::step;
%immutable pipeforge::Metrics::last_loss;
%immutable pipeforge::Metrics::last_grad_norm;
%immutable pipeforge::Metrics::tokens_per_second;
%immutable pipeforge::Metrics::total_tokens;
%immutable pipeforge::Metrics::data_position;
%immutable pipeforge::SimulationSummary::makespan;
%immutable pipeforge::SimulationSummary::ideal;
%immutable pipeforge::SimulationSummary::bubble_rate;
%immutable pipeforge::SimulationSummary::num_ranks;
%immutable pipeforge::SimulationSummary::max_span;
%immutable pipeforge::SimulationSummary::span_bubble_rate;
%immutable pipeforge::RankStats::busy;
%immutable pipeforge::RankStats::idle;
%immutable pipeforge::RankStats::first_start;
%immutable pipeforge::RankStats::finish;
%immutable pipeforge::RankStats::peak_activations;
%immutable pipeforge::RankStats::peak_activation_bytes;
%immutable pipeforge::RankStats::offloaded_bytes;
%immutable pipeforge::RankStats::recomputes;
%immutable pipeforge::RankStats::local;
%immutable pipeforge::ProcessInfo::rank;
%immutable pipeforge::ProcessInfo::size;
%ignore pipeforge::MlpConfig::hidden;
%ignore pipeforge::TrainerOptions::layers_per_stage;  // set_layers_per_stage / layers_in_stage
// A MicroBatch is filled by a loader, never read back by one.
%ignore pipeforge::MicroBatch::inputs;
%ignore pipeforge::MicroBatch::targets;

%immutable pipeforge::GlmResult::epochs;
%immutable pipeforge::GlmResult::objective;
%immutable pipeforge::GlmResult::dual_objective;
%immutable pipeforge::GlmResult::duality_gap;
%immutable pipeforge::GlmResult::seconds;
%immutable pipeforge::GlmResult::accuracy;
%immutable pipeforge::GlmResult::converged;
%immutable pipeforge::GlmResult::features;
%immutable pipeforge::GlmResult::negative_label;
%immutable pipeforge::GlmResult::positive_label;

%include "bindings/pipeforge_core.h"
