// Counter-based random numbers: every value is a pure function of (seed, stream, index), so a data
// source can jump to any position without replaying the ones before it, and results do not depend
// on the standard library's distributions (which differ between implementations).
#pragma once

#include <cmath>
#include <cstdint>

namespace pf::data {

// SplitMix64 finaliser: a bijective 64-bit mixer.
inline uint64_t mix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

inline uint64_t hash_words(uint64_t a, uint64_t b) { return mix64(mix64(a) ^ (b + 0x632BE59BD9B4E019ull)); }
inline uint64_t hash_words(uint64_t a, uint64_t b, uint64_t c) { return hash_words(hash_words(a, b), c); }
inline uint64_t hash_words(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return hash_words(hash_words(a, b, c), d);
}

// Uniform in the open interval (0, 1), from the top 53 bits.
inline double unit_open(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

// Standard normal from two independent words (Box-Muller, cosine branch).
inline double standard_normal(uint64_t bits1, uint64_t bits2) {
  const double u1 = unit_open(bits1);
  const double u2 = unit_open(bits2);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586476925 * u2);
}

// Uniform integer in [0, n) for n > 0 (multiply-shift; the bias is below 2^-32 for n < 2^32).
inline uint64_t uniform_below(uint64_t bits, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(bits) * n) >> 64);
}

}  // namespace pf::data
