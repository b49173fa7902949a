// What the fuzz targets count as a finding. Each target runs its body through run_input():
//  * pf::Error is the runtime refusing bad input: the expected outcome, except kInternal (one of the
//    runtime's own invariants broke) and a kOutOfMemory whose message says an allocation failed
//    ("cannot allocate ..."): the input got that far without a documented limit refusing it. A
//    kOutOfMemory from a limit check (e.g. "the model's parameters would take N bytes, more than
//    the limit") is a refusal;
//  * any other exception (std::bad_alloc, std::out_of_range, nlohmann::json errors, ...) is a finding;
//  * so is a failed FUZZ_CHECK (an oracle such as "print -> parse gives the same schedule").
// A finding prints "FUZZ FINDING (<target>): ..." and aborts: libFuzzer records a crash, the replay
// tests fail. ASan/UBSan (fuzz builds) report memory errors and undefined behaviour themselves.
#pragma once

#include <exception>
#include <string>
#include <typeinfo>

#include "runtime/core/error.h"

namespace pf::fuzz {

[[noreturn]] void finding(const char* target, const std::string& what);

// A private folder for a target's files (mkdtemp under TEST_TMPDIR, TMPDIR or /tmp, named after
// the target); a failure is a harness finding.
std::string make_work_dir(const char* target);

// Silences the runtime's log sink ("loaded checkpoint ..." lines would flood the fuzzer's output).
void quiet_runtime_log();

// True for the errors above that are findings although they are pf::Errors.
inline bool is_finding(const Error& e) {
  return e.code() == ErrorCode::kInternal ||
         (e.code() == ErrorCode::kOutOfMemory && std::string(e.what()).find("cannot allocate") != std::string::npos);
}

template <typename Body>
void run_input(const char* target, Body&& body) {
  try {
    body();
  } catch (const Error& e) {
    if (is_finding(e)) {
      finding(target, std::string("pf::Error ") + error_code_name(e.code()) + ": " + e.what());
    }
  } catch (const std::exception& e) {
    finding(target, std::string("exception other than pf::Error (") + typeid(e).name() + "): " + e.what());
  } catch (...) {
    finding(target, "exception of an unknown type");
  }
}

// Runs `step` where a refusal would itself be a finding (e.g. re-parsing printed text): any
// exception, pf::Error included, is reported as "<what>: ...". Returns what `step` returns.
template <typename Step>
auto must_succeed(const char* target, const std::string& what, Step&& step) -> decltype(step()) {
  try {
    return step();
  } catch (const std::exception& e) {
    finding(target, what + ": " + e.what());
  }
}

}  // namespace pf::fuzz

#define FUZZ_CHECK(target, cond, what)                                                    \
  do {                                                                                    \
    if (!(cond)) ::pf::fuzz::finding(target, std::string("check failed: ") + (what));    \
  } while (0)
