// On a GPU, as the real program: a grid of four small shapes tuned in one
// sweep (binaries shared by the shapes whose compiled-in H, D, R agree), its
// best configs exported, imported into a fresh database as another device's,
// and re-validated there, so that each becomes this GPU's measured result.
// Each test skips with the reason where there is no GPU.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cache/portable_configs.h"
#include "cache/store.h"
#include "tests/gpu_worker.h"
#include "tests/run_program.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path flagship = fs::path(MLATUNE_SOURCE_DIR) / "search_spaces" / "fused_mla_attention.yaml";
// Two sequence lengths x two head counts; D and R fixed, so the two T of one
// H share every binary.
const char* const grid = "B=1;T=32|64;H=2|4;D=16;R=24";

class GpuTuneRange : public ::testing::Test {
 protected:
  void SetUp() override {
    MLATUNE_REQUIRE_GPU();
    dir_ = fs::temp_directory_path() / ("mlatune_gpu_range_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!dir_.empty()) fs::remove_all(dir_);
  }
  test_support::ProgramResult run(const std::vector<std::string>& args) {
    return test_support::run_program(fs::path(MLATUNE_BINARY_DIR) / "mlatune", args, dir_);
  }
  fs::path dir_;
};

TEST_F(GpuTuneRange, GridTuneExportImportRevalidate) {
  const std::string db = (dir_ / "tuned.db").string();
  auto tuned = run({"tune", flagship.string(), "--grid", grid, "--max-evals", "12", "--seed", "1", "--db", db, "-q",
                    "--json"});
  ASSERT_EQ(tuned.code, 0) << tuned.err;
  json out = json::parse(tuned.out, nullptr, false);
  ASSERT_TRUE(out.is_object()) << tuned.out;
  ASSERT_EQ(out["totals"]["shapes"], 4);
  EXPECT_EQ(out["totals"]["evaluated"], 48);
  EXPECT_GT(out["totals"]["shared_binaries"].get<int>(), 0) << "T=64 should reuse the binaries of T=32";
  for (const json& shape : out["shapes"]) EXPECT_TRUE(shape.contains("best")) << shape["shape"];

  // The export, rewritten as if another GPU had measured it.
  const fs::path file = dir_ / "best.json";
  ASSERT_EQ(run({"cache", "export-best", "--db", db, "--out", file.string()}).code, 0);
  PortableConfigs configs = read_portable_file(file);
  ASSERT_EQ(configs.entries.size(), 4u);
  const DeviceIdentity here = configs.entries[0].device;
  for (PortableEntry& e : configs.entries) e.device.name = "NVIDIA imaginary";
  write_portable_file(file, configs);

  const std::string fresh = (dir_ / "fresh.db").string();
  auto imported = run({"cache", "import", file.string(), "--space", flagship.string(), "--db", fresh});
  ASSERT_EQ(imported.code, 0) << imported.err;
  auto revalidated = run({"cache", "revalidate", "--space", flagship.string(), "--db", fresh, "-q"});
  ASSERT_EQ(revalidated.code, 0) << revalidated.err;
  EXPECT_NE(revalidated.out.find("revalidated 4 foreign best config(s):"), std::string::npos) << revalidated.out;
  Store store = Store::open(fresh, StoreMode::read_only);
  int mine = 0;
  for (const BestRecord& b : store.all_best()) mine += b.device == here ? 1 : 0;
  EXPECT_EQ(mine, 4);  // every foreign config ran here and became this device's
  // Nothing is left to do the second time.
  auto again = run({"cache", "revalidate", "--space", flagship.string(), "--db", fresh, "-q"});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("\nrevalidated 4 foreign best config(s):"), std::string::npos) << again.out;
  EXPECT_NE(again.out.find("here: measured here earlier"), std::string::npos) << again.out;
}

}  // namespace
}  // namespace mlatune
