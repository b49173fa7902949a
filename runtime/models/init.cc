#include "runtime/models/init.h"

#include <cmath>
#include <cstring>

namespace pf {
namespace {

// SplitMix64: a counter-based generator; value i of a stream is mix(key + i * golden).
uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

uint64_t stream_key(uint64_t seed, const std::string& name) {
  uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a of the name
  for (unsigned char c : name) h = (h ^ c) * 0x100000001b3ULL;
  return mix64(h ^ mix64(seed + 0x9e3779b97f4a7c15ULL));
}

// Uniform in (0, 1) from 53 random bits.
double uniform_open(uint64_t bits) { return (static_cast<double>(bits >> 11) + 0.5) * 0x1.0p-53; }

}  // namespace

void initialize_parameter(Parameter& parameter, uint64_t seed) {
  if (parameter.value.device().kind != DeviceKind::kCpu) {
    // Device parameters: the same values, computed on the host and copied.
    Parameter host = parameter;
    host.value = Tensor::empty(parameter.value.shape());
    host.grad = Tensor::empty(parameter.grad.shape());
    initialize_parameter(host, seed);
    parameter.value.copy_from(host.value);
    zero_bytes(parameter.grad.data<char>(), parameter.grad.device(), parameter.grad.nbytes(),
               "initialize_parameter");
    return;
  }
  float* v = parameter.value.f32();
  const int64_t n = parameter.value.numel();
  switch (parameter.init.kind) {
    case InitSpec::Kind::kZeros:
      for (int64_t i = 0; i < n; ++i) v[i] = 0.0f;
      break;
    case InitSpec::Kind::kOnes:
      for (int64_t i = 0; i < n; ++i) v[i] = 1.0f;
      break;
    case InitSpec::Kind::kNormal: {
      // A tied copy draws the primary's stream: the same values without communication.
      const uint64_t key = stream_key(seed, parameter.tied_to.empty() ? parameter.name : parameter.tied_to);
      for (int64_t i = 0; i < n; ++i) {
        // Box-Muller on two draws of the element's own counter: element i depends on i only.
        // A tensor-parallel slice draws its elements' places in the full tensor.
        const uint64_t c = static_cast<uint64_t>(full_tensor_index(parameter, i)) * 2;
        const double u1 = uniform_open(mix64(key + c * 0x9e3779b97f4a7c15ULL));
        const double u2 = uniform_open(mix64(key + (c + 1) * 0x9e3779b97f4a7c15ULL));
        const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
        v[i] = static_cast<float>(z * parameter.init.stddev);
      }
      break;
    }
  }
  std::memset(parameter.grad.data<char>(), 0, parameter.grad.nbytes());
}

void initialize_parameters(const std::vector<Parameter*>& parameters, uint64_t seed) {
  for (Parameter* p : parameters) initialize_parameter(*p, seed);
}

}  // namespace pf
