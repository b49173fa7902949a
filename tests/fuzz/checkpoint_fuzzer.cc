// libFuzzer target: checkpoint loading (runtime/checkpoint/checkpoint.h) into the tiny trainer.
// Input: a checkpoint file. Its last 32 bytes are replaced by the SHA-256 of the rest before it is
// written, as an attacker would do (the hash is no secret), so mutations reach the header parsing
// and the tensor range checks instead of failing the checksum. A custom mutator also edits the
// header JSON or the tensor bytes on their own and rewrites the header length and the digest, so
// that an edit that changes the header's size still yields a consistent file (plain byte mutations
// nearly always break the length field). Oracles, besides "no crash, no exception other than
// pf::Error":
//  * a refused file leaves the trainer unchanged (parameter checksum, step, optimizer state);
//  * a loaded one saves again, that file loads into a fresh trainer with the same parameters,
//    and the trainer takes one step.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <string>

#include "runtime/checkpoint/checkpoint.h"
#include "runtime/checkpoint/parameter_checksum.h"
#include "runtime/core/sha256.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/tiny_trainer.h"

namespace {

constexpr const char* kTarget = "checkpoint";
constexpr size_t kDigestBytes = 32;
constexpr size_t kFixedBytes = 8 + 4 + 8;  // magic, format version, header length

std::string g_dir;               // private temp folder of this process
std::string g_initial_checksum;  // parameters of a fresh tiny trainer

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) pf::fuzz::finding(kTarget, "harness: cannot write " + path);
}

std::string checksum(const pf::Trainer& t) { return pf::parameter_checksum(t.model().parameters()); }

void fuzz_one(std::string bytes) {
  if (bytes.size() >= kDigestBytes) {
    const size_t body = bytes.size() - kDigestBytes;
    bytes.replace(body, kDigestBytes, pf::sha256_digest(bytes.data(), body));
  }
  const std::string path = g_dir + "/input.ckpt";
  write_file(path, bytes);

  auto trainer = pf::fuzz::make_tiny_trainer();
  try {
    pf::load_checkpoint(*trainer, path);
  } catch (const pf::Error& e) {
    if (pf::fuzz::is_finding(e)) throw;
    FUZZ_CHECK(kTarget, checksum(*trainer) == g_initial_checksum, std::string("refused but parameters changed: ") + e.what());
    FUZZ_CHECK(kTarget, trainer->metrics().step == 0 && trainer->metrics().data_position == 0 &&
                            trainer->optimizer().steps_taken() == 0 && trainer->optimizer().state().empty(),
               std::string("refused but progress or optimizer state changed: ") + e.what());
    return;
  }

  const std::string resaved = g_dir + "/resaved.ckpt";
  pf::save_checkpoint(*trainer, resaved);  // may refuse (e.g. non-finite parameters)
  auto again = pf::fuzz::make_tiny_trainer();
  pf::fuzz::must_succeed(kTarget, "loading a checkpoint saved from a loaded one", [&] {
    pf::load_checkpoint(*again, resaved);
    return 0;
  });
  FUZZ_CHECK(kTarget, checksum(*again) == checksum(*trainer), "save -> load changed the parameters");
  trainer->step(pf::fuzz::tiny_batch());
}

}  // namespace

// libFuzzer's own mutator; weak, so the replay builds (which never mutate) link without it.
extern "C" __attribute__((weak)) size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

// One in four mutations works on the raw bytes; the others take the file apart (fixed fields,
// header JSON, tensor bytes), mutate the header (or, one time in four, the tensor bytes) and put
// it back together with a matching header length and digest.
extern "C" size_t LLVMFuzzerCustomMutator(uint8_t* data, size_t size, size_t max_size, unsigned int seed) {
  std::minstd_rand rng(seed);
  uint64_t header_len = 0;
  if (size >= kFixedBytes + kDigestBytes) std::memcpy(&header_len, data + 12, sizeof header_len);
  if (rng() % 4 == 0 || size < kFixedBytes + kDigestBytes || header_len > size - kFixedBytes - kDigestBytes) {
    return LLVMFuzzerMutate(data, size, max_size);
  }
  const std::string fixed(reinterpret_cast<const char*>(data), 12);
  std::string header(reinterpret_cast<const char*>(data) + kFixedBytes, header_len);
  std::string tensors(reinterpret_cast<const char*>(data) + kFixedBytes + header_len,
                      size - kFixedBytes - kDigestBytes - header_len);
  std::string& part = rng() % 4 == 0 && !tensors.empty() ? tensors : header;
  if (part.empty()) return LLVMFuzzerMutate(data, size, max_size);
  const size_t room = max_size - size;
  const size_t used = part.size();
  part.resize(used + room);
  part.resize(LLVMFuzzerMutate(reinterpret_cast<uint8_t*>(part.data()), used, part.size()));
  uint64_t new_len = header.size();
  std::string out = fixed + std::string(reinterpret_cast<const char*>(&new_len), sizeof new_len) + header + tensors;
  out += pf::sha256_digest(out.data(), out.size());
  if (out.size() > max_size) return LLVMFuzzerMutate(data, size, max_size);
  std::memcpy(data, out.data(), out.size());
  return out.size();
}

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  pf::fuzz::quiet_runtime_log();
  g_dir = pf::fuzz::make_work_dir(kTarget);
  g_initial_checksum = checksum(*pf::fuzz::make_tiny_trainer());

  // Self-check: a real checkpoint of the tiny trainer, saved now, must load; otherwise the fuzzer
  // would only be exercising refusals (e.g. the seed corpus no longer matches the format).
  auto trained = pf::fuzz::make_tiny_trainer();
  trained->step(pf::fuzz::tiny_batch());
  const std::string seed = g_dir + "/startup.ckpt";
  pf::save_checkpoint(*trained, seed);
  auto loaded = pf::fuzz::make_tiny_trainer();
  pf::load_checkpoint(*loaded, seed);
  if (checksum(*loaded) != checksum(*trained)) pf::fuzz::finding(kTarget, "harness: a fresh checkpoint does not round-trip");
  std::atexit([] {
    for (const char* f : {"/input.ckpt", "/resaved.ckpt", "/startup.ckpt"}) std::remove((g_dir + f).c_str());
    ::rmdir(g_dir.c_str());
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pf::fuzz::run_input(kTarget, [&] { fuzz_one(std::string(reinterpret_cast<const char*>(data), size)); });
  return 0;
}
