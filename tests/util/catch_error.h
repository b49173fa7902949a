// Runs a callable that must throw pf::Error and returns the error (a test failure, and an kOk error,
// when nothing is thrown), so a test can check its code and message.
#pragma once

#include <gtest/gtest.h>

#include "runtime/core/error.h"

namespace pftest {

template <typename F>
pf::Error catch_error(F f) {
  try {
    f();
  } catch (const pf::Error& e) {
    return e;
  }
  ADD_FAILURE() << "no pf::Error was thrown";
  return pf::Error(pf::ErrorCode::kOk, "");
}

}  // namespace pftest
