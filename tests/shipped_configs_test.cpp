// The tuned configs shipped in search_spaces/tuned/ (issue 13): the H200 file
// must belong to the current kernel version (a template or space change
// that makes it stale fails here, which is the signal to re-tune and ship it
// again), and replayed through the dispatcher's selector it must give a hit at
// every shape it was tuned at and a valid, tuned-derived choice at unseen
// shapes of the benchmark distribution.  No GPU: the index is built for the
// device and toolchain the file names.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <map>
#include <random>
#include <set>
#include <string>

#include "cache/dispatch_index.h"
#include "cache/portable_configs.h"
#include "cache/store.h"
#include "core/launch_plan.h"
#include "core/space.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path root = fs::path(MLATUNE_TEST_DATA_DIR).parent_path();
const fs::path space_file = root / "search_spaces" / "fused_mla_attention.yaml";
const fs::path shipped = root / "search_spaces" / "tuned" / "fused_mla_attention.h200.json";

KernelInfo current_kernel(const SearchSpace& space) {
  return {space.kernel_name(), space.template_hash(), space.definition_hash()};
}

TEST(ShippedConfigs, TheH200FileIsOfTheCurrentKernelVersion) {
  const SearchSpace space = SearchSpace::load(space_file);
  const PortableConfigs file = read_portable_file(shipped);
  const std::vector<PortableEntry> entries =
      entries_for(file, current_kernel(space), shipped.string(), /*skip_other_versions=*/false);
  EXPECT_GE(entries.size(), 30u);
  std::set<std::string> shapes;
  for (const PortableEntry& e : entries) {
    EXPECT_EQ(e.device.name, "NVIDIA H200");
    EXPECT_EQ(e.device.arch, "sm_90");
    EXPECT_GT(e.timing.median_us, 0);
    ASSERT_TRUE(e.error.has_value()) << e.shape;
    EXPECT_LE(e.error->relative_l2, space.tolerance().relative_l2) << e.shape;
    const Shape shape = space.parse_shape(e.shape);
    EXPECT_TRUE(space.check(space.parse_config(e.config), shape).valid) << e.shape << " " << e.config;
    // So that a template change that leaves its code alone keeps it
    // (docs/portable-configs.md, "Carrying entries over").
    EXPECT_TRUE(e.code.has_value()) << e.shape << ": export the file with `cache export-best --space`";
    shapes.insert(e.shape);
  }
  EXPECT_EQ(shapes.size(), entries.size()) << "one best entry per shape";
}

class ShippedReplay : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mlatune_shipped_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    space_ = std::make_unique<SearchSpace>(SearchSpace::load(space_file));
    entries_ = entries_for(read_portable_file(shipped), current_kernel(*space_), shipped.string(), false);
    ASSERT_FALSE(entries_.empty());
  }
  void TearDown() override { fs::remove_all(dir_); }

  DispatchIndex index(Store& store) const {
    DeviceInfo device;
    static_cast<DeviceIdentity&>(device) = entries_.front().device;
    device.l2_bytes = 60 << 20;                   // H200: 60 MiB
    device.max_shared_per_block_optin = 232'448;  // sm_90: 227 KiB
    return DispatchIndex::build(store, *space_, DispatchTarget{device, entries_.front().toolchain});
  }

  fs::path dir_;
  std::unique_ptr<SearchSpace> space_;
  std::vector<PortableEntry> entries_;
};

TEST_F(ShippedReplay, EveryShippedShapeIsAHitWithItsConfig) {
  Store store = Store::open(dir_ / "user.db");
  const ImportCounts counts = store.import_best(entries_, shipped.string());
  EXPECT_EQ(counts.added, static_cast<std::int64_t>(entries_.size()));
  const DispatchIndex idx = index(store);
  EXPECT_EQ(idx.entries(), entries_.size());
  for (const PortableEntry& e : entries_) {
    const Choice choice = idx.choose(space_->parse_shape(e.shape));
    EXPECT_EQ(choice.reason, ChoiceReason::hit) << e.shape << ": " << choice.explanation;
    EXPECT_EQ(choice.config_text, e.config) << e.shape;
  }
}

// Shapes drawn as bench/mla_vs_torch.py --random-shapes draws them (B 1-8, T
// log-uniform 1-4096, H 1-64, D 8-256, R 16-1024): each gets a config that
// can run it, taken from a tuned entry (as is, repaired) or a fallback,
// never the untuned default.
TEST_F(ShippedReplay, UnseenShapesGetValidTunedOrFallbackChoices) {
  Store store = Store::open(dir_ / "user.db");
  store.import_best(entries_, shipped.string());
  const DispatchIndex idx = index(store);
  std::mt19937_64 rng(13);
  std::uniform_int_distribution<std::int64_t> b(1, 8), h(1, 64), d(8, 256), r(16, 1024);
  std::uniform_real_distribution<double> log_t(0.0, std::log(4097.0));
  std::map<ChoiceReason, int> reasons;
  for (int i = 0; i < 300; ++i) {
    const auto t = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::exp(log_t(rng))), 1, 4096);
    const Shape shape{{b(rng), t, h(rng), d(rng), r(rng)}};
    const Choice choice = idx.choose(shape);
    ASSERT_TRUE(choice.ok()) << space_->shape_string(shape);
    EXPECT_TRUE(space_->check(choice.config, shape).valid) << space_->shape_string(shape);
    EXPECT_TRUE(space_->geometry(choice.config, shape).valid()) << space_->shape_string(shape);
    EXPECT_TRUE(choice.reason == ChoiceReason::nearest || choice.reason == ChoiceReason::repaired ||
                choice.reason == ChoiceReason::fallback)
        << space_->shape_string(shape) << ": " << choice.explanation;
    ++reasons[choice.reason];
  }
  for (const auto& [reason, n] : reasons) std::printf("  %s: %d\n", std::string(to_string(reason)).c_str(), n);
  EXPECT_GT(reasons[ChoiceReason::nearest] + reasons[ChoiceReason::repaired], 250);
}

// A dispatcher's first use of a shape chooses, ranks the stand-ins and plans
// the launch; each nests borrows of the space's expression evaluators, and an
// evaluator built on the caller's thread costs milliseconds (on the H200 the
// process's first call spent 5.5 ms ranking, 0.27 ms at later first calls).
// The index prepares them when it is built: unseen shapes then build none.
TEST_F(ShippedReplay, FirstUsesBuildNoExpressionEvaluator) {
  Store store = Store::open(dir_ / "user.db");
  store.import_best(entries_, shipped.string());
  const DispatchIndex idx = index(store);
  const std::uint64_t built = idx.space().evaluators_built();
  EXPECT_GE(built, DispatchIndex::first_use_evaluators);
  space_->prepare_evaluators(DispatchIndex::first_use_evaluators);
  const std::uint64_t built_here = space_->evaluators_built();
  // The benchmark distribution and past it (H to 128, D to 320: fallbacks,
  // the default, shapes nothing can run).
  std::mt19937_64 rng(29);
  std::uniform_int_distribution<std::int64_t> b(1, 8), h(1, 128), d(8, 320), r(16, 1024);
  std::uniform_real_distribution<double> log_t(0.0, std::log(4097.0));
  for (int i = 0; i < 200; ++i) {
    const auto t = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::exp(log_t(rng))), 1, 4096);
    const Shape shape{{b(rng), t, h(rng), d(rng), r(rng)}};
    const Choice choice = idx.choose(shape);
    EXPECT_FALSE(idx.ranked(shape, 8).empty());
    if (choice.ok()) plan_launch(*space_, choice.config, shape);  // the dispatcher plans on its own copy
    ASSERT_EQ(idx.space().evaluators_built(), built) << "at " << space_->shape_string(shape);
    ASSERT_EQ(space_->evaluators_built(), built_here) << "at " << space_->shape_string(shape);
  }
}

}  // namespace
}  // namespace mlatune
