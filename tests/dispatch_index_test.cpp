#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <unistd.h>

#include <fmt/format.h>

#include "cache/dispatch_index.h"
#include "cache/store.h"
#include "core/compiler.h"
#include "core/space.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path spaces_dir = fs::path(MLATUNE_TEST_DATA_DIR) / "spaces";
const DeviceInfo h200{"NVIDIA H200", "sm_90", 132, 150'000'000'000, "13.0", 52'428'800, 232'448};
const DeviceInfo a100{"NVIDIA A100", "sm_80", 108, 80'000'000'000, "13.0", 41'943'040, 166'912};

// Configs of tests/spaces/small.yaml (ALGORITHM, THREADS, ITEMS, VECTOR).
const char* const vector_config = "ALGORITHM=tiled,THREADS=64,ITEMS=4,VECTOR=true";
const char* const plain_config = "ALGORITHM=unrolled,THREADS=256,ITEMS=2,VECTOR=false";
const char* const other_config = "ALGORITHM=plain,THREADS=32,ITEMS=8,VECTOR=false";

class DispatchIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("mlatune_dispatch_index_test_" + std::to_string(getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    db_ = dir_ / "test.db";
    space_ = std::make_unique<SearchSpace>(SearchSpace::load(spaces_dir / "small.yaml"));
    toolchain_ = ToolchainInfo::current();
  }
  void TearDown() override { fs::remove_all(dir_); }

  KernelInfo current_kernel() const {
    return {space_->kernel_name(), space_->template_hash(), space_->definition_hash()};
  }

  // Records `config` as the (only, hence best) measurement at `shape`.
  void tune(const std::string& shape, const std::string& config, double median_us,
            const DeviceInfo& device = h200, std::optional<KernelInfo> kernel = std::nullopt,
            std::optional<ToolchainInfo> toolchain = std::nullopt) {
    Store store = Store::open(db_);
    std::int64_t kernel_id = store.ensure_kernel(kernel ? *kernel : current_kernel());
    std::int64_t device_id = store.ensure_device(device);
    std::int64_t toolchain_id = store.ensure_toolchain(toolchain ? *toolchain : toolchain_);
    std::int64_t run = store.begin_run(
        RunInfo{kernel_id, device_id, toolchain_id, "small.yaml", space_->text(), "brute_force", "{}"});
    Measurement m;
    m.run_id = run;
    m.shape = space_->shape_string(space_->parse_shape(shape));
    m.config = space_->config_string(space_->parse_config(config));
    m.outcome = Outcome::ok;
    m.timing = Timing{median_us, median_us, median_us, 10, 0.0, "test"};
    m.error = ErrorFigures{1e-8, 1e-7};
    store.record(m);
    store.finish_run(run, RunStatus::finished);
  }

  DispatchIndex index(const DeviceInfo& device = h200) {
    if (!fs::exists(db_)) Store::open(db_);  // an empty database
    Store store = Store::open(db_, StoreMode::read_only);
    return DispatchIndex::build(store, *space_, DispatchTarget{device, toolchain_});
  }

  BinaryKey key_for(const std::string& config, const std::string& shape, const std::string& arch) const {
    return Compiler().key(
        compile_request(*space_, space_->parse_config(config), space_->parse_shape(shape), arch));
  }

  fs::path dir_;
  fs::path db_;
  std::unique_ptr<SearchSpace> space_;
  ToolchainInfo toolchain_;
};

TEST_F(DispatchIndexTest, ExactShapeOnThisDeviceIsAHit) {
  tune("N=1000,M=16", vector_config, 3.5);
  tune("N=64,M=3", plain_config, 1.0);
  DispatchIndex idx = index();
  EXPECT_EQ(idx.entries(), 2u);
  Choice choice = idx.choose(space_->parse_shape("N=1000,M=16"));
  EXPECT_EQ(choice.reason, ChoiceReason::hit);
  EXPECT_EQ(choice.config, space_->parse_config(vector_config));
  EXPECT_EQ(choice.config_text, space_->config_string(space_->parse_config(vector_config)));
  ASSERT_TRUE(choice.source_shape);
  EXPECT_EQ(*choice.source_shape, space_->parse_shape("N=1000,M=16"));
  EXPECT_EQ(choice.source_device, "NVIDIA H200");
  EXPECT_DOUBLE_EQ(choice.tuned_median_us, 3.5);
  EXPECT_EQ(choice.binary, key_for(vector_config, "N=1000,M=16", "sm_90"));
  EXPECT_NE(choice.explanation.find("hit"), std::string::npos) << choice.explanation;
}

TEST_F(DispatchIndexTest, NearestTunedShapeWhoseConfigIsValidHere) {
  tune("N=1000,M=16", vector_config, 3.5);  // VECTOR needs M % 4 == 0
  tune("N=64,M=3", plain_config, 1.0);
  DispatchIndex idx = index();

  // Closest to N=900,M=16 is N=1000,M=16, and its config is valid there.
  Choice close = idx.choose(space_->parse_shape("N=900,M=16"));
  EXPECT_EQ(close.reason, ChoiceReason::nearest);
  EXPECT_EQ(close.config, space_->parse_config(vector_config));
  ASSERT_TRUE(close.source_shape);
  EXPECT_EQ(*close.source_shape, space_->parse_shape("N=1000,M=16"));
  EXPECT_EQ(close.binary, key_for(vector_config, "N=900,M=16", "sm_90"));

  // N=1000,M=15 is closest to N=1000,M=16 too, but M % 4 != 0 rules out its
  // VECTOR config: the farther N=64,M=3 entry is taken instead.
  Choice recheck = idx.choose(space_->parse_shape("N=1000,M=15"));
  EXPECT_EQ(recheck.reason, ChoiceReason::nearest);
  EXPECT_EQ(recheck.config, space_->parse_config(plain_config));
  ASSERT_TRUE(recheck.source_shape);
  EXPECT_EQ(*recheck.source_shape, space_->parse_shape("N=64,M=3"));
  EXPECT_TRUE(space_->check(recheck.config, space_->parse_shape("N=1000,M=15")));
  EXPECT_NE(recheck.explanation.find("1 closer candidate(s) needed more changes"), std::string::npos)
      << recheck.explanation;
}

TEST_F(DispatchIndexTest, AnInvalidTunedConfigIsRepaired) {
  tune("N=1000,M=16", vector_config, 3.5);
  const Shape shape = space_->parse_shape("N=1000,M=7");
  Choice choice = index().choose(shape);
  EXPECT_EQ(choice.reason, ChoiceReason::repaired);
  EXPECT_EQ(choice.config_text, "ALGORITHM=tiled,THREADS=64,ITEMS=4,VECTOR=false");
  EXPECT_EQ(choice.tuned_config_text, space_->config_string(space_->parse_config(vector_config)));
  ASSERT_TRUE(choice.source_shape);
  EXPECT_EQ(*choice.source_shape, space_->parse_shape("N=1000,M=16"));
  ASSERT_EQ(choice.changes.size(), 1u);
  EXPECT_EQ(choice.repair, "VECTOR true -> false (constraint 'VECTOR == 0 || M % 4 == 0' fails at M=7)");
  EXPECT_NE(choice.explanation.find("repaired: config tuned at N=1000,M=16 on NVIDIA H200"), std::string::npos)
      << choice.explanation;
  EXPECT_NE(choice.explanation.find(choice.repair), std::string::npos) << choice.explanation;
  EXPECT_EQ(choice.binary, key_for(choice.config_text, "N=1000,M=7", "sm_90"));
}

TEST_F(DispatchIndexTest, NoRepairWithinTheLimitsFallsBackToTheDefault) {
  tune("N=1000,M=16", vector_config, 3.5);
  SelectorOptions options;
  options.repair.max_changes = 0;
  Store store = Store::open(db_, StoreMode::read_only);
  DispatchIndex idx = DispatchIndex::build(store, *space_, DispatchTarget{h200, toolchain_}, options);
  Choice choice = idx.choose(space_->parse_shape("N=1000,M=7"));
  EXPECT_EQ(choice.reason, ChoiceReason::default_config);
  EXPECT_EQ(choice.config, space_->default_config());
  EXPECT_FALSE(choice.source_shape);
  EXPECT_NE(choice.explanation.find("no tuned config could be repaired here (1 tried, first: " +
                                    space_->config_string(space_->parse_config(vector_config)) +
                                    " from N=1000,M=16: constraint 'VECTOR == 0 || M % 4 == 0' fails at M=7"),
            std::string::npos)
      << choice.explanation;
  EXPECT_EQ(choice.binary, key_for(space_->config_string(space_->default_config()), "N=1000,M=7", "sm_90"));
}

TEST_F(DispatchIndexTest, EmptyStoreGivesTheDefault) {
  DispatchIndex idx = index();
  EXPECT_EQ(idx.entries(), 0u);
  Choice choice = idx.choose(space_->parse_shape("N=5,M=2"));
  EXPECT_EQ(choice.reason, ChoiceReason::default_config);
  EXPECT_EQ(choice.config, space_->default_config());
  EXPECT_NE(choice.explanation.find("no tuned shape"), std::string::npos) << choice.explanation;
}

TEST_F(DispatchIndexTest, InvalidDefaultGivesTheFirstValidConfig) {
  std::string text = space_->text();
  const std::string from = "VECTOR: false}";
  ASSERT_NE(text.find("default: {ALGORITHM: plain"), std::string::npos);
  text.replace(text.rfind(from), from.size(), "VECTOR: true}");
  space_ = std::make_unique<SearchSpace>(SearchSpace::parse(text, "small_vector_default.yaml", spaces_dir));
  const Shape shape = space_->parse_shape("N=100,M=6");
  ASSERT_FALSE(space_->check(space_->default_config(), shape));
  Choice choice = index().choose(shape);
  EXPECT_EQ(choice.reason, ChoiceReason::first_valid);
  std::optional<Config> first;
  space_->for_each_valid(shape, [&](const Config& c) {
    first = c;
    return false;
  });
  ASSERT_TRUE(first);
  EXPECT_EQ(choice.config, *first);
  // Where the default is valid it is still the answer.
  EXPECT_EQ(index().choose(space_->parse_shape("N=100,M=8")).reason, ChoiceReason::default_config);
}

TEST_F(DispatchIndexTest, ShapeNoConfigCanRunIsNone) {
  std::string text = space_->text();
  const std::string anchor = "constraints:\n";
  text.insert(text.rfind(anchor) + anchor.size(), "  - N <= 100000\n");
  space_ = std::make_unique<SearchSpace>(SearchSpace::parse(text, "small_bounded.yaml", spaces_dir));
  Choice choice = index().choose(space_->parse_shape("N=200000,M=4"));
  EXPECT_EQ(choice.reason, ChoiceReason::none);
  EXPECT_FALSE(choice.ok());
  EXPECT_NE(choice.explanation.find("N <= 100000"), std::string::npos) << choice.explanation;
}

TEST_F(DispatchIndexTest, StaleKernelVersionsAreIgnored) {
  KernelInfo old_template = current_kernel();
  old_template.template_hash = "0123456789abcdef0123456789abcdef";
  KernelInfo old_definition = current_kernel();
  old_definition.definition_hash = "fedcba9876543210fedcba9876543210";
  tune("N=1000,M=16", vector_config, 1.0, h200, old_template);
  tune("N=2000,M=16", plain_config, 1.0, h200, old_definition);
  DispatchIndex idx = index();
  EXPECT_EQ(idx.entries(), 0u);
  EXPECT_EQ(idx.ignored(), 2u);
  Choice choice = idx.choose(space_->parse_shape("N=1000,M=16"));
  EXPECT_EQ(choice.reason, ChoiceReason::default_config);
  EXPECT_EQ(choice.config, space_->default_config());
  // Also not used as guidance for another shape.
  EXPECT_EQ(idx.choose(space_->parse_shape("N=1500,M=16")).reason, ChoiceReason::default_config);
}

TEST_F(DispatchIndexTest, AnotherToolchainIsIgnored) {
  tune("N=1000,M=16", vector_config, 1.0, h200, std::nullopt, ToolchainInfo{"12.4", toolchain_.mlatune_version});
  tune("N=1000,M=8", other_config, 1.0, h200, std::nullopt, ToolchainInfo{toolchain_.nvrtc_version, "0.0.1-old"});
  DispatchIndex idx = index();
  EXPECT_EQ(idx.entries(), 0u);
  EXPECT_EQ(idx.ignored(), 2u);
  EXPECT_EQ(idx.choose(space_->parse_shape("N=1000,M=16")).reason, ChoiceReason::default_config);
  EXPECT_EQ(idx.choose(space_->parse_shape("N=1000,M=8")).reason, ChoiceReason::default_config);
}

TEST_F(DispatchIndexTest, AnotherDevicesBestOnlyGuides) {
  tune("N=1000,M=16", vector_config, 2.0, a100);
  DispatchIndex idx = index();
  Choice choice = idx.choose(space_->parse_shape("N=1000,M=16"));
  // Same shape, other device: not a hit, but its config is used ...
  EXPECT_EQ(choice.reason, ChoiceReason::nearest);
  EXPECT_EQ(choice.config, space_->parse_config(vector_config));
  EXPECT_EQ(choice.source_device, "NVIDIA A100");
  EXPECT_NE(choice.explanation.find("another device"), std::string::npos) << choice.explanation;
  // ... compiled for this device's architecture, never the A100's.
  EXPECT_EQ(choice.binary, key_for(vector_config, "N=1000,M=16", "sm_90"));
  EXPECT_NE(choice.binary, key_for(vector_config, "N=1000,M=16", "sm_80"));
  // Re-validated like any other: VECTOR is repaired away where M % 4 != 0.
  Choice odd = idx.choose(space_->parse_shape("N=1000,M=17"));
  EXPECT_EQ(odd.reason, ChoiceReason::repaired);
  EXPECT_EQ(odd.config_text, "ALGORITHM=tiled,THREADS=64,ITEMS=4,VECTOR=false");
  EXPECT_NE(odd.explanation.find("another device"), std::string::npos) << odd.explanation;
  // This device's entries come first, even at a farther shape.
  tune("N=10,M=16", other_config, 9.0, h200);
  Choice own = index().choose(space_->parse_shape("N=1000,M=16"));
  EXPECT_EQ(own.reason, ChoiceReason::nearest);
  EXPECT_EQ(own.config, space_->parse_config(other_config));
  EXPECT_EQ(own.source_device, "NVIDIA H200");
}

TEST_F(DispatchIndexTest, ThisDevicesEntriesAreHitsOnlyForThisDevice) {
  tune("N=1000,M=16", vector_config, 2.0, h200);
  // Seen from the A100, the H200's entry is guidance, not a hit.
  Choice choice = index(a100).choose(space_->parse_shape("N=1000,M=16"));
  EXPECT_EQ(choice.reason, ChoiceReason::nearest);
  EXPECT_EQ(choice.binary, key_for(vector_config, "N=1000,M=16", "sm_80"));
}

TEST_F(DispatchIndexTest, BinariesOfAnotherArchitectureAreNeverUsed) {
  tune("N=1000,M=16", vector_config, 2.0, h200);
  DispatchIndex idx = index();
  Choice choice = idx.choose(space_->parse_shape("N=1000,M=16"));
  ASSERT_EQ(choice.reason, ChoiceReason::hit);

  BinaryRecord foreign;
  foreign.key = key_for(vector_config, "N=1000,M=16", "sm_80").hash;
  foreign.kernel_name = space_->kernel_name();
  foreign.template_hash = space_->template_hash();
  foreign.nvrtc_version = toolchain_.nvrtc_version;
  foreign.arch = "sm_80";
  foreign.cubin = {0x7f, 'E', 'L', 'F'};
  {
    Store store = Store::open(db_);
    store.put_binary(foreign);
    // A record under this architecture's key that claims another architecture
    // (or NVRTC, or template) is refused too.
    BinaryRecord mislabelled = foreign;
    mislabelled.key = choice.binary.hash;
    store.put_binary(mislabelled);
  }
  {
    Store store = Store::open(db_, StoreMode::read_only);
    EXPECT_FALSE(idx.stored_binary(store, choice));
  }

  // The binary of this architecture, stored under its key, is used.
  tune("N=1000,M=8", other_config, 2.0, h200);
  DispatchIndex idx2 = index();
  Choice own = idx2.choose(space_->parse_shape("N=1000,M=8"));
  ASSERT_EQ(own.reason, ChoiceReason::hit);
  CompiledBinary compiled;
  compiled.key = own.binary;
  compiled.cubin = std::string("\x7f" "ELF-sm_90", 10);
  compiled.arch = "sm_90";
  compiled.entry = space_->kernel().entry;
  BinaryRecord record = idx2.binary_record(compiled);
  EXPECT_EQ(record.arch, "sm_90");
  EXPECT_EQ(record.template_hash, space_->template_hash());
  {
    Store store = Store::open(db_);
    store.put_binary(record);
  }
  Store store = Store::open(db_, StoreMode::read_only);
  std::optional<BinaryRecord> found = idx2.stored_binary(store, own);
  ASSERT_TRUE(found);
  EXPECT_EQ(found->cubin, record.cubin);
  // The mislabelled record stays refused.
  EXPECT_FALSE(idx.stored_binary(store, choice));
}

TEST_F(DispatchIndexTest, ABinaryLabelledForAnotherToolchainTemplateOrKernelIsRefused) {
  tune("N=1000,M=16", vector_config, 2.0, h200);
  DispatchIndex idx = index();
  Choice choice = idx.choose(space_->parse_shape("N=1000,M=16"));
  ASSERT_EQ(choice.reason, ChoiceReason::hit);
  CompiledBinary compiled;
  compiled.key = choice.binary;
  compiled.cubin = std::string("\x7f" "ELF-sm_90", 10);
  compiled.arch = "sm_90";
  compiled.entry = space_->kernel().entry;
  const BinaryRecord good = idx.binary_record(compiled);

  struct Mislabel {
    const char* what;
    void (*apply)(BinaryRecord&);
  };
  const Mislabel mislabels[] = {
      {"another NVRTC", [](BinaryRecord& r) { r.nvrtc_version = "0.0"; }},
      {"another template version", [](BinaryRecord& r) { r.template_hash = "0123456789abcdef0123456789abcdef"; }},
      {"another kernel", [](BinaryRecord& r) { r.kernel_name = "other"; }},
      {"no bytes", [](BinaryRecord& r) { r.cubin.clear(); }},
  };
  int n = 0;
  for (const Mislabel& mislabel : mislabels) {
    SCOPED_TRACE(mislabel.what);
    // A store of its own each: a key already stored is never replaced.
    const fs::path db = dir_ / ("mislabelled_" + std::to_string(n++) + ".db");
    BinaryRecord record = good;
    mislabel.apply(record);
    Store::open(db).put_binary(record);
    Store store = Store::open(db, StoreMode::read_only);
    ASSERT_TRUE(store.get_binary(choice.binary.hash)) << "the record is there";
    EXPECT_FALSE(idx.stored_binary(store, choice)) << "and refused";
  }
  const fs::path db = dir_ / "labelled.db";
  Store::open(db).put_binary(good);
  Store store = Store::open(db, StoreMode::read_only);
  EXPECT_TRUE(idx.stored_binary(store, choice)) << "the same record, rightly labelled, is used";
}

// What a dispatcher's preload reads: the stored binaries labelled for this
// index's kernel family, template and NVRTC, for an architecture its sm_90
// device runs (sm_90a too, not sm_80 or sm_100).
TEST_F(DispatchIndexTest, RunnableBinariesAreThoseTheIndexCouldLoad) {
  DispatchIndex idx = index();
  BinaryRecord good;
  good.kernel_name = space_->kernel_name();
  good.template_hash = space_->template_hash();
  good.nvrtc_version = toolchain_.nvrtc_version;
  good.arch = "sm_90";
  good.cubin = {0x7f, 'E', 'L', 'F'};
  struct Labelled {
    const char* key;
    void (*apply)(BinaryRecord&);
  };
  const Labelled records[] = {
      {"a0000000000000000000000000000000", [](BinaryRecord&) {}},
      {"b0000000000000000000000000000000", [](BinaryRecord& r) { r.arch = "sm_90a"; }},
      {"c0000000000000000000000000000000", [](BinaryRecord& r) { r.arch = "sm_80"; }},
      {"d0000000000000000000000000000000", [](BinaryRecord& r) { r.nvrtc_version = "0.0"; }},
      {"e0000000000000000000000000000000", [](BinaryRecord& r) { r.template_hash = "0123456789abcdef0123456789abcdef"; }},
      {"f0000000000000000000000000000000", [](BinaryRecord& r) { r.kernel_name = "other"; }},
      {"f1000000000000000000000000000000", [](BinaryRecord& r) { r.cubin.clear(); }},
      {"f2000000000000000000000000000000", [](BinaryRecord& r) { r.arch = "sm_100"; }},
  };
  {
    Store store = Store::open(db_);
    for (const Labelled& l : records) {
      BinaryRecord record = good;
      record.key = l.key;
      l.apply(record);
      store.put_binary(record);
    }
  }
  Store store = Store::open(db_, StoreMode::read_only);
  // An empty cubin is stored as a packed blob that is not empty: only reading
  // it says so (the preload skips it then, as stored_binary refuses it).
  EXPECT_EQ(idx.runnable_binaries(store),
            (std::vector<std::string>{"a0000000000000000000000000000000", "b0000000000000000000000000000000",
                                      "f1000000000000000000000000000000"}));
}

TEST_F(DispatchIndexTest, OtherKernelFamiliesAreNotCounted) {
  tune("N=1000,M=16", vector_config, 2.0, h200, KernelInfo{"other", "t", "d"});
  DispatchIndex idx = index();
  EXPECT_EQ(idx.entries(), 0u);
  EXPECT_EQ(idx.ignored(), 0u);
}

// ---- the selector: fewest changes, neighbours, fallbacks, ranking ----------------

TEST_F(DispatchIndexTest, FewestChangesFirstThenTheNearer) {
  // Both need VECTOR off at M=7 (one change each): the nearer is taken.
  tune("N=1000,M=16", vector_config, 1.0);
  tune("N=100,M=16", "ALGORITHM=tiled,THREADS=128,ITEMS=2,VECTOR=true", 1.0);
  Choice near = index().choose(space_->parse_shape("N=900,M=7"));
  EXPECT_EQ(near.reason, ChoiceReason::repaired);
  EXPECT_EQ(*near.source_shape, space_->parse_shape("N=1000,M=16"));
  Choice far = index().choose(space_->parse_shape("N=120,M=7"));
  EXPECT_EQ(*far.source_shape, space_->parse_shape("N=100,M=16"));
  // A config valid unchanged beats a nearer one that needs a change.
  tune("N=20,M=3", other_config, 1.0);
  Choice unchanged = index().choose(space_->parse_shape("N=120,M=7"));
  EXPECT_EQ(unchanged.reason, ChoiceReason::nearest);
  EXPECT_EQ(unchanged.config, space_->parse_config(other_config));
}

TEST_F(DispatchIndexTest, OnlyTheNearestNeighboursAreConsidered) {
  tune("N=1000,M=16", vector_config, 1.0);  // one change at M=7
  tune("N=10,M=3", other_config, 1.0);      // none, but far
  Store store = Store::open(db_, StoreMode::read_only);
  SelectorOptions one;
  one.neighbors = 1;
  DispatchIndex idx = DispatchIndex::build(store, *space_, DispatchTarget{h200, toolchain_}, one);
  EXPECT_EQ(idx.choose(space_->parse_shape("N=1000,M=7")).reason, ChoiceReason::repaired);
  EXPECT_EQ(index().choose(space_->parse_shape("N=1000,M=7")).reason, ChoiceReason::nearest);
}

TEST_F(DispatchIndexTest, RankedCanLookAtMoreNeighboursThanTheSelector) {
  // What a race draws its candidates from: with one neighbour the selector
  // ranks only the nearest entry's config; asked for two, ranked() also
  // repairs the farther one, and puts the one that needs no change first.
  tune("N=1000,M=16", vector_config, 1.0);  // one change at M=7
  tune("N=10,M=3", other_config, 1.0);      // none, but far
  Store store = Store::open(db_, StoreMode::read_only);
  SelectorOptions one;
  one.neighbors = 1;
  DispatchIndex idx = DispatchIndex::build(store, *space_, DispatchTarget{h200, toolchain_}, one);
  const Shape shape = space_->parse_shape("N=1000,M=7");
  std::vector<Choice> narrow = idx.ranked(shape, 5);
  ASSERT_GE(narrow.size(), 2u);
  EXPECT_EQ(narrow[0].reason, ChoiceReason::repaired);
  EXPECT_NE(narrow[1].reason, ChoiceReason::nearest) << "only one neighbour is looked at";
  std::vector<Choice> wide = idx.ranked(shape, 5, 2);
  ASSERT_GE(wide.size(), 2u);
  EXPECT_EQ(wide[0].reason, ChoiceReason::nearest);
  EXPECT_EQ(wide[0].config, space_->parse_config(other_config));
  EXPECT_EQ(wide[1].reason, ChoiceReason::repaired);
  EXPECT_EQ(wide[1].tuned_config_text, space_->config_string(space_->parse_config(vector_config)));
  // The selector's own choice is unchanged by the wider call.
  EXPECT_EQ(idx.choose(shape).config, narrow[0].config);
}

TEST_F(DispatchIndexTest, ThisDevicesRepairedConfigBeatsAnotherDevicesValidOne) {
  tune("N=1000,M=16", vector_config, 1.0, h200);
  tune("N=1000,M=7", other_config, 1.0, a100);  // the very shape, valid, but another device
  Choice choice = index().choose(space_->parse_shape("N=1000,M=7"));
  EXPECT_EQ(choice.reason, ChoiceReason::repaired);
  EXPECT_EQ(choice.source_device, "NVIDIA H200");
}

class DispatchIndexFallbackTest : public DispatchIndexTest {
 protected:
  void SetUp() override {
    DispatchIndexTest::SetUp();
    space_ = std::make_unique<SearchSpace>(SearchSpace::parse(
        space_->text() +
            "fallbacks:\n"
            "  - {ALGORITHM: tiled, THREADS: 64, ITEMS: 4, VECTOR: true}\n"
            "  - {ALGORITHM: plain, THREADS: 32, ITEMS: 2, VECTOR: false}\n",
        "small_fallbacks.yaml", spaces_dir));
  }
};

TEST_F(DispatchIndexFallbackTest, TheFirstValidFallbackWhenNothingIsTuned) {
  Choice first = index().choose(space_->parse_shape("N=100,M=8"));
  EXPECT_EQ(first.reason, ChoiceReason::fallback);
  EXPECT_EQ(first.fallback_index, 0u);
  EXPECT_EQ(first.config_text, "ALGORITHM=tiled,THREADS=64,ITEMS=4,VECTOR=true");
  EXPECT_NE(first.explanation.find("fallback #1 of 2; no tuned shape"), std::string::npos) << first.explanation;
  EXPECT_EQ(first.binary, key_for(first.config_text, "N=100,M=8", "sm_90"));

  Choice second = index().choose(space_->parse_shape("N=100,M=7"));  // VECTOR cannot run M=7
  EXPECT_EQ(second.reason, ChoiceReason::fallback);
  EXPECT_EQ(second.fallback_index, 1u);
  EXPECT_EQ(second.config_text, "ALGORITHM=plain,THREADS=32,ITEMS=2,VECTOR=false");
  EXPECT_NE(second.explanation.find("the 1 before it cannot run here"), std::string::npos) << second.explanation;
}

TEST_F(DispatchIndexFallbackTest, FallbacksComeAfterWhatIsTunedAndBeforeTheDefault) {
  tune("N=1000,M=16", plain_config, 1.0);
  EXPECT_EQ(index().choose(space_->parse_shape("N=100,M=8")).reason, ChoiceReason::nearest);
  // A repair that the limits forbid: the fallback, not the default.
  tune("N=1000,M=16", vector_config, 0.5);  // now the best there
  SelectorOptions no_repair;
  no_repair.repair.max_changes = 0;
  Store store = Store::open(db_, StoreMode::read_only);
  DispatchIndex idx = DispatchIndex::build(store, *space_, DispatchTarget{h200, toolchain_}, no_repair);
  Choice choice = idx.choose(space_->parse_shape("N=100,M=7"));
  EXPECT_EQ(choice.reason, ChoiceReason::fallback);
  EXPECT_EQ(choice.fallback_index, 1u);
  EXPECT_NE(choice.explanation.find("no tuned config could be repaired here"), std::string::npos)
      << choice.explanation;
}

TEST_F(DispatchIndexFallbackTest, RankedListsEveryValidCandidateOnceBestFirst) {
  tune("N=1000,M=16", vector_config, 1.0);
  tune("N=64,M=3", plain_config, 1.0);
  const Shape shape = space_->parse_shape("N=1000,M=8");
  std::vector<Choice> ranked = index().ranked(shape, 10);
  ASSERT_GE(ranked.size(), 4u);
  EXPECT_EQ(ranked[0].config, index().choose(shape).config);
  EXPECT_EQ(ranked[0].reason, ChoiceReason::nearest);  // vector_config, valid at M=8
  EXPECT_EQ(ranked[0].config, space_->parse_config(vector_config));
  EXPECT_EQ(ranked[1].reason, ChoiceReason::nearest);  // the farther tuned entry
  EXPECT_EQ(ranked[1].config, space_->parse_config(plain_config));
  // fallbacks[0] is vector_config again: listed once, so fallbacks[1] is next.
  EXPECT_EQ(ranked[2].reason, ChoiceReason::fallback);
  EXPECT_EQ(ranked[2].fallback_index, 1u);
  EXPECT_EQ(ranked[3].reason, ChoiceReason::default_config);
  for (std::size_t i = 0; i < ranked.size(); ++i) {
    SCOPED_TRACE(ranked[i].config_text);
    EXPECT_TRUE(space_->check(ranked[i].config, shape));
    EXPECT_EQ(ranked[i].binary, key_for(ranked[i].config_text, "N=1000,M=8", "sm_90"));
    for (std::size_t j = 0; j < i; ++j) EXPECT_NE(ranked[i].config, ranked[j].config);
  }
  EXPECT_EQ(index().ranked(shape, 2).size(), 2u);
  EXPECT_TRUE(index().ranked(shape, 0).empty());
}

// The stand-in's lookup: ranked_unfinished() is ranked() in the same order
// with no text or binary key until finish() gives each what ranked() did.
TEST_F(DispatchIndexFallbackTest, UnfinishedRankingIsTheRankingUntilFinished) {
  tune("N=1000,M=16", vector_config, 1.0);
  tune("N=64,M=3", plain_config, 1.0);
  const DispatchIndex idx = index();
  for (const char* text : {"N=1000,M=8", "N=1000,M=16", "N=7,M=1"}) {
    SCOPED_TRACE(text);
    const Shape shape = space_->parse_shape(text);
    const std::vector<Choice> ranked = idx.ranked(shape, 8);
    std::vector<Choice> unfinished = idx.ranked_unfinished(shape, 8);
    ASSERT_EQ(unfinished.size(), ranked.size());
    for (std::size_t i = 0; i < ranked.size(); ++i) {
      SCOPED_TRACE(ranked[i].config_text);
      EXPECT_EQ(unfinished[i].config, ranked[i].config);
      EXPECT_EQ(unfinished[i].reason, ranked[i].reason);
      EXPECT_EQ(unfinished[i].explanation, ranked[i].explanation);
      EXPECT_TRUE(unfinished[i].config_text.empty());
      EXPECT_TRUE(unfinished[i].binary.hash.empty());
      idx.finish(unfinished[i], shape);
      EXPECT_EQ(unfinished[i].config_text, ranked[i].config_text);
      EXPECT_EQ(unfinished[i].binary, ranked[i].binary);
      EXPECT_EQ(unfinished[i].arch, ranked[i].arch);
      EXPECT_EQ(unfinished[i].binary, key_for(ranked[i].config_text, text, "sm_90"));
    }
  }
}

TEST_F(DispatchIndexTest, ChooseIsTheHeadOfTheFullRankingAtEveryShape) {
  // choose() repairs the nearest entries only as far as they could still
  // win; what it returns must be ranked()'s head down to the explanation,
  // at shapes where the nearest entry is valid, where it needs changes, and
  // where a farther one needs fewer.
  tune("N=1000,M=16", vector_config, 1.0);
  tune("N=100,M=16", "ALGORITHM=tiled,THREADS=128,ITEMS=2,VECTOR=true", 2.0);
  tune("N=20,M=3", other_config, 1.0);
  tune("N=5000,M=8", "ALGORITHM=unrolled,THREADS=128,ITEMS=4,VECTOR=true", 3.0);
  tune("N=30,M=5", plain_config, 1.5);
  tune("N=2000,M=12", "ALGORITHM=plain,THREADS=32,ITEMS=4,VECTOR=true", 2.5);
  DispatchIndex idx = index();
  std::size_t repaired = 0, passed_over = 0, compared = 0;
  for (std::int64_t n : {1, 7, 20, 99, 100, 120, 300, 900, 1000, 1500, 3000, 5000, 200000})
    for (std::int64_t m : {1, 3, 4, 5, 7, 8, 16}) {
      const std::string text = fmt::format("N={},M={}", n, m);
      SCOPED_TRACE(text);
      const Shape shape = space_->parse_shape(text);
      const Choice chosen = idx.choose(shape);
      const std::vector<Choice> ranked = idx.ranked(shape, 8);
      ASSERT_FALSE(ranked.empty());
      const Choice& head = ranked.front();
      EXPECT_EQ(chosen.reason, head.reason);
      EXPECT_EQ(chosen.config_text, head.config_text);
      EXPECT_EQ(chosen.binary, head.binary);
      EXPECT_EQ(chosen.arch, head.arch);
      EXPECT_EQ(chosen.repair, head.repair);
      EXPECT_EQ(chosen.explanation, head.explanation);
      EXPECT_EQ(chosen.source_shape, head.source_shape);
      repaired += chosen.reason == ChoiceReason::repaired;
      passed_over += chosen.explanation.find("closer candidate(s)") != std::string::npos;
      ++compared;
    }
  EXPECT_EQ(compared, 91u);
  EXPECT_GT(repaired, 0u) << "no shape needed its choice repaired: the bound was never tried";
  EXPECT_GT(passed_over, 0u) << "no shape chose past a nearer entry: the bound was never tried";
}

TEST_F(DispatchIndexTest, RankedOfAShapeNothingCanRunIsOneNone) {
  std::string text = space_->text();
  const std::string anchor = "constraints:\n";
  text.insert(text.rfind(anchor) + anchor.size(), "  - N <= 100000\n");
  space_ = std::make_unique<SearchSpace>(SearchSpace::parse(text, "small_bounded.yaml", spaces_dir));
  std::vector<Choice> ranked = index().ranked(space_->parse_shape("N=200000,M=4"), 5);
  ASSERT_EQ(ranked.size(), 1u);
  EXPECT_EQ(ranked[0].reason, ChoiceReason::none);
}

// grid = ceil(N / (THREADS * ITEMS)): plain_config launches ceil(N / 512) blocks.
TEST_F(DispatchIndexTest, FillingVariantsGiveIdleSmsBlocksOneParameterAway) {
  tune("N=1000000,M=16", plain_config, 2.0);
  DispatchIndex idx = index();
  const Shape shape = space_->parse_shape("N=20000,M=8");  // 40 blocks on 132 SMs
  const Choice choice = idx.choose(shape);
  ASSERT_EQ(choice.config_text, plain_config);
  const std::vector<Choice> filled = idx.filling_variants(choice, shape, 8);
  // THREADS 64 (157 blocks) fills the device with the least splitting, then
  // THREADS 32 (313); THREADS 128 (79) falls short.  ITEMS 1 breaks the
  // unrolled constraint, ITEMS 4 and 8 the 512-item block, and ALGORITHM or
  // VECTOR do not change the grid.
  ASSERT_EQ(filled.size(), 3u);
  EXPECT_EQ(filled[0].config_text, "ALGORITHM=unrolled,THREADS=64,ITEMS=2,VECTOR=false");
  EXPECT_EQ(filled[1].config_text, "ALGORITHM=unrolled,THREADS=32,ITEMS=2,VECTOR=false");
  EXPECT_EQ(filled[2].config_text, "ALGORITHM=unrolled,THREADS=128,ITEMS=2,VECTOR=false");
  for (const Choice& c : filled) {
    EXPECT_EQ(c.reason, ChoiceReason::filled);
    ASSERT_EQ(c.changes.size(), 1u);
    EXPECT_EQ(space_->parameters()[c.changes[0].parameter].name, "THREADS");
    EXPECT_EQ(c.source_shape, choice.source_shape);
    EXPECT_TRUE(c.binary.hash != choice.binary.hash);
  }
  EXPECT_EQ(filled[0].repair, "THREADS 256 -> 64 (157 blocks instead of 40 on 132 SMs)");
  EXPECT_NE(filled[0].explanation.find("filled: the selector's choice with THREADS 256 -> 64"), std::string::npos);
  EXPECT_EQ(to_string(filled[0].reason), "filled");
  EXPECT_EQ(idx.filling_variants(choice, shape, 1).size(), 1u);
  EXPECT_TRUE(idx.filling_variants(choice, shape, 0).empty());
}

TEST_F(DispatchIndexTest, NoFillingVariantsWhereTheChoiceFillsTheDeviceOrItsSmsAreUnknown) {
  tune("N=1000000,M=16", plain_config, 2.0);
  DispatchIndex idx = index();
  const Shape large = space_->parse_shape("N=100000,M=16");  // 196 blocks
  EXPECT_TRUE(idx.filling_variants(idx.choose(large), large, 4).empty());
  DeviceInfo unknown = h200;
  unknown.sm_count = 0;
  DispatchIndex blind = index(unknown);
  const Shape small = space_->parse_shape("N=20000,M=8");
  EXPECT_TRUE(blind.filling_variants(blind.choose(small), small, 4).empty());
  // Already at the smallest block: nothing one parameter away launches more.
  const Shape tiny = space_->parse_shape("N=30,M=8");
  EXPECT_TRUE(idx.filling_variants(idx.choose(tiny), tiny, 4).empty());
}

}  // namespace
}  // namespace mlatune
