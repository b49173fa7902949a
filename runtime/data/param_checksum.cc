#include "runtime/data/param_checksum.h"

#include <openssl/evp.h>

#include <memory>

#include "runtime/core/error.h"

namespace pf {
namespace {

struct DigestContext {
  DigestContext() : ctx(EVP_MD_CTX_new()) {
    if (ctx == nullptr || EVP_DigestInit_ex(ctx, EVP_sha256(), nullptr) != 1) {
      EVP_MD_CTX_free(ctx);
      fail(ErrorCode::kInternal, "OpenSSL: cannot initialise SHA-256");
    }
  }
  ~DigestContext() { EVP_MD_CTX_free(ctx); }
  DigestContext(const DigestContext&) = delete;
  DigestContext& operator=(const DigestContext&) = delete;

  void update(const void* data, size_t bytes) {
    if (bytes > 0 && EVP_DigestUpdate(ctx, data, bytes) != 1)
      fail(ErrorCode::kInternal, "OpenSSL: SHA-256 update failed");
  }
  std::string hex() {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int length = 0;
    if (EVP_DigestFinal_ex(ctx, digest, &length) != 1)
      fail(ErrorCode::kInternal, "OpenSSL: SHA-256 final failed");
    static const char kHex[] = "0123456789abcdef";
    std::string out;
    out.reserve(2 * length);
    for (unsigned int i = 0; i < length; ++i) {
      out.push_back(kHex[digest[i] >> 4]);
      out.push_back(kHex[digest[i] & 15]);
    }
    return out;
  }

  EVP_MD_CTX* ctx;
};

}  // namespace

std::string sha256_hex(const void* data, size_t bytes) {
  DigestContext digest;
  digest.update(data, bytes);
  return digest.hex();
}

std::string parameter_checksum(const std::vector<Parameter*>& parameters) {
  DigestContext digest;
  for (const Parameter* p : parameters) {
    PF_CHECK_ARG(p != nullptr, "parameter_checksum: null parameter");
    if (!p->value.defined()) continue;
    PF_CHECK_ARG(p->value.device().kind == DeviceKind::kCpu, "parameter_checksum: '", p->name, "' is on ",
                 p->value.device().to_string(), "; copy it to the CPU first");
    digest.update(p->value.data<char>(), p->value.nbytes());
  }
  return digest.hex();
}

}  // namespace pf
