#include "runtime/backend/loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <mutex>

namespace pf::backend {
namespace {

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown dlopen error";
}

// The path of the shared object (or executable) this code is linked into, as the loader has it;
// "" when dladdr cannot say.
std::string runtime_object() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&runtime_folder), &info) == 0 || info.dli_fname == nullptr) return "";
  return info.dli_fname;
}

// Makes the object holding this code global, so that a library loaded next resolves its undefined
// runtime symbols here. Executables' exported symbols are global already.
void make_runtime_global() {
  const std::string self_path = runtime_object();
  if (self_path.empty()) return;
  void* self = dlopen(self_path.c_str(), RTLD_NOW | RTLD_NOLOAD | RTLD_GLOBAL);
  if (self != nullptr) dlclose(self);  // drops the reference RTLD_NOLOAD added; the promotion stays
}

std::string load_once(const BackendLibrary& library) {
  const std::string file_name = library.file;
  std::string env_name = std::string("PIPEFORGE_") + library.name + "_BACKEND";
  std::transform(env_name.begin(), env_name.end(), env_name.begin(), [](unsigned char c) { return std::toupper(c); });
  make_runtime_global();
  std::string errors;
  auto attempt = [&](const std::string& path) {
    if (dlopen(path.c_str(), RTLD_NOW | (library.global ? RTLD_GLOBAL : RTLD_LOCAL)) != nullptr) return true;
    errors += (errors.empty() ? "" : "; ") + dl_error();
    return false;
  };
  if (const char* explicit_path = std::getenv(env_name.c_str()); explicit_path && *explicit_path) {
    if (attempt(explicit_path)) return "";
    return file_name + " could not be loaded from $" + env_name + ": " + errors;
  }
  // One beside the runtime is the one meant: its failure (e.g. a CUDA library it needs is missing)
  // is the answer, not a reason to look elsewhere.
  const std::string folder = runtime_folder();
  const std::string beside = folder + file_name;
  if (access(beside.c_str(), F_OK) == 0) {
    if (attempt(beside)) return "";
    return file_name + " could not be loaded: " + errors;
  }
  if (attempt(file_name)) return "";
  return file_name + " could not be loaded (it is not next to " + folder + " nor on the loader's path; set $" +
         env_name + " to its path): " + errors;
}

}  // namespace

std::string runtime_folder() {
  std::string path = runtime_object();
  if (path.empty()) return "./";
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

std::string load_backend_library(const BackendLibrary& library) {
  static std::mutex mutex;
  static std::map<std::string, std::string> outcomes;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = outcomes.find(library.name);
  if (it == outcomes.end()) it = outcomes.emplace(library.name, load_once(library)).first;
  return it->second;
}

}  // namespace pf::backend
