// The versioned-struct rules with a simulated future version of a struct: an older caller's
// shorter struct gets defaults for the tail; a newer caller's longer struct is accepted only when
// the fields this library does not know are zero.
#include "c_api/struct_io.h"

#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>

namespace {

// What a caller compiled against the version-1 header passes.
struct OptionsV1 {
  uint32_t struct_size;
  int32_t a;
  double b;
};
// What this (simulated) newer library knows: version 2 appends c and d.
struct OptionsV2 {
  uint32_t struct_size;
  int32_t a;
  double b;
  double c;
  int64_t d;
};
constexpr size_t kV1Size = sizeof(OptionsV1);

OptionsV2 Defaults() { return OptionsV2{sizeof(OptionsV2), 1, 2.0, 3.0, 4}; }

std::string ErrorOf(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const pf::Error& e) {
    EXPECT_EQ(e.code(), pf::ErrorCode::kInvalidArgument);
    return e.what();
  }
  return "";
}

TEST(StructIo, OlderShorterStructGetsDefaultsForTheTail) {
  // The caller's memory: a v1 struct followed by bytes that are not part of it.
  const OptionsV1 old{sizeof(OptionsV1), 10, 20.0};
  alignas(OptionsV2) unsigned char memory[sizeof(OptionsV2)];
  std::memset(memory, 0xee, sizeof(memory));
  std::memcpy(memory, &old, sizeof(old));
  const auto* in = reinterpret_cast<const OptionsV2*>(memory);
  const OptionsV2 read = pf::capi::read_struct(*in, kV1Size, "options", "options_t", Defaults());
  EXPECT_EQ(read.struct_size, sizeof(OptionsV2));
  EXPECT_EQ(read.a, 10);
  EXPECT_EQ(read.b, 20.0);
  EXPECT_EQ(read.c, 3.0);
  EXPECT_EQ(read.d, 4);
}

TEST(StructIo, CurrentStructIsReadWhole) {
  OptionsV2 in{sizeof(OptionsV2), 10, 20.0, 30.0, 40};
  const OptionsV2 read = pf::capi::read_struct(in, kV1Size, "options", "options_t", Defaults());
  EXPECT_EQ(read.c, 30.0);
  EXPECT_EQ(read.d, 40);
}

TEST(StructIo, TooSmallIsRejectedNamingStructSize) {
  OptionsV2 in = Defaults();
  in.struct_size = 8;
  const std::string message =
      ErrorOf([&] { pf::capi::read_struct(in, kV1Size, "options", "options_t", Defaults()); });
  EXPECT_NE(message.find("options->struct_size is 8"), std::string::npos) << message;
  EXPECT_NE(message.find("version 1 of options_t (16 bytes)"), std::string::npos) << message;
}

TEST(StructIo, NewerLongerStructNeedsZeroUnknownFields) {
  struct Newer {
    OptionsV2 known;
    int64_t unknown;
  } newer{};
  newer.known = OptionsV2{sizeof(Newer), 10, 20.0, 30.0, 40};
  newer.unknown = 0;
  EXPECT_EQ(pf::capi::read_struct(newer.known, kV1Size, "options", "options_t", Defaults()).d, 40);
  newer.unknown = 1;
  const std::string message =
      ErrorOf([&] { pf::capi::read_struct(newer.known, kV1Size, "options", "options_t", Defaults()); });
  EXPECT_NE(message.find("older than the header"), std::string::npos) << message;
}

TEST(StructIo, WriteFitsTheCallersSize) {
  // An older caller's result struct: only the fields it has are written.
  struct {
    OptionsV1 v1;
    char guard[16];
  } old;
  std::memset(&old, 0x7f, sizeof(old));
  old.v1.struct_size = sizeof(OptionsV1);
  pf::capi::write_struct(reinterpret_cast<OptionsV2*>(&old.v1), OptionsV2{0, 5, 6.0, 7.0, 8});
  EXPECT_EQ(old.v1.struct_size, sizeof(OptionsV1));
  EXPECT_EQ(old.v1.a, 5);
  EXPECT_EQ(old.v1.b, 6.0);
  for (char c : old.guard) EXPECT_EQ(c, 0x7f);

  // A newer caller's: the unknown tail is zeroed.
  struct {
    OptionsV2 v2;
    int64_t unknown;
  } newer;
  std::memset(&newer, 0x7f, sizeof(newer));
  newer.v2.struct_size = sizeof(newer);
  pf::capi::write_struct(&newer.v2, OptionsV2{0, 5, 6.0, 7.0, 8});
  EXPECT_EQ(newer.v2.struct_size, sizeof(newer));
  EXPECT_EQ(newer.v2.d, 8);
  EXPECT_EQ(newer.unknown, 0);
}

}  // namespace
