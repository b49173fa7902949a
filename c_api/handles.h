// What the opaque C handles are.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "c_api/loader_source.h"
#include "c_api/pipeforge.h"
#include "runtime/execution/pipeline_trainer.h"
#include "runtime/models/model.h"
#include "runtime/planner/fail_slow.h"
#include "runtime/run/make_trainer.h"
#include "runtime/schedules/ir.h"
#include "runtime/schedules/simulator.h"
#include "runtime/train/sequential_trainer.h"

struct pf_model {
  std::shared_ptr<pf::Model> model;  // shared with the trainers that retain it
  std::string json;                  // what pf_model_to_json returned last
};

struct pf_model_builder {
  nlohmann::json input;  // null until an input is set
  nlohmann::json layers = nlohmann::json::array();
  std::string loss = "cross_entropy";
};

struct pf_trainer {
  std::unique_ptr<pf::Trainer> trainer;
  // The pipelined trainer, or null. An adaptive trainer replaces its pipeline when it moves:
  // ask again after every step, never keep the pointer.
  pf::exec::PipelineTrainer* pipeline() const { return pf::pipeline_of(*trainer); }
  pf::plan::AdaptiveTrainer* adaptive() const { return pf::adaptive_of(*trainer); }
  std::string adaptations;                        // what pf_trainer_adaptations_json returned last
  std::string fill_report;                        // what pf_trainer_fill_report_json returned last
  int step_micro_batches = 1;                     // D x m: what one step takes from the loader
  bool per_rank_processes = false;                // one process per rank (options->processes)
  int launch_rank = 0, launch_size = 1;           // this process in the launch (0, 1 for threads)
  std::string trace, svg;                         // what the timeline renderers returned last
  std::unique_ptr<pf::capi::LoaderSource> loader;  // null until pf_trainer_set_data_loader
  std::unique_ptr<pf::capi::LoaderSource> eval_loader;  // null until pf_trainer_set_eval_loader
  std::string last_checkpoint;                    // pf_run_result.last_checkpoint
  std::string divergence;                         // pf_run_result.divergence
};

struct pf_schedule {
  pf::sched::Schedule schedule;
  std::string text;         // what pf_schedule_to_text returned last
  std::string pytorch_csv;  // what pf_schedule_to_pytorch_csv returned last (apart from `text`, so
                            // that neither call invalidates the other's string)
};

struct pf_simulation {
  pf::sched::SimulationResult result;
  std::vector<double> offloaded_bytes;  // per rank per step, under the costs it was simulated with
  std::vector<int> recomputes;          // per rank
  std::string trace, svg, ascii;  // what the renderers returned last
};
