// A Timeline is "what ran where and when": for every rank, the actions it executed with their start
// and end times. The simulator produces one from a Schedule and a CostModel; the executor can fill
// one with measured times. Nothing here depends on how the times were obtained.
//
// Renderers:
//   to_chrome_trace  Chrome trace-event JSON (chrome://tracing, https://ui.perfetto.dev): one track
//                    per rank ("rank N"), one complete event ("ph":"X") per action, colour per kind;
//                    a TP collective is an event "TP_F <action>" / "TP_B <action>" (category "TP")
//                    nested in its action, or on a track "rank N TP" when it runs in the background.
//   to_svg           a standalone SVG drawing: one row per rank, one <rect class="action"> per action,
//                    labelled with the micro-batch, a time axis and a legend. Ranks that hold
//                    several chunks (stages) shade each chunk lighter and label "stage:micro-batch";
//                    SEND/RECV are thin strips at the row's foot, RECV hatched (waiting, class
//                    "action wait"); copies (OFFLOAD, RELOAD) have a lane under their rank's row;
//                    STEP and UPDATE are at least 3 px wide. A TP collective (TimedAction::tp) is
//                    a <rect class="tp"> in its own colour: over its action where the
//                    rank waits in it, on a "TP" lane under the rank's row where it runs in the
//                    background.
//   to_ascii_grid    a terminal grid: one row per rank, one character per time slot.
#pragma once

#include <string>
#include <vector>

#include "runtime/schedules/ir.h"

namespace pf::sched {

// The tensor-parallel collective of an action (simulator.h: CostModel::t_tp_f after an F or a
// RECOMPUTE, "TP_F"; t_tp_b after B's compute, "TP_B"). None when end <= start.
struct TimedCollective {
  double start = 0.0;
  double end = 0.0;
  // false: inside its action's [start, end], the rank waiting in it; true: on the rank's TP lane
  // while the rank goes on (SimulationOptions::overlap_tensor_parallel_backward), possibly after
  // its action's end.
  bool background = false;

  double duration() const { return end - start; }
};

struct TimedAction {
  Action action;
  double start = 0.0;
  double end = 0.0;
  TimedCollective tp;

  double duration() const { return end - start; }
  bool has_tensor_parallel() const { return tp.end > tp.start; }
};

// "TP_F" for the collective of an F or RECOMPUTE, "TP_B" for a B's or BW's, "" otherwise.
const char* tensor_parallel_label(ActionKind kind);

struct Timeline {
  // ranks[r] = what rank r ran, in its execution order. Compute actions do not overlap on a rank;
  // zero-length SEND/RECV marks may sit anywhere in time (a posted RECV completes when its data
  // arrives).
  std::vector<std::vector<TimedAction>> ranks;
  // Unit of start/end, used by the renderers' labels only ("us", "ms", "units", ...).
  std::string time_unit = "units";

  int num_ranks() const { return static_cast<int>(ranks.size()); }
  size_t num_actions() const;
  double begin_time() const;  // earliest start (0 for an empty timeline)
  double end_time() const;    // latest end, TP collectives included (0 for an empty timeline)
};

// Colour of an action kind: the catapult trace-viewer palette name used as "cname" and its RGB.
struct KindColour {
  const char* cname;  // e.g. "rail_response"
  const char* rgb;    // e.g. "#4387fd"
};
KindColour kind_colour(ActionKind kind);
// The colour of TP collectives (TimedAction::tp): catapult's "generic_work", a mid grey.
KindColour tensor_parallel_colour();

struct ChromeTraceOptions {
  // Multiplies start/end to get microseconds (the trace format's unit). With the simulator's
  // abstract units, 1.0 makes one unit one microsecond; with milliseconds use 1000.
  double to_microseconds = 1.0;
  std::string process_name = "PipeForge pipeline";
  int pid = 0;
};
std::string to_chrome_trace(const Timeline& timeline, const ChromeTraceOptions& options = {});

struct SvgOptions {
  double width = 1200.0;       // total drawing width in pixels
  double row_height = 26.0;    // height of one rank row
  bool legend = true;          // draw the legend below the axis
  std::string title;           // optional title line
  double time_end = 0.0;       // > 0: the axis runs from 0 to at least this (drawings stacked on one axis)
  std::string id_prefix;       // prefixes the drawing's element ids (several drawings in one page)
};
std::string to_svg(const Timeline& timeline, const SvgOptions& options = {});

// One row per rank, `width` characters spanning [begin_time, end_time]. A slot shows the kind of
// the action that covers most of it (F, B, W, X = fused BW, R recompute, O offload, L reload,
// S step, A all-reduce) or '.' when the rank is idle for most of the slot. Zero-duration actions
// (SEND/RECV in a lowered schedule) are not drawn. When the timeline has copies (OFFLOAD, RELOAD)
// each rank gets a second row, "copy", with its copy lane. A header gives the time scale, a legend
// follows.
std::string to_ascii_grid(const Timeline& timeline, int width = 100);

// `text` with <, >, &, " and ' escaped for XML and HTML text and attribute values.
std::string xml_escape(const std::string& text);

// The character to_ascii_grid uses for a kind ('\0' for kinds it never draws).
char ascii_grid_char(ActionKind kind);

}  // namespace pf::sched
