// SHA-256 through OpenSSL's EVP interface: checkpoints (integrity) and parameter checksums
// (comparing runs bit for bit).
#pragma once

#include <cstddef>
#include <string>

typedef struct evp_md_ctx_st EVP_MD_CTX;

namespace pf {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t bytes);
  // The 32 raw digest bytes; ends the computation.
  std::string digest();
  // The digest as 64 lower-case hex characters; ends the computation.
  std::string hex();

 private:
  EVP_MD_CTX* ctx_;
};

std::string sha256_digest(const void* data, size_t bytes);
std::string sha256_hex(const void* data, size_t bytes);

}  // namespace pf
