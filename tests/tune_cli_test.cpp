// `mlatune tune` as a real program, no GPU needed: --compile-only (and the
// no-GPU path, which compiles everything and times nothing) prints a
// resource table per shape, the first compile failure on stderr, totals, and
// exits 2 when nothing compiled; it stores binaries and nothing else.  A
// replayed sweep prints its summary.  These outputs are what scripts and
// people read: they are checked line by line.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/store.h"
#include "tests/run_program.h"
#include "tuner/worker/client.h"
#include "tests/h200_sweeps_where.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Result = test_support::ProgramResult;

// A two-parameter space whose BROKEN=1 configs do not compile, and whose
// constraint leaves no config at N=16.
constexpr const char* mini_template = R"(extern "C" __global__ void mini(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
#if BROKEN
  this is not C++;
#endif
  if (i < n) y[i] = 2.0f * x[i];
}
)";

std::string mini_space(const std::string& broken_values, const std::string& default_broken) {
  return "kernel: mini\ntemplate: mini.cu\nentry: mini\n"
         "reference:\n  template: tiny_reference.cu\n  entry: tiny_reference\n"
         "  grid: [ceil(N / 128), 1, 1]\n  block: [128, 1, 1]\n"
         "shape:\n  variables: [N]\n  compiled: []\n  defaults:\n    - {N: 100}\n"
         "arguments:\n  - {name: x, type: float32, role: input, shape: [N]}\n"
         "  - {name: y, type: float32, role: output, shape: [N]}\n"
         "  - {name: n, type: int32, value: N}\n"
         "parameters:\n  BROKEN: [" + broken_values + "]\n  THREADS: [32, 64]\n"
         "default: {BROKEN: " + default_broken + ", THREADS: 32}\n"
         "launch:\n  grid: [ceil(N / THREADS), 1, 1]\n  block: [THREADS, 1, 1]\n"
         "constraints:\n  - THREADS <= N\n";
}

void write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

class TuneCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cli_ = fs::path(MLATUNE_BINARY_DIR) / "mlatune";
    if (!fs::exists(cli_)) GTEST_SKIP() << "the mlatune program is not built at " << cli_;
    dir_ = fs::temp_directory_path() / ("mlatune_tune_cli_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    write(dir_ / "mini.cu", mini_template);
    fs::copy_file(fs::path(MLATUNE_TEST_DATA_DIR) / "spaces" / "tiny_reference.cu", dir_ / "tiny_reference.cu");
    write(dir_ / "mini.yaml", mini_space("0, 1", "0"));
    write(dir_ / "broken.yaml", mini_space("1", "1"));
    db_ = dir_ / "tune.db";
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  Result tune(std::vector<std::string> args) {
    args.insert(args.begin(), "tune");
    args.insert(args.end(), {"--db", db_.string(), "--jobs", "2"});
    return test_support::run_program(cli_, args, dir_);
  }

  std::string space(const char* name) const { return (dir_ / name).string(); }

  fs::path cli_, dir_, db_;
};

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text + "\n").find("\n" + line + "\n") != std::string::npos;
}

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

TEST_F(TuneCliTest, CompileOnlyPrintsATablePerShapeAndTotals) {
  Result r = tune({space("mini.yaml"), "--compile-only", "--arch", "sm_90", "--shape", "N=100", "--shape", "N=16"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has_line(r.out, "mini at N=100: 4 valid configs")) << r.out;
  EXPECT_TRUE(has_line(r.out, "config               regs  spill st  spill ld   stack    smem   compile  status"))
      << r.out;
  // Rows in enumeration order; failures show their first error line.
  std::size_t a = r.out.find("\nBROKEN=0,THREADS=32    ");
  std::size_t b = r.out.find("\nBROKEN=0,THREADS=64    ");
  std::size_t c = r.out.find("\nBROKEN=1,THREADS=32     -         -");
  std::size_t d = r.out.find("\nBROKEN=1,THREADS=64     -         -");
  ASSERT_TRUE(a != std::string::npos && b != std::string::npos && c != std::string::npos && d != std::string::npos)
      << r.out;
  EXPECT_TRUE(a < b && b < c && c < d) << r.out;
  EXPECT_TRUE(has(r.out, "  FAILED: mini.cu(4): error: ")) << r.out;
  EXPECT_TRUE(has_line(r.out, "no valid config for N=16 (most restrictive constraint: THREADS <= N)")) << r.out;
  EXPECT_TRUE(has_line(r.out, "total: 4 configs for sm_90 (4 NVRTC runs, 0 reused), 2 compiled, 2 failed, 0 spilling"))
      << r.out;
  EXPECT_TRUE(has(r.out, " s wall on 2 threads, each with a compile process (")) << r.out;
  EXPECT_TRUE(has_line(r.out, "binaries stored in " + db_.string())) << r.out;
  EXPECT_TRUE(has(r.err, "\nfirst compile failure at N=100:\ncompiling mini.cu (entry mini, config BROKEN=1,THREADS=32, "
                         "sm_90) failed: NVRTC_ERROR_COMPILATION\n"))
      << r.err;

  // Only binaries reach the database: no run, no measurement.
  StoreInfo info = Store::open(db_, StoreMode::read_only).info();
  EXPECT_EQ(info.binaries, 2);
  EXPECT_EQ(info.runs, 0);
  EXPECT_EQ(info.measurements, 0);
  EXPECT_EQ(info.devices, 0);

  // A second run loads the binaries that compiled; failures compile again.
  Result again = tune({space("mini.yaml"), "--compile-only", "--arch", "sm_90", "--shape", "N=100"});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_TRUE(has_line(again.out, "total: 4 configs for sm_90 (2 NVRTC runs, 2 reused), 2 compiled, 2 failed, 0 spilling"))
      << again.out;
}

// A space that compiles its prologue apart: the summary says how many
// prologue parts the compile processes compiled between them, and for how
// many configs (the pool's compiler keeps them: core/compiler.h).
TEST_F(TuneCliTest, CompileOnlySaysHowManyProloguePartsServedHowManyConfigs) {
  const std::string apart = (fs::path(MLATUNE_TEST_DATA_DIR) / "spaces" / "apart.yaml").string();
  // EXPAND=true with PROLOGUE_THREADS=128 at both THREADS: one part, two
  // configs.  With 2048 the part is compiled as THREADS=64 has it, whose
  // prologue geometry is invalid (its shared memory is -1): THREADS=64 is
  // compiled apart as itself, THREADS=256 whole.  EXPAND=false has none.
  Result r = tune({apart, "--compile-only", "--arch", "sm_90", "--shape", "N=1000"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "reused; 2 prologue part(s) compiled apart for 3 config(s)), ")) << r.out;
  // The database now holds all eight binaries (N is not compiled in): a run
  // on it compiles nothing, so the JSON run starts from an empty one.
  fs::remove(db_);
  Result json_run = tune({apart, "--compile-only", "--arch", "sm_90", "--shape", "N=2000", "--json"});
  ASSERT_EQ(json_run.code, 0) << json_run.err;
  json out = json::parse(json_run.out, nullptr, false);
  ASSERT_TRUE(out.is_object()) << json_run.out;
  EXPECT_EQ(out["totals"]["prologue_parts"]["compiled"], 2) << json_run.out;
  EXPECT_EQ(out["totals"]["prologue_parts"]["reused"], 1) << json_run.out;
  // A space without the section says nothing of parts.
  Result plain = tune({space("mini.yaml"), "--compile-only", "--arch", "sm_90", "--shape", "N=100"});
  EXPECT_FALSE(has(plain.out, "prologue part")) << plain.out;
}

TEST_F(TuneCliTest, CompileOnlyJson) {
  Result r = tune({space("mini.yaml"), "--compile-only", "--arch", "sm_90", "--shape", "N=100", "--shape", "N=16",
                   "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json out = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(out.is_object()) << r.out;
  EXPECT_EQ(out["kernel"], "mini");
  EXPECT_EQ(out["arch"], "sm_90");
  EXPECT_EQ(out["space"], space("mini.yaml"));
  EXPECT_TRUE(out["device"].is_null());
  EXPECT_EQ(out["no_device_reason"], "");  // --arch given: no GPU was looked for
  EXPECT_EQ(out["notes"], json::array());
  EXPECT_EQ(out["timed"], false);
  ASSERT_EQ(out["shapes"].size(), 2u);
  const json& configs = out["shapes"][0]["configs"];
  ASSERT_EQ(configs.size(), 4u);
  EXPECT_EQ(configs[0]["config"], "BROKEN=0,THREADS=32");
  EXPECT_EQ(configs[0]["status"], "ok");
  EXPECT_GT(configs[0]["cubin_bytes"].get<int>(), 0);
  EXPECT_GT(configs[0]["registers"].get<int>(), 0);
  EXPECT_EQ(configs[0]["options"][0], "--gpu-architecture=sm_90");
  EXPECT_EQ(configs[0]["key"].get<std::string>().size(), 32u);
  EXPECT_EQ(configs[2]["status"], "failed");
  EXPECT_TRUE(has(configs[2]["error"].get<std::string>(), "NVRTC_ERROR_COMPILATION"));
  EXPECT_FALSE(configs[2].contains("registers"));
  EXPECT_EQ(out["shapes"][1]["shape"], "N=16");
  EXPECT_EQ(out["shapes"][1]["configs"], json::array());
  EXPECT_EQ(out["shapes"][1]["note"], "no valid config for N=16 (most restrictive constraint: THREADS <= N)");
  const json& totals = out["totals"];
  EXPECT_EQ(totals["configs"], 4);
  EXPECT_EQ(totals["compiled"], 2);
  EXPECT_EQ(totals["failed"], 2);
  EXPECT_EQ(totals["spilling"], 0);
  EXPECT_EQ(totals["nvrtc_runs"], 4);
  EXPECT_EQ(totals["reused"], 0);
  EXPECT_EQ(totals["threads"], 2);
  EXPECT_EQ(totals["database"], db_.string());
}

TEST_F(TuneCliTest, NothingCompiledIsExitTwo) {
  Result r = tune({space("broken.yaml"), "--compile-only", "--arch", "sm_90"});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has_line(r.out, "total: 2 configs for sm_90 (2 NVRTC runs, 0 reused), 0 compiled, 2 failed, 0 spilling"))
      << r.out;
  EXPECT_TRUE(has(r.err, "mlatune: error: " + space("mini.cu") + ": no config compiled; the first failure is shown above"))
      << r.err;
}

TEST_F(TuneCliTest, WithoutAGpuEveryCandidateIsCompiledAndNothingTimed) {
  WorkerOptions options;
  options.executable = fs::path(MLATUNE_BINARY_DIR) / "mlatune-worker";
  DeviceReport gpu = Worker(options).probe_device();
  if (gpu.usable) GTEST_SKIP() << "a GPU is present: this checks its absence";
  Result r = tune({space("mini.yaml"), "--shape", "N=100", "--where", "THREADS == 64"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.err, "mlatune: no GPU present (" + gpu.reason +
                             "): compiling every candidate for sm_90 only; nothing is timed\n"))
      << r.err;
  EXPECT_TRUE(has_line(r.out, "mini at N=100: 2 valid configs")) << r.out;
  EXPECT_TRUE(has_line(r.out, "total: 2 configs for sm_90 (2 NVRTC runs, 0 reused), 1 compiled, 1 failed, 0 spilling"))
      << r.out;

  Result j = tune({space("mini.yaml"), "--compile-only", "--json"});
  ASSERT_EQ(j.code, 0) << j.err;
  json out = json::parse(j.out, nullptr, false);
  ASSERT_TRUE(out.is_object()) << j.out;
  EXPECT_EQ(out["no_device_reason"], gpu.reason);
  ASSERT_EQ(out["notes"].size(), 1u);
  EXPECT_EQ(out["notes"][0], "no GPU found (" + gpu.reason + "); compiling for sm_90 (choose with --arch)");
}

TEST_F(TuneCliTest, ReplayedSweepSummary) {
  const fs::path flagship = fs::path(MLATUNE_TEST_DATA_DIR).parent_path() / "search_spaces" / "fused_mla_attention.yaml";
  const fs::path recorded = fs::path(MLATUNE_TEST_DATA_DIR) / "data" / "h200_sweeps.csv";
  // Exact configs only: the recorded sweeps measured no shape-bucketed config.
  Result r = tune({flagship.string(), "--replay", recorded.string(), "--shape", "B=2,T=32,H=4,D=16,R=24",
                   "--max-evals", "30", "--seed", "3", "--strategy", "model", "--where", kH200SweepsWhere});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has_line(r.out, "fused_mla_attention at B=2,T=32,H=4,D=16,R=24 on replay of h200_sweeps.csv")) << r.out;
  EXPECT_TRUE(has_line(r.out, "  configs: 1354 valid, 30 planned, 0 already in the database, 30 evaluated now"))
      << r.out;
  EXPECT_TRUE(has_line(r.out, "  outcomes: ok 30 (100%)")) << r.out;
  EXPECT_TRUE(has(r.out, " s wall (replayed: no GPU, no compilation); ")) << r.out;
  EXPECT_TRUE(has(r.out, "\n  best in the database: ")) << r.out;
  EXPECT_TRUE(has(r.out, " us (replayed)  ALGORITHM=")) << r.out;
  EXPECT_TRUE(has(r.out, "\n  speedup over the space's default config (")) << r.out;
  EXPECT_TRUE(has(r.out, "0 cut early; 0 worker replacements; run 1 in " + db_.string() + "\n")) << r.out;
  EXPECT_FALSE(has(r.out, "GPU worker:")) << r.out;
  EXPECT_TRUE(has(r.err, "mlatune: tuning fused_mla_attention on replay of h200_sweeps.csv (sm_90, 0 SMs) into "))
      << r.err;
  EXPECT_TRUE(has(r.err, "B=2,T=32,H=4,D=16,R=24: 1354 valid configs, strategy model, budget 30, 0 already in the "
                         "database\n[1/30] "))
      << r.err;
  // The same sweep again resumes: everything is already in the database.
  Result again = tune({flagship.string(), "--replay", recorded.string(), "--shape", "B=2,T=32,H=4,D=16,R=24",
                       "--max-evals", "30", "--seed", "3", "--strategy", "model", "--json", "--where",
                       kH200SweepsWhere});
  ASSERT_EQ(again.code, 0) << again.err;
  json out = json::parse(again.out, nullptr, false);
  ASSERT_TRUE(out.is_object()) << again.out;
  EXPECT_EQ(out["run_id"], 2);
  EXPECT_EQ(out["shapes"][0]["already_measured"], 30);
  EXPECT_EQ(out["shapes"][0]["evaluated"], 0);
  EXPECT_EQ(out["totals"]["compile_threads"], 0);
}

// The default strategy with a budget searches (auto chooses bayes), starts
// the second shape from the first's best, and the file's "# where:" line
// restricts the candidates without --where.
TEST_F(TuneCliTest, DefaultStrategySearchesAndWarmStartsAcrossShapes) {
  const fs::path flagship = fs::path(MLATUNE_TEST_DATA_DIR).parent_path() / "search_spaces" / "fused_mla_attention.yaml";
  const fs::path recorded = fs::path(MLATUNE_TEST_DATA_DIR) / "data" / "h200_sweeps.csv";
  Result r = tune({flagship.string(), "--replay", recorded.string(), "--shape", "B=2,T=32,H=4,D=16,R=24", "--shape",
                   "B=4,T=256,H=8,D=32,R=64", "--max-evals", "40", "--seed", "3"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.err, fmt::format("mlatune: h200_sweeps.csv measured only configs with {} (its '# where:' line)",
                                     kH200SweepsWhere)))
      << r.err;
  EXPECT_TRUE(has(r.err, "B=2,T=32,H=4,D=16,R=24: 1354 valid configs, strategy bayes (chosen by auto), budget 40, "))
      << r.err;
  EXPECT_TRUE(has(r.err, "B=4,T=256,H=8,D=32,R=64: 3205 valid configs, strategy bayes (chosen by auto), warm start "
                         "from 1 configs tuned at other shapes"))
      << r.err;
  EXPECT_TRUE(has_line(r.out, "  search: bayes (chosen by auto)")) << r.out;
  EXPECT_TRUE(has(r.out, "  search: bayes (chosen by auto), first 1 configs tuned at other shapes")) << r.out;

  // --no-warm-start: no hint.  The file's restriction given again with
  // --where, spelled otherwise, is the same constraint: no error.
  Result cold = tune({flagship.string(), "--replay", recorded.string(), "--shape", "B=4,T=256,H=8,D=32,R=64",
                      "--max-evals", "5", "--seed", "3", "--no-warm-start", "--json", "--where",
                      "SHAPE_BUCKETS==exact&&ALGORITHM<=tf32x3_2k"});
  ASSERT_EQ(cold.code, 0) << cold.err;
  json out = json::parse(cold.out, nullptr, false);
  ASSERT_TRUE(out.is_object()) << cold.out;
  EXPECT_EQ(out["strategy"], "auto");
  EXPECT_EQ(out["shapes"][0]["strategy"], "bayes");
  EXPECT_EQ(out["shapes"][0]["warm_start"]["configs"], 0);
}

// A time budget (here far too small for 1354 configs) ends the search at a
// shape, and the summary says so.
TEST_F(TuneCliTest, ATimeBudgetEndsTheSearchAndTheSummarySaysSo) {
  const fs::path flagship = fs::path(MLATUNE_TEST_DATA_DIR).parent_path() / "search_spaces" / "fused_mla_attention.yaml";
  const fs::path recorded = fs::path(MLATUNE_TEST_DATA_DIR) / "data" / "h200_sweeps.csv";
  Result r = tune({flagship.string(), "--replay", recorded.string(), "--shape", "B=2,T=32,H=4,D=16,R=24",
                   "--time-budget", "0.001s", "--seed", "3", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  json out = json::parse(r.out, nullptr, false);
  ASSERT_TRUE(out.is_object()) << r.out;
  EXPECT_EQ(out["time_budget"], "0.001s");
  EXPECT_EQ(out["shapes"][0]["time_budget_spent"], true);
  EXPECT_LT(out["shapes"][0]["evaluated"].get<int>(), 1354);
  EXPECT_EQ(out["shapes"][0]["strategy"], "bayes");  // the clock may stop it: auto searches

  Result text = tune({flagship.string(), "--replay", recorded.string(), "--shape", "B=4,T=256,H=8,D=32,R=64",
                      "--time-budget", "0.001s", "--seed", "3"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_TRUE(has(text.out, "  stopped: the time budget of 0.001s a shape was spent after ")) << text.out;

  Result bad = tune({flagship.string(), "--time-budget", "5 minutes"});
  EXPECT_EQ(bad.code, 2) << bad.err;
  EXPECT_TRUE(has(bad.err, "--time-budget '5 minutes': column 2: unknown unit ' '")) << bad.err;
}

}  // namespace
}  // namespace mlatune
