// `mlatune report` as a real program: a page from a replayed sweep holds the
// best configs, a plot per parameter, the spread and the search progress, and
// passes tests/check_report_html.py (well-formed, no script, nothing loaded
// from elsewhere); names from the database that look like markup stay text.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cache/store.h"
#include "tests/run_program.h"
#include "tests/h200_sweeps_where.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Result = test_support::ProgramResult;

const fs::path flagship = fs::path(MLATUNE_TEST_DATA_DIR).parent_path() / "search_spaces" / "fused_mla_attention.yaml";
const fs::path recorded = fs::path(MLATUNE_TEST_DATA_DIR) / "data" / "h200_sweeps.csv";
const fs::path checker = fs::path(MLATUNE_TEST_DATA_DIR) / "check_report_html.py";
const char* const s0 = "B=2,T=32,H=4,D=16,R=24";

bool has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

std::optional<fs::path> python3() {
  for (const char* candidate : {"/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3"})
    if (fs::exists(candidate)) return fs::path(candidate);
  return std::nullopt;
}

class ReportCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    cli_ = fs::path(MLATUNE_BINARY_DIR) / "mlatune";
    if (!fs::exists(cli_)) GTEST_SKIP() << "the mlatune program is not built at " << cli_;
    auto python = python3();
    if (!python) GTEST_SKIP() << "python3 is needed to check the page (tests/check_report_html.py)";
    python_ = *python;
    dir_ = fs::temp_directory_path() / ("mlatune_report_cli_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    db_ = dir_ / "r.db";
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }

  Result mlatune(const std::vector<std::string>& args) { return test_support::run_program(cli_, args, dir_); }

  /// The checker's summary of `page`; fails the test when the page fails it.
  json check(const fs::path& page) {
    Result r = test_support::run_program(python_, {checker.string(), page.string()}, dir_);
    EXPECT_EQ(r.code, 0) << r.err;
    json summary = json::parse(r.out, nullptr, false);
    EXPECT_TRUE(summary.is_object()) << r.out;
    return summary;
  }

  fs::path cli_, python_, dir_, db_;
};

TEST_F(ReportCliTest, PageOfAReplayedSweep) {
  // A random search first, then the rest exhaustively (which skips what the
  // first measured): two runs, each with its own progress line.  Brute force
  // by name: the default (auto) is brute force here too, but records "auto".
  for (std::vector<std::string> strategy :
       {std::vector<std::string>{"--strategy", "random", "--max-evals", "60", "--seed", "3"},
        std::vector<std::string>{"--strategy", "brute_force"}}) {
    std::vector<std::string> args{"tune", flagship.string(), "--replay", recorded.string(), "--where", kH200SweepsWhere, "--shape", s0,
                                  "--db", db_.string(), "-q"};
    args.insert(args.end(), strategy.begin(), strategy.end());
    Result tuned = mlatune(args);
    ASSERT_EQ(tuned.code, 0) << tuned.err;
  }
  const fs::path page = dir_ / "report.html";
  Result r = mlatune({"report", "--db", db_.string(), "--space", flagship.string(), "--out", page.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(has(r.out, "wrote " + page.string() + " (")) << r.out;
  EXPECT_TRUE(has(r.out, " bytes): 1354 measurements, 1 best entries, 2 runs\n")) << r.out;

  json summary = check(page);
  ASSERT_TRUE(summary.is_object());
  // Twelve parameters, the spread and the progress: fourteen plots for the one shape.
  EXPECT_EQ(summary["tags"]["svg"], 14);
  EXPECT_EQ(summary["tags"]["table"], 3);  // best configs, runs, the spread's rows
  EXPECT_EQ(summary["h3"], json::array({s0}));
  const std::vector<std::string> titles = summary["svg_titles"];
  for (const char* parameter : {"ALGORITHM", "THREADS_PER_QUERY", "QUERIES_PER_BLOCK", "HEADS_PER_BLOCK",
                                "STAGE_LATENT", "KEY_TILE", "FLOAT4", "UNROLL", "STAGE_WEIGHTS", "SHAPE_BUCKETS",
                                "EXPAND_GEMM", "KEY_SPLITS"})
    EXPECT_NE(std::find(titles.begin(), titles.end(), parameter), titles.end()) << parameter;
  EXPECT_NE(std::find(titles.begin(), titles.end(), std::string(s0) + ": fastest measurements"), titles.end());
  EXPECT_NE(std::find(titles.begin(), titles.end(), std::string(s0) + ": best so far"), titles.end());

  const std::string text = summary["text"];
  Store store = Store::open(db_, StoreMode::read_only);
  auto best = store.all_best();
  ASSERT_EQ(best.size(), 1u);
  EXPECT_TRUE(has(text, best[0].entry.config)) << "the best config is not on the page";
  EXPECT_TRUE(has(text, "run 1 (random)")) << text.substr(0, 2000);
  EXPECT_TRUE(has(text, "run 2 (brute_force)"));
  EXPECT_TRUE(has(text, "random, max_evals 60, seed 3, replay h200_sweeps.csv"));
  EXPECT_TRUE(has(text, "1354 measurements of 1354 configs: ok 1354"));
  EXPECT_TRUE(has(text, "Only kernel fused_mla_attention (from fused_mla_attention.yaml)"));
  // 1354 correct configs, more than the 250 dots a value gets.
  EXPECT_TRUE(has(text, "dots: at most 250 per value"));
}

TEST_F(ReportCliTest, NamesThatLookLikeMarkupStayText) {
  const std::string kernel = "<script>alert('k')</script>";
  const std::string shape = "B=1</h3><script>alert(1)</script>";
  const std::string config = "X=<img src=x onerror=alert(1)>,Y=\"q\"&amp;";
  {
    Store store = Store::open(db_);
    RunInfo run;
    run.kernel_id = store.ensure_kernel({kernel, "t", "d"});
    DeviceIdentity device;
    device.name = "GPU & \"co\" <b>bold</b>";
    device.arch = "sm_90";
    run.device_id = store.ensure_device(device);
    run.toolchain_id = store.ensure_toolchain({"13.0", "<i>v</i>"});
    run.space_path = "/tmp/<space>.yaml";
    run.strategy = "brute_force";
    run.strategy_settings = R"({"seed": 1, "shard": "0/2</td>"})";
    Measurement m;
    m.run_id = store.begin_run(run);
    m.shape = shape;
    m.config = config;
    m.timing = Timing{5.0, 4.5, 6.0, 40, 0.3, "events <cold>"};
    store.record(m);
    m.config = "X=2,Y=1";
    m.outcome = Outcome::wrong_result;
    m.timing.reset();
    m.message = "bad\x01 output";
    store.record(m);
  }
  const fs::path page = dir_ / "evil.html";
  Result r = mlatune({"report", "--db", db_.string(), "--out", page.string()});
  ASSERT_EQ(r.code, 0) << r.err;
  json summary = check(page);
  ASSERT_TRUE(summary.is_object());
  for (const char* tag : {"script", "img", "b", "i"}) EXPECT_FALSE(summary["tags"].contains(tag)) << tag;
  const std::string text = summary["text"];
  for (const std::string& name : {kernel, shape, config, std::string("GPU & \"co\" <b>bold</b>"),
                                  std::string("shard 0/2</td>"), std::string("events <cold>")})
    EXPECT_TRUE(has(text, name)) << name << " is not shown as text";
  EXPECT_EQ(summary["h3"], json::array({shape}));
  // One shape with one correct config and two parameters: four plots.
  EXPECT_EQ(summary["tags"]["svg"], 4);
}

// The checker must be able to fail, or the tests above prove nothing.
TEST_F(ReportCliTest, TheCheckerRefusesBrokenAndActivePages) {
  const fs::path page = dir_ / "bad.html";
  for (const char* body : {"<p>unclosed <b>bold</p>", "<p>ok</p><script>alert(1)</script>",
                           "<p onclick=\"x()\">hi</p>", "<svg><image href=\"https://example.com/x.png\"/></svg>"}) {
    std::ofstream(page) << "<!DOCTYPE html>\n<html><head><title>t</title></head><body>" << body << "</body></html>\n";
    Result r = test_support::run_program(python_, {checker.string(), page.string()}, dir_);
    EXPECT_EQ(r.code, 1) << body;
  }
}

TEST_F(ReportCliTest, RefusesToOverwriteTheDatabase) {
  { Store store = Store::open(db_); }
  Result r = mlatune({"report", "--db", db_.string(), "--out", db_.string()});
  EXPECT_EQ(r.code, 2);
  EXPECT_TRUE(has(r.err, "is the database itself")) << r.err;
  Result missing = mlatune({"report", "--db", db_.string()});
  EXPECT_EQ(missing.code, 2);
  EXPECT_TRUE(has(missing.err, "--out is required")) << missing.err;
}

}  // namespace
}  // namespace mlatune
