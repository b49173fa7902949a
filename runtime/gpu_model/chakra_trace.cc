#include "runtime/gpu_model/chakra_trace.h"

#include <cmath>
#include <cstdint>
#include <sstream>

#include <google/protobuf/io/zero_copy_stream_impl_lite.h>
#include <google/protobuf/util/delimited_message_util.h>

#include "runtime/core/error.h"
#include "runtime/core/output_file.h"
#include "runtime/gpu_model/chakra/et_def.pb.h"

namespace pf::gpu {
namespace {

namespace proto = ChakraProtoMsg;

void attr(proto::Node* node, const std::string& name, int64_t value) {
  proto::AttributeProto* a = node->add_attr();
  a->set_name(name);
  a->set_int64_val(value);
}

void flag(proto::Node* node, const std::string& name, bool value) {
  proto::AttributeProto* a = node->add_attr();
  a->set_name(name);
  a->set_bool_val(value);
}

uint64_t micros(double seconds) { return static_cast<uint64_t>(std::llround(std::max(0.0, seconds) * 1e6)); }

// One rank's nodes, each depending on the previous one.
class RankTrace {
 public:
  proto::Node* add(const std::string& name, proto::NodeType type) {
    nodes_.emplace_back();
    proto::Node& n = nodes_.back();
    n.set_id(nodes_.size() - 1);
    n.set_name(name);
    n.set_type(type);
    if (nodes_.size() > 1) n.add_ctrl_deps(nodes_.size() - 2);
    flag(&n, "is_cpu_op", false);
    return &n;
  }
  uint64_t last_id() const { return nodes_.size() - 1; }
  const std::vector<proto::Node>& nodes() const { return nodes_; }

 private:
  std::vector<proto::Node> nodes_;
};

void collective(RankTrace& t, const std::string& name, double bytes, proto::CollectiveCommType type) {
  proto::Node* n = t.add(name, proto::COMM_COLL_NODE);
  n->add_data_deps(n->id() - 1);
  attr(n, "comm_type", type);
  attr(n, "comm_size", static_cast<int64_t>(std::llround(bytes)));
}

}  // namespace

int write_chakra_traces(const sched::Schedule& schedule, const Grid& grid, const TraceCosts& c, const std::string& dir,
                        const std::string& prefix) {
  PF_CHECK_ARG(!prefix.empty() && prefix.find('/') == std::string::npos, "the trace prefix '", prefix,
               "' must be a file name (no '/')");
  const int S = schedule.num_stages(), P = schedule.num_ranks();
  PF_CHECK_ARG(P == grid.pipeline, "the schedule has ", P, " ranks, the grid P = ", grid.pipeline);
  for (const auto* v : {&c.forward_s, &c.backward_input_s, &c.backward_weight_s, &c.forward_collective_bytes,
                        &c.backward_collective_bytes})
    PF_CHECK_ARG(static_cast<int>(v->size()) == S, "trace costs: ", v->size(), " stages, the schedule has ", S);
  PF_CHECK_ARG(static_cast<int>(c.gradient_bytes.size()) == P, "trace costs: gradient bytes for ",
               c.gradient_bytes.size(), " ranks, the schedule has ", P);
  const int64_t m = schedule.num_micro_batches;
  // A message's tag: its direction, the receiving stage and the micro-batch.
  auto tag = [&](bool gradient, int stage, int mb) {
    const int64_t t = ((gradient ? 1 : 0) * int64_t{S} + stage) * m + mb;
    PF_CHECK_ARG(t <= INT32_MAX, "too many messages for Chakra's 32-bit tags (", S, " stages x ", m, " micro-batches)");
    return t;
  };
  int written = 0;
  for (int pp = 0; pp < P; ++pp) {
    for (int dp = 0; dp < grid.data; ++dp) {
      for (int tp = 0; tp < grid.tensor; ++tp) {
        const int rank = grid.rank(tp, dp, pp);
        auto peer = [&](int stage) { return grid.rank(tp, dp, schedule.placement.rank_of(stage)); };
        RankTrace t;
        auto recv = [&](int from_stage, int64_t message_tag, const std::string& name) {
          proto::Node* n = t.add(name, proto::COMM_RECV_NODE);
          attr(n, "comm_src", peer(from_stage));
          attr(n, "comm_tag", message_tag);
          attr(n, "comm_size", static_cast<int64_t>(std::llround(c.message_bytes)));
        };
        auto send = [&](int to_stage, int64_t message_tag, const std::string& name) {
          proto::Node* n = t.add(name, proto::COMM_SEND_NODE);
          n->add_data_deps(n->id() - 1);
          attr(n, "comm_dst", peer(to_stage));
          attr(n, "comm_tag", message_tag);
          attr(n, "comm_size", static_cast<int64_t>(std::llround(c.message_bytes)));
        };
        for (const sched::Action& a : schedule.ranks[static_cast<size_t>(pp)]) {
          const int s = a.stage, mb = a.micro_batch;
          const std::string id = std::to_string(s) + "_" + std::to_string(mb);
          const bool prev_elsewhere = s > 0 && schedule.placement.rank_of(s - 1) != pp;
          const bool next_elsewhere = s + 1 < S && schedule.placement.rank_of(s + 1) != pp;
          switch (a.kind) {
            case sched::ActionKind::kForward: {
              if (prev_elsewhere) recv(s - 1, tag(false, s, mb), "RECV_F " + id);
              proto::Node* n = t.add("F " + id, proto::COMP_NODE);
              n->set_duration_micros(micros(c.forward_s[static_cast<size_t>(s)]));
              if (prev_elsewhere) n->add_data_deps(n->id() - 1);  // the RECV just before
              if (c.forward_collective_bytes[static_cast<size_t>(s)] > 0)
                collective(t, "TP F " + id, c.forward_collective_bytes[static_cast<size_t>(s)], proto::ALL_REDUCE);
              if (next_elsewhere) send(s + 1, tag(false, s + 1, mb), "SEND_F " + id);
              break;
            }
            case sched::ActionKind::kBackwardInput:
            case sched::ActionKind::kBackward: {
              const bool fused = a.kind == sched::ActionKind::kBackward;
              if (next_elsewhere) recv(s + 1, tag(true, s, mb), "RECV_B " + id);
              proto::Node* n = t.add((fused ? "BW " : "B ") + id, proto::COMP_NODE);
              n->set_duration_micros(micros(c.backward_input_s[static_cast<size_t>(s)] +
                                            (fused ? c.backward_weight_s[static_cast<size_t>(s)] : 0.0)));
              if (next_elsewhere) n->add_data_deps(n->id() - 1);  // the RECV just before
              if (c.backward_collective_bytes[static_cast<size_t>(s)] > 0)
                collective(t, "TP B " + id, c.backward_collective_bytes[static_cast<size_t>(s)], proto::ALL_REDUCE);
              if (prev_elsewhere) send(s - 1, tag(true, s - 1, mb), "SEND_B " + id);
              break;
            }
            case sched::ActionKind::kRecompute: {  // the forward again, before its backward
              proto::Node* n = t.add("R " + id, proto::COMP_NODE);
              n->set_duration_micros(micros(c.forward_s[static_cast<size_t>(s)]));
              break;
            }
            case sched::ActionKind::kBackwardWeight: {
              proto::Node* n = t.add("W " + id, proto::COMP_NODE);
              n->set_duration_micros(micros(c.backward_weight_s[static_cast<size_t>(s)]));
              break;
            }
            case sched::ActionKind::kSendF:
            case sched::ActionKind::kRecvF:
            case sched::ActionKind::kSendB:
            case sched::ActionKind::kRecvB:
            case sched::ActionKind::kStep:
            case sched::ActionKind::kAllReduce:
              break;  // the messages above stand for these; the step's end is written below
            default:
              fail(ErrorCode::kInvalidArgument, "a Chakra trace does not express the schedule's ",
                   sched::action_to_string(a), " (offload, balance, asynchronous or local-learning actions)");
          }
        }
        if (grid.data > 1)
          collective(t, "DP gradient all-reduce", c.gradient_bytes[static_cast<size_t>(pp)], proto::ALL_REDUCE);
        proto::Node* opt = t.add("optimizer step", proto::COMP_NODE);
        opt->set_duration_micros(micros(c.optimizer_s));

        std::string bytes;
        {
          google::protobuf::io::StringOutputStream stream(&bytes);
          proto::GlobalMetadata meta;
          meta.set_version("0.0.4");
          for (const auto& [name, value] : {std::pair<const char*, int64_t>{"rank", rank},
                                            {"tensor_parallel", grid.tensor},
                                            {"pipeline_parallel", grid.pipeline},
                                            {"data_parallel", grid.data}}) {
            proto::AttributeProto* a = meta.add_attr();
            a->set_name(name);
            a->set_int64_val(value);
          }
          PF_CHECK_STATE(google::protobuf::util::SerializeDelimitedToZeroCopyStream(meta, &stream),
                         "serialising a Chakra trace failed");
          for (const proto::Node& n : t.nodes())
            PF_CHECK_STATE(google::protobuf::util::SerializeDelimitedToZeroCopyStream(n, &stream),
                           "serialising a Chakra trace failed");
        }
        write_output_file(dir + "/" + prefix + "." + std::to_string(rank) + ".et", bytes, "--chakra");
        ++written;
      }
    }
  }
  return written;
}

}  // namespace pf::gpu
