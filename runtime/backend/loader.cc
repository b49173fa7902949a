#include "runtime/backend/loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cstdlib>
#include <map>
#include <mutex>

namespace pf::backend {
namespace {

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

// Makes the object holding this code global, so that a library loaded next resolves its undefined
// runtime symbols here. Executables' exported symbols are global already.
void make_runtime_global() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&runtime_folder), &info) == 0 || info.dli_fname == nullptr) return;
  void* self = dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
  if (self != nullptr) dlclose(self);  // drops the reference RTLD_NOLOAD added; the promotion stays
}

std::string load_once(const std::string& name, const std::string& file_name, bool global) {
  std::string env_name = "PIPEFORGE_" + name + "_BACKEND";
  std::transform(env_name.begin(), env_name.end(), env_name.begin(), [](unsigned char c) { return std::toupper(c); });
  make_runtime_global();
  std::string errors;
  auto attempt = [&](const std::string& path) {
    if (dlopen(path.c_str(), RTLD_NOW | (global ? RTLD_GLOBAL : RTLD_LOCAL)) != nullptr) return true;  // kept loaded
    errors += (errors.empty() ? "" : "; ") + dl_error();
    return false;
  };
  if (const char* explicit_path = std::getenv(env_name.c_str()); explicit_path && *explicit_path) {
    if (attempt(explicit_path)) return "";
    return file_name + " could not be loaded from $" + env_name + ": " + errors;
  }
  // One beside the runtime is the one meant: its failure (e.g. a CUDA library it needs is missing)
  // is the answer, not a reason to look elsewhere.
  const std::string beside = runtime_folder() + file_name;
  if (access(beside.c_str(), F_OK) == 0) {
    if (attempt(beside)) return "";
    return file_name + " could not be loaded: " + errors;
  }
  if (attempt(file_name)) return "";
  return file_name + " could not be loaded (it is not next to " + runtime_folder() +
         " nor on the loader's path; set $" + env_name + " to its path): " + errors;
}

}  // namespace

std::string runtime_folder() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&runtime_folder), &info) == 0 || info.dli_fname == nullptr) return "./";
  std::string path = info.dli_fname;
  if (path.find('/') == std::string::npos) path = "/proc/self/exe";  // the executable, named as typed
  // Through links to the file itself: a link farm (Bazel's _solib folders, a packager's) holds the
  // library but not the backend beside it.
  if (char* real = realpath(path.c_str(), nullptr)) {
    path = real;
    std::free(real);
  }
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "./" : path.substr(0, slash + 1);
}

std::string load_backend_library(const std::string& name, const std::string& file_name, bool global) {
  static std::mutex mutex;
  static std::map<std::string, std::string> outcomes;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = outcomes.find(name);
  if (it == outcomes.end()) it = outcomes.emplace(name, load_once(name, file_name, global)).first;
  return it->second;
}

}  // namespace pf::backend
