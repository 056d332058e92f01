// Architecture-specific configs: core/architecture.h, the space's `requires:`
// section (tests/spaces/arch.yaml: PATH=hopper needs sm_90a), compilation for
// the architecture a config needs, and a dispatcher that never picks a config
// its device cannot run.  No GPU needed.
#include "core/architecture.h"

#include <filesystem>
#include <string>
#include <unistd.h>

#include <gtest/gtest.h>

#include "cache/dispatch_index.h"
#include "cache/store.h"
#include "core/compiler.h"
#include "core/error.h"
#include "core/space.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path spaces_dir = fs::path(MLATUNE_TEST_DATA_DIR) / "spaces";
const DeviceInfo h200{"NVIDIA H200", "sm_90", 132, 150'000'000'000, "13.0", 52'428'800, 232'448};
const DeviceInfo a100{"NVIDIA A100", "sm_80", 108, 80'000'000'000, "13.0", 41'943'040, 166'912};
const char* const hopper = "PATH=hopper,THREADS=128";
const char* const plain = "PATH=plain,THREADS=128";

Architecture arch(const char* text) { return Architecture::parse(text).value(); }

TEST(Architecture, ParsesNvrtcNamesOnly) {
  EXPECT_EQ(arch("sm_90"), (Architecture{90, 0}));
  EXPECT_EQ(arch("sm_90a"), (Architecture{90, 'a'}));
  EXPECT_EQ(arch("sm_100f").str(), "sm_100f");
  for (const char* bad : {"90", "sm_", "sm_9x", "sm_90b", "compute_90", "sm_a", "sm_5", "sm_90a "})
    EXPECT_FALSE(Architecture::parse(bad)) << bad;
}

TEST(Architecture, WhichDevicesRunWhat) {
  EXPECT_EQ(missing_architecture(arch("sm_80"), arch("sm_90")), "");
  EXPECT_EQ(missing_architecture(arch("sm_90a"), arch("sm_90")), "");
  EXPECT_EQ(missing_architecture(arch("sm_90a"), arch("sm_80")),
            "needs sm_90a (compute capability 9.0 exactly); this device is sm_80");
  EXPECT_NE(missing_architecture(arch("sm_90a"), arch("sm_100")), "");  // 'a' code is not forward-compatible
  EXPECT_NE(missing_architecture(arch("sm_90"), arch("sm_86")), "");
  EXPECT_EQ(missing_architecture(arch("sm_100f"), arch("sm_103")), "");
  EXPECT_NE(missing_architecture(arch("sm_100f"), arch("sm_120")), "");
}

TEST(Architecture, CompileTargetIsWhatTheConfigNeeds) {
  EXPECT_EQ(compile_target("sm_90", std::nullopt), "sm_90");
  EXPECT_EQ(compile_target("sm_90", arch("sm_90a")), "sm_90a");
  EXPECT_EQ(compile_target("sm_80", arch("sm_90a")), "sm_90a");  // no GPU: compile for what it needs
  EXPECT_EQ(compile_target("sm_90", arch("sm_80")), "sm_90");    // a minimum the target meets
  EXPECT_EQ(compile_target("sm_75", arch("sm_80")), "sm_80");
  EXPECT_TRUE(runs_binary("sm_90a", "sm_90"));
  EXPECT_TRUE(runs_binary("sm_90", "sm_90"));
  EXPECT_FALSE(runs_binary("sm_80", "sm_90"));
  EXPECT_FALSE(runs_binary("sm_90a", "sm_80"));
}

class ArchitectureSpace : public ::testing::Test {
 protected:
  SearchSpace space_ = SearchSpace::load(spaces_dir / "arch.yaml");
  Shape shape_ = space_.parse_shape("N=1000");
};

TEST_F(ArchitectureSpace, WithoutADeviceEveryConfigIsEnumerable) {
  EXPECT_EQ(space_.raw_count(), 8u);
  EXPECT_EQ(space_.count(shape_), 7u);  // PATH=hopper needs THREADS >= 128
  EXPECT_TRUE(space_.check(space_.parse_config(hopper), shape_));
  ASSERT_EQ(space_.requirements().size(), 1u);
  EXPECT_EQ(space_.requirements()[0].arch.str(), "sm_90a");
  EXPECT_EQ(space_.requirements()[0].where.line, 33);
  EXPECT_EQ(space_.required_architecture(space_.parse_config(hopper), shape_), arch("sm_90a"));
  EXPECT_EQ(space_.required_architecture(space_.parse_config(plain), shape_), std::nullopt);
}

TEST_F(ArchitectureSpace, ADeviceWithoutTheArchitectureLosesThoseConfigsWithAReason) {
  const SearchSpace a100_space = space_.for_device("sm_80");
  EXPECT_EQ(a100_space.count(shape_), 4u);
  a100_space.for_each_valid(shape_, [&](const Config& c) {
    EXPECT_EQ(a100_space.config_string(c).rfind("PATH=plain", 0), 0u) << a100_space.config_string(c);
    return true;
  });
  const Validity validity = a100_space.check(space_.parse_config(hopper), shape_);
  EXPECT_FALSE(validity);
  EXPECT_EQ(validity.failed_constraint,
            "PATH == hopper needs sm_90a (compute capability 9.0 exactly); this device is sm_80");
  EXPECT_EQ(validity.where.line, 33);
  EXPECT_NE(a100_space.most_restrictive_constraint(shape_).find("needs sm_90a"), std::string::npos);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(a100_space.sample(shape_, rng)->choice[0], 0u);
  EXPECT_EQ(a100_space.definition_hash(), space_.definition_hash());
  EXPECT_EQ(a100_space.device_architecture(), "sm_80");
}

TEST_F(ArchitectureSpace, TheDeviceWithItKeepsThem) {
  EXPECT_EQ(space_.for_device("sm_90").count(shape_), 7u);
  EXPECT_EQ(space_.for_device("sm_90").constraints().size(), space_.constraints().size());
  // Specializing again for another device replaces the first device's constraints.
  EXPECT_EQ(space_.for_device("sm_80").for_device("sm_90").count(shape_), 7u);
  EXPECT_EQ(space_.for_device("").count(shape_), 7u);  // no device known: unchanged
}

TEST_F(ArchitectureSpace, RestrictingKeepsTheDevice) {
  const SearchSpace restricted = space_.for_device("sm_80").restrict({"THREADS >= 256"});
  EXPECT_EQ(restricted.count(shape_), 2u);
  EXPECT_EQ(restricted.device_architecture(), "sm_80");
}

TEST_F(ArchitectureSpace, RequirementsArePartOfTheDefinition) {
  std::string text = space_.text();
  text.replace(text.find("requires:\n  sm_90a: PATH == hopper\n"), 35, "");
  EXPECT_NE(SearchSpace::parse(text, "arch.yaml", spaces_dir).definition_hash(), space_.definition_hash());
}

std::string with_requires(const SearchSpace& space, const std::string& section) {
  std::string text = space.text();
  text.replace(text.find("requires:\n  sm_90a: PATH == hopper\n"), 35, section);
  return text;
}

void expect_error_at(const std::string& text, const std::string& location, const std::string& words) {
  try {
    SearchSpace::parse(text, "arch.yaml", spaces_dir);
    ADD_FAILURE() << "no error for " << words;
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find(location), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}

TEST_F(ArchitectureSpace, BadSectionsNameFileLineAndColumn) {
  expect_error_at(with_requires(space_, "requires:\n  sm_9x: PATH == hopper\n"), "arch.yaml:33:3",
                  "'sm_9x' in 'requires' is not a GPU architecture");
  expect_error_at(with_requires(space_, "requires:\n  sm_90a: PATH == volta\n"), "arch.yaml:33:19",
                  "unknown name 'volta'");
  expect_error_at(with_requires(space_, "requires: [sm_90a]\n"), "arch.yaml:32:11", "must be a map");
  expect_error_at(with_requires(space_, "requires:\n  sm_90a: PATH == hopper\n  sm_90a: THREADS > 64\n"),
                  "arch.yaml:34:3", "duplicate key 'sm_90a'");
}

TEST_F(ArchitectureSpace, TheFirstEntryThatHoldsDecides) {
  const SearchSpace two = SearchSpace::parse(
      with_requires(space_, "requires:\n  sm_90a: PATH == hopper\n  sm_80: THREADS >= 256\n"), "arch.yaml",
      spaces_dir);
  EXPECT_EQ(two.required_architecture(two.parse_config("PATH=hopper,THREADS=256"), shape_), arch("sm_90a"));
  EXPECT_EQ(two.required_architecture(two.parse_config("PATH=plain,THREADS=256"), shape_), arch("sm_80"));
  EXPECT_EQ(two.for_device("sm_75").count(shape_), 2u);  // plain at 64 and 128
}

TEST_F(ArchitectureSpace, AConfigCompilesForTheArchitectureItNeeds) {
  const Config config = space_.parse_config(hopper);
  const CompileRequest request = compile_request(space_, config, shape_, "sm_80");
  EXPECT_EQ(request.arch, "sm_90a");
  const CompileResult result = Compiler().compile(request);
  ASSERT_TRUE(result.ok()) << result.log();
  EXPECT_EQ(result.binary().arch, "sm_90a");
  EXPECT_NE(std::find(result.options().begin(), result.options().end(), "--gpu-architecture=sm_90a"),
            result.options().end());
  // The wgmma instruction is what needs sm_90a: plain sm_90 refuses it.
  CompileRequest forced = request;
  forced.arch = "sm_90";
  const CompileResult refused = Compiler().compile(forced);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(refused.key(), result.key());  // the target is part of the binary key
  EXPECT_EQ(compile_request(space_, space_.parse_config(plain), shape_, "sm_90").arch, "sm_90");
}

class ArchitectureDispatch : public ArchitectureSpace {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mlatune_architecture_test_" + std::to_string(getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    db_ = dir_ / "test.db";
    Store::open(db_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void tune_on_h200(const std::string& config) {
    Store store = Store::open(db_);
    const std::int64_t kernel = store.ensure_kernel(
        {space_.kernel_name(), space_.template_hash(), space_.definition_hash()});
    const std::int64_t run = store.begin_run(RunInfo{kernel, store.ensure_device(h200),
                                                     store.ensure_toolchain(ToolchainInfo::current()),
                                                     "arch.yaml", space_.text(), "brute_force", "{}"});
    Measurement m;
    m.run_id = run;
    m.shape = space_.shape_string(shape_);
    m.config = config;
    m.outcome = Outcome::ok;
    m.timing = Timing{1.0, 1.0, 1.0, 10, 0.0, "test"};
    m.error = ErrorFigures{1e-8, 1e-7};
    store.record(m);
    store.finish_run(run, RunStatus::finished);
  }

  DispatchIndex index(const DeviceInfo& device) {
    Store store = Store::open(db_, StoreMode::read_only);
    return DispatchIndex::build(store, space_, DispatchTarget{device, ToolchainInfo::current()});
  }

  fs::path dir_, db_;
};

TEST_F(ArchitectureDispatch, TheDeviceWithItRunsTheSm90aFallbackCompiledForSm90a) {
  const Choice choice = index(h200).choose(shape_);
  EXPECT_EQ(choice.reason, ChoiceReason::fallback);
  EXPECT_EQ(choice.config_text, hopper);
  EXPECT_EQ(choice.arch, "sm_90a");
  EXPECT_EQ(choice.binary, Compiler().key(compile_request(space_, space_.parse_config(hopper), shape_, "sm_90")));
}

TEST_F(ArchitectureDispatch, ADeviceWithoutItNeverChoosesIt) {
  tune_on_h200(hopper);
  const DispatchIndex a100_index = index(a100);
  const std::vector<Choice> ranked = a100_index.ranked(shape_, 20);
  ASSERT_FALSE(ranked.empty());
  for (const Choice& choice : ranked) {
    EXPECT_EQ(choice.config_text.rfind("PATH=plain", 0), 0u) << choice.explanation;
    EXPECT_EQ(choice.arch, "sm_80");
  }
  // The H200's tuned config is repaired: one parameter changed, PATH.
  EXPECT_EQ(ranked.front().reason, ChoiceReason::repaired) << ranked.front().explanation;
  EXPECT_EQ(ranked.front().config_text, plain);
  EXPECT_NE(ranked.front().explanation.find("needs sm_90a"), std::string::npos) << ranked.front().explanation;
  // On the H200 itself the same entry is a hit.
  EXPECT_EQ(index(h200).choose(shape_).reason, ChoiceReason::hit);
}

// The flagship space: the cluster expansion (EXPAND_GEMM fma_cluster) needs
// thread-block clusters, so sm_90 and later; on an A100 neither it nor any
// wgmma config is valid, and the reason names what is missing.
TEST(FlagshipArchitecture, TheClusterExpansionNeedsSm90) {
  const SearchSpace space = SearchSpace::load(spaces_dir.parent_path().parent_path() / "search_spaces" /
                                              "fused_mla_attention.yaml");
  const Shape shape = space.parse_shape("B=4,T=7,H=8,D=116,R=935");
  const Config cluster = space.parse_config(
      "ALGORITHM=tf32x3_kvgemm,THREADS_PER_QUERY=2,QUERIES_PER_BLOCK=16,HEADS_PER_BLOCK=1,STAGE_LATENT=true,"
      "KEY_TILE=16,FLOAT4=false,UNROLL=1,STAGE_WEIGHTS=false,SHAPE_BUCKETS=exact,EXPAND_GEMM=fma_cluster,KEY_SPLITS=1");
  ASSERT_TRUE(space.check(cluster, shape));
  EXPECT_EQ(space.required_architecture(cluster, shape), arch("sm_90"));
  EXPECT_TRUE(space.for_device("sm_90").check(cluster, shape));
  const SearchSpace a100_space = space.for_device("sm_80");
  const Validity validity = a100_space.check(cluster, shape);
  EXPECT_FALSE(validity);
  EXPECT_NE(validity.failed_constraint.find("needs sm_90"), std::string::npos) << validity.failed_constraint;
  std::size_t valid_on_a100 = 0;
  a100_space.for_each_valid(shape, [&](const Config& c) {
    ++valid_on_a100;
    const std::string text = a100_space.config_string(c);
    EXPECT_EQ(text.find("EXPAND_GEMM=fma_cluster"), std::string::npos) << text;
    EXPECT_EQ(text.find("wgmma"), std::string::npos) << text;
    return true;
  });
  EXPECT_GT(valid_on_a100, 0u);
  EXPECT_LT(valid_on_a100, space.count(shape));
}

}  // namespace
}  // namespace mlatune
