// Whether this test binary is built under AddressSanitizer (tools/sanitize.sh asan; GCC and clang
// define __SANITIZE_ADDRESS__, clang also through __has_feature). Instrumented code runs 5 to 25
// times slower: the heaviest sweeps run a smaller grid of the same cases there, the same code
// paths; the normal build runs every case.
#pragma once

namespace pf::testing {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kUnderSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kUnderSanitizer = true;
#else
inline constexpr bool kUnderSanitizer = false;
#endif
#else
inline constexpr bool kUnderSanitizer = false;
#endif

}  // namespace pf::testing
