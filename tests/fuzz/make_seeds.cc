// Writes the generated part of the seed corpus (bazel run //tests/fuzz:make_seeds -- $PWD/tests/fuzz/corpus):
// schedules from every generator (plain, lowered, with activation policies) in the text form, the
// to_json of the three presets, and a real checkpoint of the tiny trainer after two steps. The
// hand-written seeds live next to the generated ones: model JSON in corpus/model_json/, PyTorch CSV
// schedules (pytorch_csv_*.csv) in corpus/schedule_text/.
#include <cstdio>
#include <fstream>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/core/error.h"
#include "runtime/core/log.h"
#include "runtime/models/builders.h"
#include "runtime/schedules/activation_policy.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/schedule_request.h"
#include "runtime/schedules/text_format.h"
#include "tests/fuzz/tiny_trainer.h"

namespace {

using namespace pf::sched;

void write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
  std::printf("%s (%zu bytes)\n", path.c_str(), text.size());
}

void schedules(const std::string& dir) {
  std::set<std::string> written;  // zb-v ignores the chunk count: skip repeats
  for (const std::string& name : generator_names()) {
    for (int p : {2, 4}) {
      for (int v : {1, 2}) {
        ScheduleRequest r;
        r.name = name;
        r.ranks = p;
        r.micro_batches = 2 * p;
        r.chunks = v;
        Schedule s;
        try {
          s = make_schedule(r);
        } catch (const pf::Error&) {
          continue;  // this generator does not take these options
        }
        const std::string stem = dir + "/" + name + "_p" + std::to_string(p) + "_m" + std::to_string(2 * p) + "_v" + std::to_string(v);
        if (!written.insert(schedule_to_text(s)).second) continue;
        write(stem + ".txt", schedule_to_text(s));
        if (p == 2) write(stem + "_lowered.txt", schedule_to_text(lower_communication(s)));
      }
    }
  }
  ScheduleRequest r;
  r.name = "1f1b";
  r.ranks = 4;
  r.micro_batches = 8;
  const Schedule base = make_schedule(r);
  const CostModel costs = CostModel::uniform(base.num_stages());
  for (ActivationPolicy policy : {ActivationPolicy::kRecompute, ActivationPolicy::kOffloadHost, ActivationPolicy::kBalance,
                                  ActivationPolicy::kSelective}) {
    const double budget = policy == ActivationPolicy::kSelective ? min_activation_budget(base, costs) : 0.0;
    write(dir + "/1f1b_p4_m8_" + activation_policy_name(policy) + ".txt",
          schedule_to_text(apply_activation_policy(base, policy, costs, budget)));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_seeds CORPUS_DIR (with schedule_text/, model_json/, checkpoint/)\n");
    return 2;
  }
  const std::string corpus = argv[1];
  pf::set_log_sink([](pf::LogLevel, const std::string&) {}, pf::LogLevel::kOff);
  schedules(corpus + "/schedule_text");

  pf::MlpConfig mlp;
  mlp.input_dim = 8;
  mlp.hidden = {16, 8};
  mlp.classes = 3;
  write(corpus + "/model_json/mlp_to_json.json", pf::build_mlp(mlp)->to_json().dump(1));
  pf::GptConfig gpt;
  gpt.vocab = 20;
  gpt.seq_len = 8;
  gpt.d_model = 16;
  gpt.heads = 2;
  gpt.layers = 1;
  write(corpus + "/model_json/gpt_to_json.json", pf::build_gpt(gpt)->to_json().dump(1));
  pf::LlamaConfig llama;
  llama.vocab = 20;
  llama.seq_len = 8;
  llama.d_model = 16;
  llama.heads = 4;
  llama.kv_heads = 2;
  llama.layers = 1;
  llama.mlp_hidden = 24;
  write(corpus + "/model_json/llama_to_json.json", pf::build_llama(llama)->to_json().dump(1));

  auto trainer = pf::fuzz::make_tiny_trainer();
  for (int i = 0; i < 2; ++i) trainer->step(pf::fuzz::tiny_batch());
  pf::save_checkpoint(*trainer, corpus + "/checkpoint/tiny_mlp_adamw.ckpt");
  std::printf("%s/checkpoint/tiny_mlp_adamw.ckpt\n", corpus.c_str());
  return 0;
}
