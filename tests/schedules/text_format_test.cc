#include "runtime/schedules/text_format.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>

#include "runtime/core/control_characters.h"
#include "runtime/schedules/generators.h"
#include "runtime/schedules/lowering.h"
#include "runtime/schedules/validator.h"
#include "schedule_test_util.h"

namespace pf::sched {
namespace {

using testing::error_of;

const char* const kBuiltins[] = {"gpipe", "1f1b", "interleaved-1f1b", "bfs", "zb-h1", "zb-h2", "zb-v"};

void expect_round_trip(const Schedule& s) {
  const std::string text = schedule_to_text(s);
  const Schedule back = parse_schedule(text);
  EXPECT_EQ(back, s) << text;
  EXPECT_EQ(schedule_to_text(back), text);
}

TEST(TextFormat, OneFOneBExample) {
  const Schedule s = generate_schedule("1f1b", {2, 2});
  EXPECT_EQ(schedule_to_text(s),
            "# pipeforge schedule v1\n"
            "name: 1f1b\n"
            "ranks: 2\n"
            "stages: 2\n"
            "microbatches: 2\n"
            "placement: one-per-rank\n"
            "rank 0: 0F0 0F1 0BW0 0BW1 0STEP\n"
            "rank 1: 1F0 1BW0 1F1 1BW1 1STEP\n");
}

TEST(TextFormat, EveryGeneratorRoundTrips) {
  for (const char* name : kBuiltins) {
    const std::string n = name;
    const bool multi = n == "interleaved-1f1b" || n == "bfs";
    for (int p : {1, 2, 3, 4, 7}) {
      for (int m : {1, 2, 5, 8, 13}) {
        for (int v = 1; v <= (multi ? 4 : 1); ++v) {
          SCOPED_TRACE(n + " p=" + std::to_string(p) + " m=" + std::to_string(m) +
                       " v=" + std::to_string(v));
          const Schedule s = generate_schedule(n, {p, m, v});
          expect_round_trip(s);
          expect_round_trip(lower_communication(s));
        }
      }
    }
  }
}

TEST(TextFormat, CustomPlacementAndEmptyRanksRoundTrip) {
  // Both stages on rank 1; rank 0 idle.
  const Schedule s = testing::from_lists({"", "0F0 1F0 1BW0 0BW0"}, 1, Placement::custom(2, {1, 1}),
                                         "my schedule");
  ASSERT_TRUE(validate(s).ok()) << validate(s).to_string();
  const std::string text = schedule_to_text(s);
  EXPECT_HAS(text, "name: my schedule\n");
  EXPECT_HAS(text, "placement: custom 1 1\n");
  EXPECT_HAS(text, "rank 0:\nrank 1: 0F0");
  expect_round_trip(s);
  Schedule unnamed = s;
  unnamed.name = "";
  expect_round_trip(unnamed);
}

TEST(TextFormat, PyTorchStyleInput) {
  // A hand-written ZB-V-like schedule for 2 ranks: commas, spaces, an idle slot and a trailing comma.
  const std::string text =
      "0F0,0F1,3F0, 3B0,3W0,3F1,3B1,3W1,0B0,0W0,0B1,0W1\n"
      "\n"
      "1F0 2F0 1F1 2F1 None 2B0 2W0 1B0 1W0 2B1 1B1 2W1 1W1,\n";
  const Schedule s = parse_schedule(text);
  EXPECT_EQ(s.name, "custom");
  EXPECT_EQ(s.num_ranks(), 2);
  EXPECT_EQ(s.num_stages(), 4);
  EXPECT_EQ(s.num_micro_batches, 2);
  EXPECT_EQ(s.placement, Placement::v_shape(2));
  EXPECT_EQ(testing::rank_text(s, 0), "0F0 0F1 3F0 3B0 3W0 3F1 3B1 3W1 0B0 0W0 0B1 0W1");
  EXPECT_EQ(s.ranks[1].size(), 12u);
  EXPECT_TRUE(validate(s).ok()) << validate(s).to_string();
  expect_round_trip(s);
  // parse(print(parse(text))) prints identically.
  EXPECT_EQ(schedule_to_text(parse_schedule(schedule_to_text(s))), schedule_to_text(s));
  // It lowers; stages 1 and 2 share rank 1, so the V turns there without a transfer.
  const Schedule low = lower_communication(s);
  EXPECT_TRUE(validate(low).ok());
  for (const auto& list : low.ranks) {
    for (const Action& a : list) {
      EXPECT_FALSE(a.kind == ActionKind::kSendF && a.stage == 1) << "1 -> 2 is local on rank 1";
      EXPECT_FALSE(a.kind == ActionKind::kSendB && a.stage == 2) << "2 -> 1 is local on rank 1";
    }
  }
}

TEST(TextFormat, InferredPlacementKinds) {
  EXPECT_EQ(parse_schedule("0F0 0BW0\n1F0 1BW0\n").placement.kind, Placement::Kind::kOnePerRank);
  EXPECT_EQ(parse_schedule("0F0 2F0 2BW0 0BW0\n1F0 3F0 3BW0 1BW0\n").placement,
            Placement::looped(2, 2));
  const Schedule c = parse_schedule("1F0 1BW0\n0F0 0BW0\n");
  EXPECT_EQ(c.placement, Placement::custom(2, {1, 0}));
  EXPECT_HAS(schedule_to_text(c), "placement: custom 1 0\n");
}

TEST(TextFormat, HeaderWithoutSomeKeys) {
  // Counts and placement may be left out; they are inferred as for PyTorch-style text.
  const Schedule s = parse_schedule("rank 0: 0F0 0BW0\nrank 1: 1F0 1BW0\n");
  EXPECT_EQ(s.num_ranks(), 2);
  EXPECT_EQ(s.placement, Placement::one_per_rank(2));
  // A rank with no line in a header-declared schedule is empty.
  const Schedule t = parse_schedule("ranks: 3\nstages: 1\nplacement: custom 0\nrank 0: 0F0 0BW0\n");
  EXPECT_EQ(t.ranks.size(), 3u);
  EXPECT_TRUE(t.ranks[2].empty());
  // Comments, CRLF and the v1 magic line are fine.
  const Schedule u = parse_schedule("# pipeforge schedule v1\r\n# a comment\r\nrank 0: 0F0 0BW0\r\n");
  EXPECT_EQ(u.ranks[0].size(), 2u);
}

TEST(TextFormat, ParseErrorsNameLineAndToken) {
  EXPECT_HAS(error_of([] { parse_schedule("0F0 0F1\n1F0 1Q0\n"); }), "line 2, token '1Q0'");
  EXPECT_HAS(error_of([] { parse_schedule("0F0 0F1\n1F0 1Q0\n"); }), "unknown kind 'Q'");
  EXPECT_HAS(error_of([] { parse_schedule("0F0 1F0\n1BW0 0BW0\n"); }),
             "line 2, token '1BW0': stage 1 appears on rank 0 (line 1) and on rank 1");
  EXPECT_HAS(error_of([] { parse_schedule("ranks: x\n"); }),
             "line 1: ranks must be a positive integer, got 'x'");
  EXPECT_HAS(error_of([] { parse_schedule("ranks: 0\n"); }), "positive integer, got '0'");
  EXPECT_HAS(error_of([] { parse_schedule("foo: 1\n"); }), "line 1: unknown key 'foo'");
  EXPECT_HAS(error_of([] { parse_schedule("name: a\n\nname: b\n"); }),
             "line 3: 'name' given twice (first on line 1)");
  EXPECT_HAS(error_of([] { parse_schedule("# pipeforge schedule v2\n"); }),
             "line 1: unsupported format version 'v2'");
  EXPECT_HAS(error_of([] { parse_schedule("ranks: 2\nstages: 3\nplacement: one-per-rank\n"); }),
             "line 3: placement one-per-rank needs stages == ranks");
  EXPECT_HAS(error_of([] { parse_schedule("ranks: 2\nplacement: v-shape\nstages: 3\n"); }),
             "line 2: placement v-shape needs stages == 2 * ranks");
  EXPECT_HAS(error_of([] { parse_schedule("ranks: 2\nstages: 3\nplacement: looped\n"); }),
             "placement looped needs stages to be a multiple of ranks");
  EXPECT_HAS(error_of([] { parse_schedule("ranks: 2\nstages: 3\nplacement: custom 0 1\n"); }),
             "line 3: custom placement lists 2 ranks for 3 stages");
  EXPECT_HAS(error_of([] { parse_schedule("ranks: 2\nplacement: custom 0 x\n"); }),
             "line 2, token 'x': expected the rank (a number) of stage 1");
  EXPECT_HAS(error_of([] { parse_schedule("ranks: 2\nplacement: custom 0 2\n"); }),
             "stage 1 placed on rank 2 but ranks: 2");
  EXPECT_HAS(error_of([] { parse_schedule("placement: zigzag\n"); }),
             "line 1, token 'zigzag': unknown placement");
  EXPECT_HAS(error_of([] { parse_schedule("placement: looped 0 1\n"); }),
             "token '0': placement looped takes no stage list");
  EXPECT_HAS(error_of([] { parse_schedule("stages: 2\nrank 0: 0F0 5F0\n"); }),
             "line 2, token '5F0': stage 5 is out of range (stages: 2)");
  EXPECT_HAS(error_of([] { parse_schedule("microbatches: 2\nrank 0: 0F0 0F2\n"); }),
             "line 2, token '0F2': micro-batch 2 is out of range (microbatches: 2)");
  EXPECT_HAS(error_of([] { parse_schedule("rank 0: 0F0\n1F0\n"); }),
             "line 2: a bare action line after 'rank N:' lines (line 1)");
  EXPECT_HAS(error_of([] { parse_schedule("0F0\nrank 1: 1F0\n"); }),
             "line 2: a 'rank N:' line after bare action lines (line 1)");
  EXPECT_HAS(error_of([] { parse_schedule("rank x: 0F0\n"); }), "line 1: bad rank label 'rank x'");
  EXPECT_HAS(error_of([] { parse_schedule("rank 0: 0F0\nrank 0: 0F1\n"); }),
             "line 2: rank 0 appears twice (first on line 1)");
  EXPECT_HAS(error_of([] { parse_schedule("ranks: 1\nrank 0: 0F0\nrank 1: 1F0\n"); }),
             "line 3: rank 1 but the header says ranks: 1");
  EXPECT_HAS(error_of([] { parse_schedule("0F0 2F0\n"); }),
             "stage 1 has no actions on any rank, so its rank cannot be inferred");
  EXPECT_HAS(error_of([] { parse_schedule("# nothing\n\n"); }), "no rank lines");
  EXPECT_HAS(error_of([] { parse_schedule("0STEP\n"); }), "no per-micro-batch actions");
}

TEST(TextFormat, PrinterRefusesWhatItCannotCarry) {
  Schedule s = generate_schedule("1f1b", {2, 2});
  Schedule bad = s;
  bad.name = "two\nlines";
  EXPECT_HAS(error_of([&] { schedule_to_text(bad); }), "line break or leading/trailing blanks");
  bad = s;
  bad.name = " padded";
  EXPECT_HAS(error_of([&] { schedule_to_text(bad); }), "leading/trailing blanks");
  bad = s;
  bad.placement.kind = Placement::Kind::kVShape;
  EXPECT_HAS(error_of([&] { schedule_to_text(bad); }), "placement says v-shape but its stage->rank map");
  bad = s;
  bad.ranks.pop_back();
  EXPECT_HAS(error_of([&] { schedule_to_text(bad); }), "1 action lists for 2 ranks");
}

TEST(TextFormat, Files) {
  const char* tmp = std::getenv("TEST_TMPDIR");
  const std::string dir = tmp ? tmp : "/tmp";
  const std::string path = dir + "/zbv.schedule";
  const Schedule s = generate_schedule("zb-v", {3, 5});
  write_schedule_file(s, path);
  EXPECT_EQ(read_schedule_file(path), s);
  try {
    read_schedule_file(dir + "/missing.schedule");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::kNotFound);  // as every input file (runtime/core/input_file.h)
    EXPECT_HAS(e.what(), "missing.schedule");
  }
  {
    FILE* f = std::fopen(path.c_str(), "w");
    ASSERT_NE(f, nullptr);
    std::fputs("0F0 0X1\n", f);
    std::fclose(f);
  }
  EXPECT_HAS(error_of([&] { read_schedule_file(path); }), "zbv.schedule: schedule text line 1, token '0X1'");
}

TEST(Grid, DrawsRanksBySlotsAndMarks) {
  const Schedule s = generate_schedule("1f1b", {2, 2});
  EXPECT_EQ(schedule_grid(s),
            "slot   |     0     1     2     3     4\n"
            "rank 0 |   0F0   0F1  0BW0  0BW1 0STEP\n"
            "rank 1 |   1F0  1BW0   1F1  1BW1 1STEP\n");
  EXPECT_EQ(schedule_grid(s, {{1, 2}}),
            "slot     |     0     1     2     3     4\n"
            "rank 0   |   0F0   0F1  0BW0  0BW1 0STEP\n"
            "> rank 1 |   1F0  1BW0 [1F1]  1BW1 1STEP\n");
}

TEST(Grid, LongSchedulesShowAWindowAroundTheMark) {
  const Schedule s = generate_schedule("gpipe", {2, 30});
  const std::string grid = schedule_grid(s, {{0, 40}}, 8);
  EXPECT_HAS(grid, "slot     | ...      36      37      38      39      40      41      42      43 ...\n");
  EXPECT_HAS(grid, "> rank 0 | ...    0BW6    0BW7    0BW8    0BW9 [0BW10]   0BW11   0BW12   0BW13 ...\n");
  EXPECT_HAS(schedule_grid(s, {}, 8), "rank 1 | 1F0 1F1 1F2 1F3 1F4 1F5 1F6 1F7 ...\n");
}


// Errors echo the offending token: a hostile schedule file's escape sequences come back as text
// (\x1b, \r, \u009b), never as bytes that drive the terminal; line breaks in messages stay.
TEST(TextFormat, ErrorsEscapeTheControlCharactersTheyEcho) {
  const std::string message = error_of([] { parse_schedule("0F0 0X\x1b[2J\x01\xc2\x9b" "31m\x7f\n"); });
  EXPECT_EQ(message.find('\x1b'), std::string::npos) << message;
  EXPECT_EQ(message.find('\x01'), std::string::npos) << message;
  EXPECT_EQ(message.find('\x7f'), std::string::npos) << message;
  EXPECT_EQ(message.find("\xc2\x9b"), std::string::npos) << message;
  EXPECT_HAS(message, "token '0X\\x1b[2J\\x01\\u009b31m\\x7f'");
  EXPECT_EQ(escape_control_characters("\r"), "\\r");
  EXPECT_EQ(escape_control_characters("a\nb\tc \xc3\xa9"), "a\nb\tc \xc3\xa9");  // UTF-8 text stays
  EXPECT_EQ(escape_control_characters(escape_control_characters("\x1b")), "\\x1b");
}

}  // namespace
}  // namespace pf::sched
