// Where a tensor lives: the CPU, or a CUDA device by ordinal (runtime/devices/cuda registers its
// allocator and copy hooks; docs/CUDA.md).
#pragma once

#include <string>
#include <vector>

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

// "cpu", "cpu:0", "cuda" (= cuda:0) or "cuda:N". Throws kInvalidArgument naming the text; does not
// check that the device exists (the trainers do, with the reason when it does not).
Device parse_device(const std::string& text);
// Comma-separated devices, e.g. "cuda:0,cuda:1" (spaces around entries allowed). Empty text: none.
std::vector<Device> parse_device_list(const std::string& text);

}  // namespace pf
