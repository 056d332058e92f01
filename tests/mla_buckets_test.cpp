// Shape buckets of the flagship space (SHAPE_BUCKETS bucketed): shapes of one
// bucket share a binary key and shapes of different buckets do not, and
// bucketed configs compile for sm_90 at shapes with every residue of D and R
// mod 8 and odd H, and the proposed fallbacks run over issue 13's whole
// range of shapes.  No GPU needed (NVRTC for an explicit architecture); the
// results on the GPU are tests/gpu_mla_test.cpp's.
#include <gtest/gtest.h>

#include <filesystem>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "core/compiler.h"
#include "core/space.h"
#include "tuner/compile_pool.h"

namespace mlatune {
namespace {

const std::filesystem::path space_file =
    std::filesystem::path(MLATUNE_SOURCE_DIR) / "search_spaces" / "fused_mla_attention.yaml";

const char* const tf32x3_config =
    "ALGORITHM=tf32x3,THREADS_PER_QUERY=2,QUERIES_PER_BLOCK=16,HEADS_PER_BLOCK=1,STAGE_LATENT=true,"
    "KEY_TILE=32,FLOAT4=false,UNROLL=1,STAGE_WEIGHTS=false,SHAPE_BUCKETS=";

BinaryKey key_at(const SearchSpace& space, const Compiler& compiler, const std::string& config,
                 const char* shape) {
  const Config c = space.parse_config(config);
  const Shape s = space.parse_shape(shape);
  EXPECT_TRUE(space.check(c, s)) << config << " at " << shape;
  return compiler.key(compile_request(space, c, s, "sm_90"));
}

TEST(MlaBuckets, ShapesOfOneBucketShareABinaryKey) {
  const SearchSpace space = SearchSpace::load(space_file);
  const Compiler compiler;
  const std::string bucketed = std::string(tf32x3_config) + "bucketed,EXPAND_GEMM=mma_sync,KEY_SPLITS=1";
  const std::string exact = std::string(tf32x3_config) + "exact,EXPAND_GEMM=mma_sync,KEY_SPLITS=1";
  // D 57 and 63 -> 64, R 203 and 250 -> 256; H, B and T are run-time values.
  const BinaryKey a = key_at(space, compiler, bucketed, "B=2,T=100,H=3,D=57,R=203");
  EXPECT_EQ(a, key_at(space, compiler, bucketed, "B=1,T=777,H=5,D=63,R=250"));
  EXPECT_EQ(a, key_at(space, compiler, bucketed, "B=8,T=4096,H=64,D=64,R=256"));
  EXPECT_NE(a, key_at(space, compiler, bucketed, "B=2,T=100,H=3,D=65,R=203"));   // D -> 80
  EXPECT_NE(a, key_at(space, compiler, bucketed, "B=2,T=100,H=3,D=57,R=257"));   // R -> 320
  // Exact configs compile every H, D and R in.
  EXPECT_NE(key_at(space, compiler, exact, "B=2,T=100,H=3,D=57,R=203"),
            key_at(space, compiler, exact, "B=2,T=100,H=5,D=57,R=203"));
  // Past the last bucket a bucketed config cannot run the shape.
  const Shape too_wide = space.parse_shape("B=1,T=100,H=1,D=264,R=64");
  EXPECT_FALSE(space.check(space.parse_config(bucketed), too_wide));
  EXPECT_FALSE(space.check(space.parse_config(bucketed), space.parse_shape("B=1,T=100,H=1,D=64,R=1025")));
}

TEST(MlaBuckets, BucketedConfigsCompileForSm90AtOddShapes) {
  const SearchSpace space = SearchSpace::load(space_file);
  const SearchSpace bucketed = space.restrict({"SHAPE_BUCKETS == bucketed"});
  const Compiler compiler;
  CompilePool pool(compiler);
  std::mt19937_64 rng(13);
  std::vector<std::pair<std::string, std::shared_future<CompileResult>>> jobs;
  // D % 8 and R % 8 run through 1..7, H is odd.
  for (const char* text : {"B=2,T=64,H=1,D=9,R=17", "B=1,T=300,H=3,D=42,R=130", "B=2,T=1000,H=5,D=67,R=1019",
                           "B=1,T=777,H=7,D=100,R=76", "B=3,T=90,H=9,D=13,R=205", "B=1,T=500,H=11,D=254,R=30",
                           "B=2,T=333,H=13,D=39,R=511"}) {
    const Shape shape = space.parse_shape(text);
    ASSERT_GT(bucketed.count(shape), 0u) << text;
    // One config per shape keeps this test short on a shared CI machine;
    // scripts/check-templates --where SHAPE_BUCKETS=bucketed compiles more.
    std::optional<Config> config = bucketed.sample(shape, rng);
    ASSERT_TRUE(config.has_value()) << text;
    jobs.emplace_back(space.config_string(*config) + " at " + text,
                      pool.submit(compile_request(space, *config, shape, "sm_90")));
  }
  for (auto& [what, future] : jobs) {
    const CompileResult& result = future.get();
    ASSERT_TRUE(result.ok()) << what << ": " << result.failure().message;
    EXPECT_FALSE(result.binary().usage.spills()) << what;
  }
}

// Bucketed configs that can serve every shape of issue 13's range (B 1-8,
// T 1-4096, H 1-64, D 8-256, R 16-1024), proposed as the space's fallbacks,
// tried in order: a 64-query tile where T > 32, and one that runs
// everywhere (16-query and 16-key tiles, one head per block, no 16-byte
// loads, no staged weights), both tf32x3_kvgemm, each with its expansion on
// wgmma (sm_90a) and on mma.sync (elsewhere).  Checked at the corners of
// the range and the edges of each fallback's T.
TEST(MlaBuckets, ProposedFallbacksRunOverTheWholeRange) {
  const SearchSpace space = SearchSpace::load(space_file);
  const std::string common = "THREADS_PER_QUERY=2,HEADS_PER_BLOCK=1,STAGE_LATENT=true,FLOAT4=false,UNROLL=1,"
                             "STAGE_WEIGHTS=false,SHAPE_BUCKETS=bucketed,ALGORITHM=tf32x3_kvgemm,";
  struct Fallback {
    std::string config;
    std::int64_t min_t;  // runs for T >= min_t
  };
  // The wgmma expansions first (sm_90a, where they are valid), the mma.sync
  // ones for every other GPU; the space lists them in this order.
  const Fallback fallbacks[] = {
      {common + "QUERIES_PER_BLOCK=64,KEY_TILE=32,EXPAND_GEMM=wgmma_m128,KEY_SPLITS=1", 33},
      {common + "QUERIES_PER_BLOCK=16,KEY_TILE=16,EXPAND_GEMM=wgmma_m64,KEY_SPLITS=1", 1},
      {common + "QUERIES_PER_BLOCK=64,KEY_TILE=32,EXPAND_GEMM=mma_sync,KEY_SPLITS=1", 33},
      {common + "QUERIES_PER_BLOCK=16,KEY_TILE=16,EXPAND_GEMM=mma_sync,KEY_SPLITS=1", 1},
  };
  std::vector<std::string> listed;
  for (const Config& c : space.fallbacks()) listed.push_back(space.config_string(c));
  std::vector<std::string> proposed;
  for (const Fallback& f : fallbacks) proposed.push_back(space.config_string(space.parse_config(f.config)));
  EXPECT_EQ(listed, proposed);
  int checked = 0;
  for (const Fallback& f : fallbacks) {
    const Config config = space.parse_config(f.config);
    for (std::int64_t b : {1, 8})
      for (std::int64_t t : {1, 2, 31, 32, 33, 255, 256, 257, 1000, 4096})
        for (std::int64_t h : {1, 7, 64})
          for (std::int64_t d : {8, 9, 129, 255, 256})
            for (std::int64_t r : {16, 17, 513, 1023, 1024}) {
              const Shape shape{{b, t, h, d, r}};
              const bool runs = space.check(config, shape).valid && space.geometry(config, shape).valid();
              EXPECT_EQ(runs, t >= f.min_t) << f.config << " at " << space.shape_string(shape);
              ++checked;
            }
  }
  EXPECT_EQ(checked, 4 * 2 * 10 * 3 * 5 * 5);
}

}  // namespace
}  // namespace mlatune
