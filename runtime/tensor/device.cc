#include "runtime/tensor/device.h"

#include <cctype>

#include "runtime/core/error.h"

namespace pf {

std::string Device::to_string() const {
  return (kind == DeviceKind::kCpu ? std::string("cpu:") : std::string("cuda:")) + std::to_string(ordinal);
}

Device parse_device(const std::string& text) {
  const char* form = " (expected cpu, cuda or cuda:N)";
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  int ordinal = 0;
  if (colon != std::string::npos) {
    const std::string number = text.substr(colon + 1);
    PF_CHECK_ARG(!number.empty() && number.size() <= 6 &&
                     number.find_first_not_of("0123456789") == std::string::npos,
                 "device '", text, "': '", number, "' is not a device number", form);
    ordinal = std::stoi(number);
  }
  if (kind == "cpu") {
    PF_CHECK_ARG(ordinal == 0, "device '", text, "': there is only cpu:0");
    return Device::cpu();
  }
  PF_CHECK_ARG(kind == "cuda", "device '", text, "' is not a device", form);
  return Device::cuda(ordinal);
}

std::vector<Device> parse_device_list(const std::string& text) {
  std::vector<Device> out;
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    std::string item = text.substr(begin, end - begin);
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.front()))) item.erase(item.begin());
    while (!item.empty() && std::isspace(static_cast<unsigned char>(item.back()))) item.pop_back();
    if (item.empty()) {
      PF_CHECK_ARG(text.find_first_not_of(" \t") == std::string::npos, "device list '", text,
                   "' has an empty entry");
      break;
    }
    out.push_back(parse_device(item));
    begin = end + 1;
  }
  return out;
}

}  // namespace pf
