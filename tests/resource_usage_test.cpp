#include "core/resource_usage.h"

#include <gtest/gtest.h>

namespace mlatune {
namespace {

// Verbatim shape of an NVRTC 13.0 log with --ptxas-options=-v for sm_90
// (three kernels; one with static shared memory, one with a local array).
constexpr const char* kLog =
    "ptxas info    : 0 bytes gmem\n"
    "ptxas info    : Compiling entry function 'sm' for 'sm_90'\n"
    "ptxas info    : Function properties for sm\n"
    "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 12 registers, used 1 barriers, 1024 bytes smem\n"
    "ptxas info    : Compile time = 2.651 ms\n"
    "ptxas info    : Compiling entry function 'small' for 'sm_90'\n"
    "ptxas info    : Function properties for small\n"
    "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 8 registers, used 0 barriers\n"
    "ptxas info    : Compile time = 1.227 ms\n"
    "ptxas info    : Compiling entry function 'k' for 'sm_90'\n"
    "ptxas info    : Function properties for k\n"
    "ptxas         .     2048 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    "ptxas info    : Used 40 registers, used 0 barriers, 2048 bytes cumulative stack size\n"
    "ptxas info    : Compile time = 15.659 ms\n";

TEST(ResourceUsage, ReadsEveryEntryOfARealReport) {
  auto functions = parse_ptxas_report(kLog);
  ASSERT_EQ(functions.size(), 3u);
  EXPECT_EQ(functions["sm"].registers, 12);
  EXPECT_EQ(functions["sm"].barriers, 1);
  EXPECT_EQ(functions["sm"].shared_bytes, 1024);
  EXPECT_FALSE(functions["sm"].spills());
  EXPECT_EQ(functions["small"].registers, 8);
  EXPECT_EQ(functions["small"].shared_bytes, 0);
  EXPECT_EQ(functions["k"].registers, 40);
  EXPECT_EQ(functions["k"].stack_frame_bytes, 2048);
  EXPECT_TRUE(functions["k"].spills());
}

TEST(ResourceUsage, ReadsSpillsAndConstantMemory) {
  // Older ptxas prints cmem[0]; spills appear in the stack-frame line.
  constexpr const char* log =
      "ptxas info    : Compiling entry function 'heavy' for 'sm_80'\n"
      "ptxas info    : Function properties for heavy\n"
      "    88 bytes stack frame, 96 bytes spill stores, 92 bytes spill loads\n"
      "ptxas info    : Used 255 registers, used 1 barriers, 49152 bytes smem, 372 bytes cmem[0]\n";
  // The stack line above lacks the "ptxas" prefix, so it must not count.
  auto usage = find_resource_usage(log, "heavy");
  ASSERT_TRUE(usage);
  EXPECT_EQ(usage->registers, 255);
  EXPECT_EQ(usage->shared_bytes, 49152);
  EXPECT_EQ(usage->constant_bytes, 372);
  EXPECT_EQ(usage->spill_store_bytes, 0);

  std::string prefixed = std::string(log);
  prefixed.replace(prefixed.find("    88 bytes"), 4, "ptxas         .     ");
  usage = find_resource_usage(prefixed, "heavy");
  ASSERT_TRUE(usage);
  EXPECT_EQ(usage->stack_frame_bytes, 88);
  EXPECT_EQ(usage->spill_store_bytes, 96);
  EXPECT_EQ(usage->spill_load_bytes, 92);
  EXPECT_TRUE(usage->spills());
}

TEST(ResourceUsage, OnlySpillsWhenLocalMemoryIsUsed) {
  ResourceUsage usage;
  EXPECT_FALSE(usage.spills());
  usage.spill_load_bytes = 4;
  EXPECT_TRUE(usage.spills());
  usage = {};
  usage.stack_frame_bytes = 16;
  EXPECT_TRUE(usage.spills());
}

TEST(ResourceUsage, NonEntryFunctionsAreNotEntries) {
  constexpr const char* log =
      "ptxas info    : Function properties for helper_noinline\n"
      "ptxas         .     32 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Compiling entry function 'main_kernel' for 'sm_90'\n"
      "ptxas info    : Function properties for main_kernel\n"
      "ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
      "ptxas info    : Used 20 registers, used 0 barriers\n";
  EXPECT_FALSE(find_resource_usage(log, "helper_noinline"));
  auto entry = find_resource_usage(log, "main_kernel");
  ASSERT_TRUE(entry);
  EXPECT_EQ(entry->registers, 20);
  EXPECT_EQ(entry->stack_frame_bytes, 0);
  EXPECT_EQ(parse_ptxas_report(log).at("helper_noinline").stack_frame_bytes, 32);
}

TEST(ResourceUsage, IgnoresWarningsAndMissingReports) {
  EXPECT_TRUE(parse_ptxas_report("").empty());
  EXPECT_FALSE(find_resource_usage("kernel.cu(3): warning #177-D: variable \"x\" unused\n", "k"));
  EXPECT_FALSE(find_resource_usage(kLog, "not_there"));
  EXPECT_FALSE(find_resource_usage("ptxas info    : Used lots of registers\n", "k"));
}

}  // namespace
}  // namespace mlatune
