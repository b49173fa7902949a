#include "runtime/checkpoint/parameter_checksum.h"
#include "runtime/core/sha256.h"

#include <gtest/gtest.h>

#include <cstring>
#include <vector>

namespace pf {
namespace {

TEST(ParamChecksum, Sha256KnownAnswer) {
  EXPECT_EQ(sha256_hex("abc", 3), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("", 0), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
}

TEST(ParamChecksum, HashesValueBytesInOrder) {
  Parameter a = make_parameter("a", {2, 3}, InitSpec::zeros());
  Parameter b = make_parameter("b", {4}, InitSpec::zeros());
  for (int i = 0; i < 6; ++i) a.value.f32()[i] = 0.5f * i;
  for (int i = 0; i < 4; ++i) b.value.f32()[i] = -1.0f - i;

  std::vector<char> bytes(a.value.nbytes() + b.value.nbytes());
  std::memcpy(bytes.data(), a.value.f32(), a.value.nbytes());
  std::memcpy(bytes.data() + a.value.nbytes(), b.value.f32(), b.value.nbytes());
  const std::string ab = parameter_checksum({&a, &b});
  EXPECT_EQ(ab, sha256_hex(bytes.data(), bytes.size()));
  EXPECT_EQ(ab.size(), 64u);
  EXPECT_NE(ab, parameter_checksum({&b, &a}));

  // Gradients are not part of it; one flipped bit of a value is.
  b.grad.f32()[0] = 3.0f;
  EXPECT_EQ(parameter_checksum({&a, &b}), ab);
  uint32_t bits;
  std::memcpy(&bits, &b.value.f32()[3], 4);
  bits ^= 1u;
  std::memcpy(&b.value.f32()[3], &bits, 4);
  EXPECT_NE(parameter_checksum({&a, &b}), ab);
}

}  // namespace
}  // namespace pf
