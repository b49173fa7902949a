// Work run in a pipeline's bubbles (PipeFill; docs/PLANNING.md, "Filling the bubbles"): what
// TrainingConfig::fill names ("sweep:FILE", runtime/sweep/sweep_fill.h), built by make_trainer and
// kept in the trainer's config, so a front-end can ask it what it did (fill_job_of, make_trainer.h).
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

namespace pf {

class FillJob {
 public:
  virtual ~FillJob() = default;
  // Runs work on `rank` while the next piece is predicted to fit in what is left of budget_seconds;
  // returns the seconds taken. Called by every rank's worker thread, each with its own rank.
  virtual double run(int rank, double budget_seconds) = 0;
  // What it has done so far, as one JSON object ({"kind": "sweep", ...}).
  virtual nlohmann::json report() const = 0;
  // A report() of this job for people: a first line of progress, then lines of detail (no trailing
  // newline). It takes the report rather than making one: a report can be costly (a sweep evaluates
  // its models), and a front-end that prints both makes it once.
  virtual std::string summary(const nlohmann::json& report) const = 0;
};

}  // namespace pf
