// The packed MLP sweep against training its models one after another in PipeForge (the library's
// MLP and sequential trainer), at grid sizes of the ParallelMLPs paper that fit here. One JSON
// object: per setting, the packed sweep's seconds on 1 and 2 threads, the models trained alone (one
// per hidden width and activation the library's MLP has, repeat 0) and their mean seconds, the
// whole grid alone extrapolated from that mean, and the speed-ups. bench/sweep/run.sh adds PyTorch.
//   bazel run -c opt //bench/sweep:sweep_bench [-- --quick]
#include <chrono>
#include <cstring>
#include <iostream>
#include <thread>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"

#include "runtime/sweep/alone.h"
#include "runtime/sweep/sweep.h"

namespace {

using pf::sweep::SweepSpec;


}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  struct Setting {
    int64_t features, classes, samples, repeats;
  };
  // 16 hidden widths x 4 activations x repeats models; the paper's features 5-100, samples 100-10k.
  const std::vector<Setting> settings = quick ? std::vector<Setting>{{5, 2, 500, 2}, {20, 4, 1000, 1}}
                                              : std::vector<Setting>{{5, 2, 1000, 16}, {20, 4, 5000, 8}, {100, 10, 10000, 4}};
  nlohmann::json out = {{"benchmark", "packed MLP sweep vs the same models trained alone"},
                        {"hardware_threads", std::thread::hardware_concurrency()},
                        {"settings", nlohmann::json::array()}};
  for (const Setting& st : settings) {
    SweepSpec spec;
    spec.features = st.features;
    spec.classes = st.classes;
    spec.samples = st.samples;
    spec.repeats = st.repeats;
    spec.hidden.clear();
    for (int64_t h = 4; h <= 64; h += 4) spec.hidden.push_back(h);
    spec.activations = {"relu", "gelu", "tanh", "sigmoid"};
    spec.lr = {1e-2};
    spec.batch = 32;
    spec.epochs = 1;
    const std::shared_ptr<const pf::sweep::SweepData> data = pf::sweep::load_sweep_data(spec);
    const std::vector<pf::sweep::MlpSpec> models = spec.models();

    double packed[2];
    for (int threads : {1, 2}) {
      pf::sweep::Sweep sweep(spec, data, threads);
      packed[threads - 1] = pf::bench::seconds_of([&] { sweep.run(threads); });
    }
    // Alone: repeat 0's relu and gelu model of every width (the grid's first models).
    nlohmann::json alone = nlohmann::json::array();
    double alone_total = 0;
    int alone_count = 0;
    for (size_t i = 0; i < models.size() && models[i].seed == spec.seed; ++i) {
      if (models[i].activation != pf::sweep::Activation::kRelu && models[i].activation != pf::sweep::Activation::kGelu)
        continue;
      const pf::sweep::AloneRun run = pf::sweep::train_alone(spec, data, static_cast<int64_t>(i));
      alone_total += run.train_seconds;
      ++alone_count;
    }
    const double per_model = alone_total / alone_count;
    const double all_alone = per_model * static_cast<double>(models.size());
    out["settings"].push_back({{"features", st.features},
                               {"classes", st.classes},
                               {"samples", st.samples},
                               {"train_rows", data->train_rows()},
                               {"models", models.size()},
                               {"hidden", spec.hidden},
                               {"activations", spec.activations},
                               {"batch", spec.batch},
                               {"epochs", spec.epochs},
                               {"steps_per_model", spec.epochs * ((data->train_rows() + spec.batch - 1) / spec.batch)},
                               {"packed_seconds_1_thread", packed[0]},
                               {"packed_seconds_2_threads", packed[1]},
                               {"alone_models_timed", alone_count},
                               {"alone_seconds_per_model", per_model},
                               {"alone_seconds_all_models", all_alone},
                               {"speedup_1_thread", all_alone / packed[0]},
                               {"speedup_2_threads", all_alone / packed[1]}});
    std::cerr << "features " << st.features << ", " << models.size() << " models: packed " << packed[0] << " s (1 thread), "
              << packed[1] << " s (2), alone " << all_alone << " s\n";
  }
  std::cout << out.dump(1) << std::endl;
  return 0;
}
