// The fault-injection family (tests/faults) without a GPU: every mode
// compiles for sm_90 with NVRTC, and the modes that use the workspace run
// their prologue, the others not.  The GPU side is gpu_evaluator_test.
#include <filesystem>

#include <gtest/gtest.h>

#include "core/space.h"
#include "tuner/evaluator.h"
#include "tuner/support_kernels.h"

namespace mlatune {
namespace {

const std::filesystem::path faults_file =
    std::filesystem::path(MLATUNE_TEST_DATA_DIR) / "faults" / "faults.yaml";

bool uses_workspace(const std::string& mode) { return mode == "staged" || mode == "workspace_past_end"; }

TEST(FaultsSpace, EveryModeCompilesForSm90AndOnlyStagedModesRunThePrologue) {
  SearchSpace space = SearchSpace::load(faults_file);
  const Shape shape = space.parse_shape("N=65536");
  const Parameter* mode = nullptr;
  for (const Parameter& p : space.parameters())
    if (p.name == "MODE") mode = &p;
  ASSERT_NE(mode, nullptr);
  EXPECT_EQ(mode->text.size(), 14u);
  for (const std::string& name : mode->text) {
    SCOPED_TRACE(name);
    Config config = space.parse_config("MODE=" + name + ",THREADS=256");
    CubinBuild cubin = nvrtc_compile_cubin(space.template_text(), "faults.cu", space.kernel().entry,
                                           space.definitions(config, shape), "sm_90");
    ASSERT_TRUE(cubin.ok) << cubin.log;
    Candidate candidate;
    describe_launch(space, config, shape, candidate);
    EXPECT_EQ(candidate.entry, "faults");
    if (uses_workspace(name)) {
      ASSERT_TRUE(candidate.prologue);
      EXPECT_EQ(candidate.prologue->entry, "faults_stage");
      EXPECT_EQ(candidate.workspace_bytes, std::vector<std::int64_t>{65536 * 4});
      EXPECT_NE(cubin.cubin.find("faults_stage"), std::string::npos);
    } else {
      EXPECT_FALSE(candidate.prologue);
      EXPECT_TRUE(candidate.workspace_bytes.empty());
    }
  }
}

}  // namespace
}  // namespace mlatune
