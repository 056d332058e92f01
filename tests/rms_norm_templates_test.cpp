// The RMSNorm family without a GPU: what its space promises (a default that
// runs every COLS up to 8192, FLOAT4 exactly where rows are whole float4s,
// a grid that covers every row) and that its configs compile for sm_90 with
// no spills: at odd and LLM-sized shapes, one config of each algorithm drawn
// at random and the config closest to the register constraint's edge (the
// one most likely to spill).  `mlatune tune search_spaces/rms_norm.yaml
// --compile-only --arch sm_90` compiles all of them at a shape.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <future>
#include <random>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "core/compiler.h"
#include "core/space.h"
#include "tests/space_parameter.h"
#include "tuner/compile_pool.h"

namespace mlatune {
namespace {

const std::filesystem::path space_file =
    std::filesystem::path(MLATUNE_SOURCE_DIR) / "search_spaces" / "rms_norm.yaml";

TEST(RmsNormSpace, DefaultConfigRunsEveryColsUpTo8192) {
  SearchSpace space = SearchSpace::load(space_file);
  for (std::int64_t rows : {1, 3, 4096}) {
    for (std::int64_t cols = 1; cols <= 8192; ++cols) {
      Validity validity = space.check(space.default_config(), Shape{{rows, cols}});
      ASSERT_TRUE(validity) << "ROWS=" << rows << ",COLS=" << cols << ": " << validity.failed_constraint;
    }
  }
}

TEST(RmsNormSpace, Float4ExactlyWhereRowsAreWholeFloat4s) {
  SearchSpace space = SearchSpace::load(space_file);
  for (std::int64_t cols : {1, 3, 4, 33, 36, 512, 4095, 4096, 5120, 8191}) {
    bool float4_valid = false;
    space.for_each_valid(Shape{{64, cols}}, [&](const Config& config) {
      float4_valid |= value_of(space, config, "FLOAT4") != 0;
      return !float4_valid;
    });
    EXPECT_EQ(float4_valid, cols % 4 == 0) << "COLS=" << cols;
  }
}

// Every row is in exactly one block, and the shared algorithm gets a row of
// COLS floats per row of the block.
TEST(RmsNormSpace, GridCoversEveryRowOnce) {
  SearchSpace space = SearchSpace::load(space_file);
  std::mt19937_64 rng(5);
  for (const char* text : {"ROWS=1,COLS=512", "ROWS=7,COLS=4095", "ROWS=32768,COLS=8192", "ROWS=1000,COLS=33"}) {
    Shape shape = space.parse_shape(text);
    const std::int64_t rows = shape.values[0], cols = shape.values[1];
    for (int i = 0; i < 50; ++i) {
      std::optional<Config> config = space.sample(shape, rng);
      ASSERT_TRUE(config) << text;
      LaunchGeometry g = space.geometry(*config, shape);
      ASSERT_TRUE(g.valid()) << g.invalid_reason;
      const std::int64_t per_block = value_of(space, *config, "ROWS_PER_BLOCK");
      EXPECT_EQ(g.block[0], value_of(space, *config, "THREADS_PER_ROW") * per_block);
      EXPECT_GE(g.grid[0] * per_block, rows) << text;
      EXPECT_LT((g.grid[0] - 1) * per_block, rows) << text;
      const bool shared = text_of(space, *config, "ALGORITHM") == "shared";
      EXPECT_EQ(g.shared_bytes, shared ? 4 * per_block * cols : 0) << space.config_string(*config);
    }
  }
}

/// A config of `algorithm` drawn uniformly among the valid ones at `shape`.
std::optional<Config> sample_of(const SearchSpace& space, const Shape& shape, const std::string& algorithm,
                                std::mt19937_64& rng) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    std::optional<Config> config = space.sample(shape, rng);
    if (!config) return std::nullopt;
    if (text_of(space, *config, "ALGORITHM") == algorithm) return config;
  }
  return std::nullopt;
}

/// The valid registers config with the most registers asked of the block
/// (floats kept per lane times threads): the edge of the space's register
/// constraint.
std::optional<Config> heaviest_registers_config(const SearchSpace& space, const Shape& shape) {
  std::optional<Config> heaviest;
  std::int64_t most = -1;
  const std::int64_t cols = shape.values[1];
  space.for_each_valid(shape, [&](const Config& config) {
    if (text_of(space, config, "ALGORITHM") != "registers") return true;
    const std::int64_t vec = value_of(space, config, "FLOAT4") ? 4 : 1;
    const std::int64_t lanes = value_of(space, config, "THREADS_PER_ROW");
    const std::int64_t floats = (cols + lanes * vec - 1) / (lanes * vec) * vec;
    const std::int64_t load = floats * lanes * value_of(space, config, "ROWS_PER_BLOCK");
    if (load > most) {
      most = load;
      heaviest = config;
    }
    return true;
  });
  return heaviest;
}

TEST(RmsNormTemplates, SampledConfigsCompileForSm90WithoutSpills) {
  SearchSpace space = SearchSpace::load(space_file);
  std::mt19937_64 rng(20261201);
  Compiler compiler;
  CompilePool pool(compiler);
  std::vector<std::pair<std::string, std::shared_future<CompileResult>>> jobs;
  for (const char* text : {"ROWS=7,COLS=4095", "ROWS=4096,COLS=8192", "ROWS=1,COLS=36"}) {
    Shape shape = space.parse_shape(text);
    std::vector<Config> configs;
    for (const char* algorithm : {"registers", "shared", "reread"})
      if (std::optional<Config> c = sample_of(space, shape, algorithm, rng)) configs.push_back(*c);
    if (std::optional<Config> c = heaviest_registers_config(space, shape)) configs.push_back(*c);
    ASSERT_EQ(configs.size(), 4u) << text << ": every algorithm has valid configs";
    for (const Config& config : configs)
      jobs.emplace_back(fmt::format("{} {}", text, space.config_string(config)),
                        pool.submit(compile_request(space, config, shape, "sm_90")));
  }
  for (auto& [what, future] : jobs) {
    const CompileResult& result = future.get();
    ASSERT_TRUE(result.ok()) << what << ": " << result.failure().message;
    const ResourceUsage& u = result.binary().usage;
    fmt::print("{}: {} registers, {} B spill stores, {} B stack\n", what, u.registers, u.spill_store_bytes,
               u.stack_frame_bytes);
    EXPECT_FALSE(u.spills()) << what << ": " << u.spill_store_bytes << " B spill stores, "
                             << u.spill_load_bytes << " B spill loads, " << u.stack_frame_bytes << " B stack";
    EXPECT_GT(u.registers, 0) << what;
  }
}

}  // namespace
}  // namespace mlatune
