// Where a tensor lives. Only the CPU exists today; the kind and ordinal let CUDA slot in later
// without changing any signature.
#pragma once

#include <string>

namespace pf {

enum class DeviceKind : int { kCpu = 0, kCuda = 1 };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int ordinal = 0;

  static Device cpu() { return Device{DeviceKind::kCpu, 0}; }
  static Device cuda(int ordinal) { return Device{DeviceKind::kCuda, ordinal}; }
  bool operator==(const Device& o) const { return kind == o.kind && ordinal == o.ordinal; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  std::string to_string() const;
};

}  // namespace pf
