// The flagship family compiles everywhere it claims to: every valid config of
// the shipped space, at S0 and at S4, compiled for sm_90 with NVRTC (no GPU
// needed).  Configs that spill (or keep an array in local memory) are listed;
// at S0 there must be none.
#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "tuner/compile_pool.h"
#include "core/compiler.h"
#include "core/space.h"

namespace mlatune {
namespace {

const std::filesystem::path space_file =
    std::filesystem::path(MLATUNE_SOURCE_DIR) / "search_spaces" / "fused_mla_attention.yaml";

struct CompileSummary {
  std::size_t configs = 0;
  std::vector<std::string> failures;  // messages
  std::vector<std::string> spilling;  // config and figures
};

CompileSummary compile_every_valid_config(const SearchSpace& space, const Shape& shape) {
  Compiler compiler;
  CompilePool pool(compiler);
  std::vector<std::pair<std::string, std::shared_future<CompileResult>>> jobs;
  space.for_each_valid(shape, [&](const Config& config) {
    jobs.emplace_back(space.config_string(config), pool.submit(compile_request(space, config, shape, "sm_90")));
    return true;
  });
  CompileSummary summary;
  for (auto& [config, future] : jobs) {
    const CompileResult& result = future.get();
    ++summary.configs;
    if (!result.ok()) {
      summary.failures.push_back(result.failure().message);
      continue;
    }
    const ResourceUsage& u = result.binary().usage;
    if (u.spills())
      summary.spilling.push_back(fmt::format("{}  regs {} spill stores {} B, loads {} B, stack {} B", config,
                                             u.registers, u.spill_store_bytes, u.spill_load_bytes,
                                             u.stack_frame_bytes));
  }
  return summary;
}

void report(const std::string& name, const CompileSummary& summary) {
  fmt::print("{}: {} valid configs compiled for sm_90, {} failed, {} spill or use a stack frame\n", name,
             summary.configs, summary.failures.size(), summary.spilling.size());
  for (const std::string& line : summary.spilling) fmt::print("  spills: {}\n", line);
  for (std::size_t i = 0; i < summary.failures.size() && i < 3; ++i)
    fmt::print("  failure: {}\n", summary.failures[i]);
}

TEST(MlaTemplates, EveryValidConfigCompilesAtS0AndNoneSpills) {
  SearchSpace space = SearchSpace::load(space_file);
  Shape s0 = space.parse_shape("B=2,T=32,H=4,D=16,R=24");
  CompileSummary summary = compile_every_valid_config(space, s0);
  report("S0 (2,32,4,16,24)", summary);
  EXPECT_GT(summary.configs, 0u);
  EXPECT_TRUE(summary.failures.empty()) << summary.failures.front();
  EXPECT_TRUE(summary.spilling.empty()) << summary.spilling.front();
}

TEST(MlaTemplates, EveryValidConfigCompilesAtS4) {
  SearchSpace space = SearchSpace::load(space_file);
  Shape s4 = space.parse_shape("B=1,T=4096,H=16,D=128,R=512");
  CompileSummary summary = compile_every_valid_config(space, s4);
  report("S4 (1,4096,16,128,512)", summary);
  EXPECT_GT(summary.configs, 0u);
  EXPECT_TRUE(summary.failures.empty()) << summary.failures.front();
}

// The extremes the issue names: any D up to 256 and R up to 1024 must have a
// valid config, and T*H is unbounded (a grid that does not fit would be a
// geometry error, not a valid config).
TEST(MlaTemplates, LargestHeadDimAndRankHaveValidConfigsThatCompile) {
  SearchSpace space = SearchSpace::load(space_file);
  for (const char* text : {"B=1,T=70000,H=128,D=256,R=1024", "B=3,T=1,H=1,D=1,R=1",
                           "B=1,T=5,H=3,D=255,R=1023"}) {
    Shape shape = space.parse_shape(text);
    std::uint64_t valid = space.count(shape);
    EXPECT_GT(valid, 0u) << text;
    std::optional<Config> config;
    space.for_each_valid(shape, [&](const Config& c) {
      if (space.geometry(c, shape).valid()) {
        config = c;
        return false;
      }
      return true;
    });
    ASSERT_TRUE(config.has_value()) << "no config with a launchable geometry at " << text;
    Compiler compiler;
    CompileResult result = compiler.compile(compile_request(space, *config, shape, "sm_90"));
    EXPECT_TRUE(result.ok()) << (result.ok() ? "" : result.failure().message);
  }
}

}  // namespace
}  // namespace mlatune
