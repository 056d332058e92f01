// DispatcherOptions read from the environment: the byte counts of
// MLATUNE_WORKSPACE_RESERVE (the GPU side, what a reserve maps at open, is
// GpuStandInTest.AWorkspaceReservedAtOpenIsMappedBeforeAnyLaunch).
#include "cache/dispatcher.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace mlatune {
namespace {

TEST(ParseByteCount, DigitsWithAnOptionalBinarySuffix) {
  EXPECT_EQ(parse_byte_count("0", "X"), 0u);
  EXPECT_EQ(parse_byte_count("4096", "X"), 4096u);
  EXPECT_EQ(parse_byte_count("3K", "X"), 3u << 10);
  EXPECT_EQ(parse_byte_count("5m", "X"), 5u << 20);
  EXPECT_EQ(parse_byte_count("4G", "X"), std::uint64_t{4} << 30);
  EXPECT_EQ(parse_byte_count("1000000000000000000", "X"), 1000000000000000000u);
  EXPECT_EQ(parse_byte_count("17179869183G", "X"), std::uint64_t{17179869183} << 30);  // 2^64 - 2^30
}

TEST(ParseByteCount, AnythingElseIsAnInputErrorThatQuotesTheVariable) {
  for (const char* bad : {"", "G", "-1", "+4", " 4", "4 G", "4GB", "4T", "1.5G", "0x10", "4G4",
                          "17179869184G", "99999999999999999999"}) {
    SCOPED_TRACE(bad);
    try {
      parse_byte_count(bad, "MLATUNE_WORKSPACE_RESERVE");
      ADD_FAILURE() << "accepted";
    } catch (const InputError& e) {
      const std::string what = e.what();
      EXPECT_NE(what.find(std::string("MLATUNE_WORKSPACE_RESERVE='") + bad + "'"), std::string::npos) << what;
      EXPECT_NE(what.find("such as"), std::string::npos) << what;
    }
  }
}

}  // namespace
}  // namespace mlatune
