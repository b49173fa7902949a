#include "runtime/core/sha256.h"

#include <openssl/evp.h>

#include "runtime/core/error.h"

namespace pf {

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(ctx_, EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(ctx_);
    fail(ErrorCode::kInternal, "OpenSSL: cannot initialise SHA-256");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(ctx_); }

void Sha256::update(const void* data, size_t bytes) {
  if (bytes > 0 && EVP_DigestUpdate(ctx_, data, bytes) != 1) {
    fail(ErrorCode::kInternal, "OpenSSL: SHA-256 update failed");
  }
}

std::string Sha256::digest() {
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  if (EVP_DigestFinal_ex(ctx_, out, &length) != 1 || length != 32) {
    fail(ErrorCode::kInternal, "OpenSSL: SHA-256 final failed");
  }
  return std::string(reinterpret_cast<char*>(out), length);
}

std::string Sha256::hex() {
  static const char kHex[] = "0123456789abcdef";
  const std::string raw = digest();
  std::string out;
  out.reserve(2 * raw.size());
  for (unsigned char c : raw) {
    out.push_back(kHex[c >> 4]);
    out.push_back(kHex[c & 15]);
  }
  return out;
}

std::string sha256_digest(const void* data, size_t bytes) {
  Sha256 h;
  h.update(data, bytes);
  return h.digest();
}

std::string sha256_hex(const void* data, size_t bytes) {
  Sha256 h;
  h.update(data, bytes);
  return h.hex();
}

}  // namespace pf
