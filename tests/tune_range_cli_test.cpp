// `mlatune tune` over many shapes and `mlatune cache export-best / import /
// revalidate`, as the real program, no GPU needed: a grid and a shapes file
// tuned by replay in one sweep (and resumed), given configs evaluated with
// the invalid ones reported, binaries shared across the shapes of a
// compile-only grid, and best configs carried to a fresh database.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/store.h"
#include "tests/run_program.h"
#include "tuner/worker/client.h"
#include "tests/h200_sweeps_where.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Result = test_support::ProgramResult;

const fs::path flagship = fs::path(MLATUNE_SOURCE_DIR) / "search_spaces" / "fused_mla_attention.yaml";
const fs::path recorded = fs::path(MLATUNE_TEST_DATA_DIR) / "data" / "h200_sweeps.csv";

// A space whose shape variable is compiled into nothing: every shape shares
// every binary.  BROKEN=1 does not compile.
constexpr const char* mini_template = R"(extern "C" __global__ void mini(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
#if BROKEN
  this is not C++;
#endif
  if (i < n) y[i] = 2.0f * x[i];
}
)";
constexpr const char* mini_space =
    "kernel: mini\ntemplate: mini.cu\nentry: mini\n"
    "reference:\n  template: tiny_reference.cu\n  entry: tiny_reference\n"
    "  grid: [ceil(N / 128), 1, 1]\n  block: [128, 1, 1]\n"
    "shape:\n  variables: [N]\n  compiled: []\n  defaults:\n    - {N: 100}\n"
    "arguments:\n  - {name: x, type: float32, role: input, shape: [N]}\n"
    "  - {name: y, type: float32, role: output, shape: [N]}\n"
    "  - {name: n, type: int32, value: N}\n"
    "parameters:\n  BROKEN: [0, 1]\n  THREADS: [32, 64]\n"
    "default: {BROKEN: 0, THREADS: 32}\n"
    "launch:\n  grid: [ceil(N / THREADS), 1, 1]\n  block: [THREADS, 1, 1]\n"
    "constraints:\n  - THREADS <= N\n";

// Configs of the recorded sweep: the first valid at both S0 and S1, the
// second at S0 only (its registers exceed the limit at R=64).
const char* const both =
    "ALGORITHM=tf32x3,THREADS_PER_QUERY=2,QUERIES_PER_BLOCK=32,HEADS_PER_BLOCK=1,STAGE_LATENT=true,KEY_TILE=32,"
    "FLOAT4=true,UNROLL=1,STAGE_WEIGHTS=true,SHAPE_BUCKETS=exact,EXPAND_GEMM=mma_sync,KEY_SPLITS=1";
const char* const s0_only =
    "ALGORITHM=absorbed,THREADS_PER_QUERY=1,QUERIES_PER_BLOCK=8,HEADS_PER_BLOCK=4,STAGE_LATENT=true,KEY_TILE=16,"
    "FLOAT4=false,UNROLL=1,STAGE_WEIGHTS=false,SHAPE_BUCKETS=exact,EXPAND_GEMM=mma_sync,KEY_SPLITS=1";

void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }
bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

class TuneRangeCli : public ::testing::Test {
 protected:
  void SetUp() override {
    cli_ = fs::path(MLATUNE_BINARY_DIR) / "mlatune";
    if (!fs::exists(cli_)) GTEST_SKIP() << "the mlatune program is not built at " << cli_;
    dir_ = fs::temp_directory_path() / ("mlatune_tune_range_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    db_ = dir_ / "tune.db";
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  Result run(std::vector<std::string> args) { return test_support::run_program(cli_, args, dir_); }
  Result tune(std::vector<std::string> args) {
    // The recorded sweeps cover exact configs of the algorithms that existed
    // then: replay serves that subspace.
    args.insert(args.begin(), {"tune", flagship.string(), "--replay", recorded.string(), "--where",
                               kH200SweepsWhere});
    args.insert(args.end(), {"--db", db_.string(), "-q"});
    return run(args);
  }

  fs::path cli_, dir_, db_;
};

TEST_F(TuneRangeCli, GridAndShapesFileAreOneSweepThatResumesPerShape) {
  write(dir_ / "shapes.txt", "# S1, and S0 again (counted once)\nB=4,T=256,H=8,D=32,R=64\nB=2,T=32,H=4,D=16,R=24\n");
  const std::vector<std::string> shapes = {"--grid", "B=2;T=32;H=4;D=16;R=24", "--shapes-file",
                                           (dir_ / "shapes.txt").string(), "--max-evals", "12", "--seed", "5",
                                           "--strategy", "random"};
  std::vector<std::string> args = shapes;
  Result r = tune(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "\n2 shapes:\n  shape                    evaluated   best (r)  shared  best config\n"))
      << r.out;
  EXPECT_TRUE(has(r.out, "\n  B=4,T=256,H=8,D=32,R=64         12 ")) << r.out;
  EXPECT_TRUE(has(r.out, "\nrange: 2 shapes (2 with a best config), 24 evaluations in ")) << r.out;
  EXPECT_TRUE(has(r.out, "; 0 binaries shared across shapes (compiled or loaded once)\n")) << r.out;
  // Shapes files come before grids, and the grid's S0 is the file's: tuned
  // once, in the file's order.
  EXPECT_LT(r.out.find("fused_mla_attention at B=4,T=256,H=8,D=32,R=64"),
            r.out.find("fused_mla_attention at B=2,T=32,H=4,D=16,R=24"));
  EXPECT_EQ(r.out.find("fused_mla_attention at B=2,T=32,H=4,D=16,R=24"),
            r.out.rfind("fused_mla_attention at B=2,T=32,H=4,D=16,R=24"));

  // The same command again: every shape resumes from the database.
  args.push_back("--json");
  Result again = tune(args);
  ASSERT_EQ(again.code, 0) << again.err;
  json out = json::parse(again.out, nullptr, false);
  ASSERT_TRUE(out.is_object()) << again.out;
  ASSERT_EQ(out["shapes"].size(), 2u);
  for (const json& shape : out["shapes"]) {
    EXPECT_EQ(shape["already_measured"], 12) << shape["shape"];
    EXPECT_EQ(shape["evaluated"], 0) << shape["shape"];
  }
  EXPECT_EQ(out["totals"]["shapes"], 2);
  EXPECT_EQ(out["totals"]["evaluated"], 0);
  EXPECT_EQ(Store::open(db_).measurement_count(), 24);
}

TEST_F(TuneRangeCli, BadShapeInputsNameWhereTheyAre) {
  Result grid = tune({"--grid", "B=2;T=32..16;H=4;D=16;R=24"});
  EXPECT_EQ(grid.code, 2);
  EXPECT_TRUE(has(grid.err, "mlatune: error: --grid 'B=2;T=32..16;H=4;D=16;R=24': column 7: range 32..16 is empty"))
      << grid.err;
  write(dir_ / "shapes.txt", "B=2,T=32,H=4,D=16,R=24\nB=2,T=32,H=4\n");
  Result file = tune({"--shapes-file", (dir_ / "shapes.txt").string()});
  EXPECT_EQ(file.code, 2);
  EXPECT_TRUE(has(file.err, "mlatune: error: " + (dir_ / "shapes.txt").string() +
                                ":2: shape 'B=2,T=32,H=4' lacks variable 'D'"))
      << file.err;
  Result both_ways = tune({"--misses", "--grid", "B=2;T=32;H=4;D=16;R=24"});
  EXPECT_EQ(both_ways.code, 2);
  EXPECT_TRUE(has(both_ways.err, "give either --misses or shapes (--shape, --shapes-file, --grid), not both"))
      << both_ways.err;
  EXPECT_FALSE(fs::exists(db_));  // nothing was written
}

TEST_F(TuneRangeCli, GivenConfigsAreEvaluatedAtEveryShapeAndInvalidOnesReported) {
  write(dir_ / "configs.txt", std::string("# imported\n") + both + "\n" + s0_only + "\nALGORITHM=nope\n\n" + both +
                                  "\n");
  const std::string configs = (dir_ / "configs.txt").string();
  Result r = tune({"--shape", "B=2,T=32,H=4,D=16,R=24", "--shape", "B=4,T=256,H=8,D=32,R=64", "--configs-file",
                   configs, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "mlatune: skipped " + configs + ":4: config 'ALGORITHM=nope': ALGORITHM=nope is not one "
                                                          "of its values"))
      << r.err;
  json out = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(out.is_object()) << r.out;
  const json& s0 = out["shapes"][0];
  EXPECT_EQ(s0["evaluated"], 2);
  EXPECT_EQ(s0["skipped"], json::array());
  const json& s1 = out["shapes"][1];
  EXPECT_EQ(s1["evaluated"], 1);
  ASSERT_EQ(s1["skipped"].size(), 1u);
  EXPECT_EQ(s1["skipped"][0]["config"], s0_only);
  EXPECT_TRUE(has(s1["skipped"][0]["reason"].get<std::string>(), "violates ALGORITHM >= tf32x3 || ")) << s1;
  EXPECT_EQ(s1["best"]["config"], both);
  // The run says it evaluated given configs, not which strategy searched.
  EXPECT_EQ(Store::open(db_).runs().at(0).strategy, "given_configs");

  Result searching = tune({"--configs-file", configs, "--strategy", "model"});
  EXPECT_EQ(searching.code, 2);
  EXPECT_TRUE(has(searching.err, "--strategy model cannot be used with --configs-file")) << searching.err;
  write(dir_ / "none.txt", "# nothing of this space\nX=1\n");
  Result none = tune({"--configs-file", (dir_ / "none.txt").string()});
  EXPECT_EQ(none.code, 2);
  EXPECT_TRUE(has(none.err, "none.txt: no config of fused_mla_attention in the file")) << none.err;
}

TEST_F(TuneRangeCli, ShapesOfAGridShareTheirBinaries) {
  write(dir_ / "mini.cu", mini_template);
  write(dir_ / "mini.yaml", mini_space);
  fs::copy_file(fs::path(MLATUNE_TEST_DATA_DIR) / "spaces" / "tiny_reference.cu", dir_ / "tiny_reference.cu");
  Result r = run({"tune", (dir_ / "mini.yaml").string(), "--grid", "N=64..256:x2", "--compile-only", "--arch",
                  "sm_90", "--db", db_.string(), "--jobs", "2", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json out = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(out.is_object()) << r.out;
  ASSERT_EQ(out["shapes"].size(), 3u);
  EXPECT_EQ(out["shapes"][2]["shape"], "N=256");
  // Two configs compile, two fail, at each of three shapes: N is compiled
  // into nothing, so every binary is compiled once and shared by the later
  // shapes (failures are not binaries).
  EXPECT_EQ(out["totals"]["configs"], 12);
  EXPECT_EQ(out["totals"]["nvrtc_runs"], 4);
  EXPECT_EQ(out["totals"]["shared_binaries"], 4);
  EXPECT_EQ(out["shapes"][0]["shared_binaries"], 0);
  EXPECT_EQ(out["shapes"][1]["shared_binaries"], 2);
  Result text = run({"tune", (dir_ / "mini.yaml").string(), "--grid", "N=64..256:x2", "--compile-only", "--arch",
                     "sm_90", "--db", (dir_ / "second.db").string(), "--jobs", "2"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_TRUE(has(text.out, "\n3 shapes; 4 binaries shared across shapes (compiled or loaded once)\n")) << text.out;
}

TEST_F(TuneRangeCli, BestConfigsTravelToAFreshDatabase) {
  ASSERT_EQ(tune({"--grid", "B=2;T=32;H=4;D=16;R=24", "--max-evals", "8", "--seed", "2"}).code, 0);
  ASSERT_EQ(tune({"--grid", "B=4;T=256;H=8;D=32;R=64", "--max-evals", "8", "--seed", "2"}).code, 0);
  const std::string file = (dir_ / "best.json").string();
  Result exported = run({"cache", "export-best", "--db", db_.string(), "--out", file});
  ASSERT_EQ(exported.code, 0) << exported.err;
  EXPECT_TRUE(has(exported.out, "wrote 2 best config(s) of 1 kernel(s) to " + file + " (no binaries):\n")) << exported.out;
  json written = json::parse(test_support::read_file(file), nullptr, false);
  ASSERT_TRUE(written.is_object());
  EXPECT_EQ(written["format"], "mlatune-portable-configs");
  EXPECT_EQ(written["format_version"], 1);
  EXPECT_EQ(written["entries"].size(), 2u);

  const std::string fresh = (dir_ / "fresh.db").string();
  Result imported = run({"cache", "import", file, "--space", flagship.string(), "--db", fresh});
  ASSERT_EQ(imported.code, 0) << imported.err;
  EXPECT_TRUE(has(imported.out, "imported " + file + " into " + fresh +
                                    ": 2 entr(ies) of fused_mla_attention added, 0 already there; 2 best entr(ies) "
                                    "changed\n"))
      << imported.out;
  Result again = run({"cache", "import", file, "--space", flagship.string(), "--db", fresh});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_TRUE(has(again.out, ": 0 entr(ies) of fused_mla_attention added, 2 already there; 0 best entr(ies) changed\n"))
      << again.out;
  Result best_there = run({"cache", "best", "--json", "--db", fresh});
  Result best_here = run({"cache", "best", "--json", "--db", db_.string()});
  json there = json::parse(best_there.out), here = json::parse(best_here.out);
  ASSERT_EQ(there.size(), 2u);
  for (std::size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(there[i]["config"], here[i]["config"]);
    EXPECT_EQ(there[i]["median_us"], here[i]["median_us"]);
    EXPECT_EQ(there[i]["device"], here[i]["device"]);
  }

  Result over_db = run({"cache", "export-best", "--db", db_.string(), "--out", fresh});
  EXPECT_EQ(over_db.code, 2);
  EXPECT_TRUE(has(over_db.err, "--out " + fresh + " is an SQLite database, which the export would overwrite"))
      << over_db.err;

  write(dir_ / "other.json", R"({"format": "mlatune-portable-configs", "format_version": 7, "entries": []})");
  Result refused = run({"cache", "import", (dir_ / "other.json").string(), "--space", flagship.string(), "--db", fresh});
  EXPECT_EQ(refused.code, 2);
  EXPECT_TRUE(has(refused.err, "other.json: format_version: format version 7; this mlatune")) << refused.err;
}

TEST_F(TuneRangeCli, RevalidateSaysWhenThereIsNoGpu) {
  WorkerOptions options;
  options.executable = fs::path(MLATUNE_BINARY_DIR) / "mlatune-worker";
  DeviceReport gpu = Worker(options).probe_device();
  if (gpu.usable) GTEST_SKIP() << "a GPU is present: this checks its absence";
  Result r = run({"cache", "revalidate", "--space", flagship.string(), "--db", db_.string()});
  EXPECT_EQ(r.code, 1);
  EXPECT_TRUE(has(r.err, "mlatune: error: revalidate measures configs on this GPU, and there is none (" + gpu.reason +
                             ")\n"))
      << r.err;
}

}  // namespace
}  // namespace mlatune
