// The sweep's summary arithmetic (where the time went: GPU worker, waiting for
// compilation, setup, NVRTC; the rates each would allow alone) and the checks
// run_sweep makes before it starts; a replayed sweep (no GPU) end to end:
// a time budget that stops it (on a clock the test controls), auto's choice
// per shape and the warm start from shapes tuned before.
#include "tuner/sweep.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <random>

#include "cache/store.h"
#include "core/error.h"
#include "tuner/measurement_source.h"
#include "tuner/replay.h"
#include "tuner/strategies/registry.h"
#include "tuner/strategies/warm_start.h"
#include "tuner/time_budget.h"
#include "tests/h200_sweeps_where.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

ShapeReport shape_with(std::size_t evaluated, int cut, double gpu_s, double wait_s, double setup_s,
                       double nvrtc_s) {
  ShapeReport s;
  s.results.resize(evaluated);
  s.cut = cut;
  s.gpu_s = gpu_s;
  s.compile_wait_s = wait_s;
  s.setup_s = setup_s;
  s.nvrtc_s = nvrtc_s;
  return s;
}

TEST(SweepTotals, PartsAddUpToTheWallAndRatesFollow) {
  SweepReport report;
  report.shapes.push_back(shape_with(100, 30, 6.0, 1.0, 0.5, 40.0));
  report.shapes.push_back(shape_with(50, 10, 3.0, 0.5, 0.5, 24.0));
  report.wall_s = 15.0;
  report.compile_threads = 16;

  SweepTotals t = sweep_totals(report);
  EXPECT_EQ(t.evaluated, 150u);
  EXPECT_EQ(t.cut, 40u);
  EXPECT_DOUBLE_EQ(t.wall_s, 15.0);
  EXPECT_DOUBLE_EQ(t.gpu_s, 9.0);
  EXPECT_DOUBLE_EQ(t.compile_wait_s, 1.5);
  EXPECT_DOUBLE_EQ(t.setup_s, 1.0);
  EXPECT_DOUBLE_EQ(t.other_s, 3.5);
  EXPECT_DOUBLE_EQ(t.gpu_s + t.compile_wait_s + t.setup_s + t.other_s, t.wall_s);
  EXPECT_DOUBLE_EQ(t.nvrtc_s, 64.0);
  EXPECT_EQ(t.compile_threads, 16u);
  ASSERT_TRUE(t.configs_per_s);
  EXPECT_DOUBLE_EQ(*t.configs_per_s, 10.0);
  ASSERT_TRUE(t.gpu_limit_configs_per_s);
  EXPECT_DOUBLE_EQ(*t.gpu_limit_configs_per_s, 150.0 / 9.0);
  // 64 s of NVRTC over 16 threads is 4 s of wall at best: 37.5 configs/s.
  ASSERT_TRUE(t.compile_limit_configs_per_s);
  EXPECT_DOUBLE_EQ(*t.compile_limit_configs_per_s, 37.5);
  ASSERT_TRUE(t.gpu_busy_fraction);
  EXPECT_DOUBLE_EQ(*t.gpu_busy_fraction, 0.6);
}

TEST(SweepTotals, SeveralWorkersShareTheirTimeAndEachHasARate) {
  SweepReport report;
  report.shapes.push_back(shape_with(90, 0, 14.0, 2.0, 1.0, 30.0));
  report.wall_s = 10.0;
  report.workers = {{"GPU 0", 50, 8.0, 0}, {"GPU 1", 40, 6.0, 1}};
  SweepTotals t = sweep_totals(report);
  EXPECT_EQ(t.workers, 2u);
  // Worker time: 2 x 10 s, of which 14 busy, 2 waiting, 1 setting up.
  EXPECT_DOUBLE_EQ(t.other_s, 3.0);
  EXPECT_DOUBLE_EQ(t.gpu_s + t.compile_wait_s + t.setup_s + t.other_s, 2 * t.wall_s);
  ASSERT_TRUE(t.gpu_busy_fraction);
  EXPECT_DOUBLE_EQ(*t.gpu_busy_fraction, 0.7);
  EXPECT_DOUBLE_EQ(*t.configs_per_s, 9.0);
  ASSERT_EQ(t.per_worker.size(), 2u);
  EXPECT_EQ(t.per_worker[1].load.label, "GPU 1");
  EXPECT_DOUBLE_EQ(*t.per_worker[0].configs_per_s, 5.0);
  EXPECT_DOUBLE_EQ(*t.per_worker[0].busy_fraction, 0.8);
  EXPECT_DOUBLE_EQ(*t.per_worker[1].busy_fraction, 0.6);
}

TEST(SweepTotals, NoGpuOrNoCompilationGivesNoLimit) {
  // A replayed sweep: nothing compiled, nothing ran on a GPU.
  SweepReport report;
  report.shapes.push_back(shape_with(20, 0, 0.0, 0.0, 0.0, 0.0));
  report.wall_s = 0.5;
  SweepTotals t = sweep_totals(report);
  EXPECT_EQ(t.evaluated, 20u);
  ASSERT_TRUE(t.configs_per_s);
  EXPECT_DOUBLE_EQ(*t.configs_per_s, 40.0);
  EXPECT_FALSE(t.gpu_limit_configs_per_s);
  EXPECT_FALSE(t.compile_limit_configs_per_s);
  EXPECT_DOUBLE_EQ(t.other_s, 0.5);

  // NVRTC time without a thread count (no pool) gives no compile limit.
  report.shapes[0].nvrtc_s = 3.0;
  EXPECT_FALSE(sweep_totals(report).compile_limit_configs_per_s);
}

TEST(SweepTotals, EmptySweepHasNoRates) {
  SweepTotals t = sweep_totals(SweepReport{});
  EXPECT_EQ(t.evaluated, 0u);
  EXPECT_FALSE(t.configs_per_s);
  EXPECT_FALSE(t.gpu_limit_configs_per_s);
  EXPECT_FALSE(t.compile_limit_configs_per_s);
  EXPECT_FALSE(t.gpu_busy_fraction);
  EXPECT_DOUBLE_EQ(t.other_s, 0.0);
}

TEST(SweepTotals, OtherIsNeverNegative) {
  // Separately taken clocks may sum past the wall by a hair.
  SweepReport report;
  report.shapes.push_back(shape_with(10, 0, 2.0, 0.01, 0.0, 0.0));
  report.wall_s = 2.0;
  EXPECT_DOUBLE_EQ(sweep_totals(report).other_s, 0.0);
}

class SweepReplay : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("mlatune_sweep_test_" + std::to_string(std::random_device{}()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  fs::path dir_;
  const fs::path space_file_ = fs::path(MLATUNE_SOURCE_DIR) / "search_spaces" / "fused_mla_attention.yaml";
};

TEST_F(SweepReplay, CutoffFactorMustBeZeroOrAboveOne) {
  // Exact configs only: the recorded sweeps measured no shape-bucketed config.
  SearchSpace space = SearchSpace::load(space_file_).restrict({kH200SweepsWhere});
  ReplayData data = ReplayData::load(fs::path(MLATUNE_TEST_DATA_DIR) / "data" / "h200_sweeps.csv", space);
  SweepOptions options;
  options.shapes = {space.parse_shape("B=2,T=32,H=4,D=16,R=24")};
  options.replay = &data;
  options.replay_source = "h200_sweeps.csv";
  options.max_evals = 5;
  DeviceInfo device;
  device.name = "replay";
  device.arch = "sm_90";
  for (double bad : {0.5, 1.0, -3.0}) {
    options.cutoff_factor = bad;
    EXPECT_THROW(run_sweep(space, space_file_, dir_ / "bad.db", nullptr, device, options), InputError) << bad;
  }
  EXPECT_FALSE(fs::exists(dir_ / "bad.db"));  // refused before anything was written

  options.cutoff_factor = 0;
  SweepReport report = run_sweep(space, space_file_, dir_ / "ok.db", nullptr, device, options);
  SweepTotals totals = sweep_totals(report);
  EXPECT_EQ(totals.evaluated, 5u);
  EXPECT_EQ(totals.cut, 0u);  // replayed times are not timed: nothing to cut
  EXPECT_DOUBLE_EQ(totals.gpu_s, 0.0);
  EXPECT_DOUBLE_EQ(totals.nvrtc_s, 0.0);
  EXPECT_EQ(totals.compile_threads, 0u);
  EXPECT_FALSE(totals.compile_limit_configs_per_s);
  EXPECT_GT(totals.wall_s, 0.0);
}

/// A replayed source whose every measurement takes one second of a clock the
/// test controls.
class OneSecondEach final : public MeasurementSource {
 public:
  OneSecondEach(const ReplayData& data, std::chrono::steady_clock::time_point& now)
      : inner_(replayed_measurements(data, "h200_sweeps.csv")), now_(now) {}
  unsigned compile_threads() const override { return inner_->compile_threads(); }
  std::size_t lookahead() const override { return inner_->lookahead(); }
  std::optional<std::string> origin() const override { return inner_->origin(); }
  void prepare(const Config& config, const Shape& shape) override { inner_->prepare(config, shape); }
  void begin_shape(const Shape& shape, const Cutoff& start, std::mt19937_64& rng, ShapeReport& report) override {
    starts.push_back(start);
    inner_->begin_shape(shape, start, rng, report);
  }
  CandidateReport measure(const Config& config, const Shape& shape, ShapeReport& report) override {
    now_ += std::chrono::seconds(1);
    CandidateReport c = inner_->measure(config, shape, report);
    // As the GPU's evaluator would say it (tuner/evaluator.cpp).
    if (c.timing && method) c.timing->method = *method;
    return c;
  }
  std::vector<Cutoff> starts;         // what each begin_shape() was told
  std::optional<std::string> method;  // set: every time's method text
  std::vector<std::optional<TimingStats>> retime(const std::vector<std::string>& configs, int rounds,
                                                 ShapeReport& report) override {
    ++retime_calls;
    return inner_->retime(configs, rounds, report);
  }
  int retime_calls = 0;  // the sweep asked for the fastest to be timed again
  void add_totals(SweepReport& report) const override { inner_->add_totals(report); }

 private:
  std::unique_ptr<MeasurementSource> inner_;
  std::chrono::steady_clock::time_point& now_;
};

class SweepReplayed : public SweepReplay {
 protected:
  void SetUp() override {
    SweepReplay::SetUp();
    full_ = std::make_unique<SearchSpace>(SearchSpace::load(space_file_));
    data_ = std::make_unique<ReplayData>(
        ReplayData::load(fs::path(MLATUNE_TEST_DATA_DIR) / "data" / "h200_sweeps.csv", *full_));
    space_ = std::make_unique<SearchSpace>(full_->restrict(data_->restriction()));
    device_.name = "replay";
    device_.arch = "sm_90";
  }
  SweepReport sweep(const SweepOptions& options, const std::string& db, MeasurementSource& source) {
    return run_sweep(*space_, space_file_, dir_ / db, source, device_, options);
  }
  std::unique_ptr<SearchSpace> full_, space_;
  std::unique_ptr<ReplayData> data_;
  DeviceInfo device_;
  const char* s0_ = "B=2,T=32,H=4,D=16,R=24";
  const char* s1_ = "B=4,T=256,H=8,D=32,R=64";
};

TEST_F(SweepReplayed, ATimeBudgetStopsProposingAtEachShape) {
  std::chrono::steady_clock::time_point now{};
  OneSecondEach source(*data_, now);
  SweepOptions options;
  options.shapes = {space_->parse_shape(s0_), space_->parse_shape(s1_)};
  options.time_budget = parse_time_budget("25s");
  options.clock = [&now] { return now; };
  options.seed = 3;
  const SweepReport report = sweep(options, "timed.db", source);
  ASSERT_EQ(report.shapes.size(), 2u);
  for (const ShapeReport& s : report.shapes) {
    // One candidate is proposed at 0 s, 1 s, ..., 24 s: 25 of them; at 25 s
    // the budget is spent.  A time budget alone makes auto search.
    EXPECT_EQ(s.results.size(), 25u) << s.shape;
    EXPECT_TRUE(s.time_budget_spent) << s.shape;
    EXPECT_EQ(s.strategy, "bayes") << s.shape;
    EXPECT_DOUBLE_EQ(s.wall_s, 25.0) << s.shape;
  }
  // Without the budget the evaluations are the limit, and nothing says time.
  options.time_budget.reset();
  options.max_evals = 30;
  const SweepReport counted = sweep(options, "counted.db", source);
  for (const ShapeReport& s : counted.shapes) {
    EXPECT_EQ(s.results.size(), 30u) << s.shape;
    EXPECT_FALSE(s.time_budget_spent) << s.shape;
  }
}

TEST_F(SweepReplayed, AutoSearchesWithABudgetAndWarmStartsFromShapesTunedBefore) {
  std::chrono::steady_clock::time_point now{};
  OneSecondEach source(*data_, now);
  SweepOptions options;
  options.shapes = {space_->parse_shape(s0_), space_->parse_shape(s1_)};
  options.max_evals = 40;
  options.seed = 7;
  const SweepReport report = sweep(options, "warm.db", source);
  ASSERT_EQ(report.shapes.size(), 2u);
  const ShapeReport& first = report.shapes[0];
  const ShapeReport& second = report.shapes[1];
  EXPECT_EQ(first.strategy, "bayes");
  EXPECT_EQ(first.warm_start, 0u);  // nothing tuned before it
  // S1 starts from S0's best (the database's best entry after S0): the
  // default config first, then that config, repaired where S1 needs it.
  ASSERT_TRUE(first.best_config);
  EXPECT_EQ(second.warm_start, 1u);
  ASSERT_GE(second.results.size(), 2u);
  const std::vector<Config> hint =
      strategies::warm_start(*space_, space_->parse_shape(s1_), {{s0_, *first.best_config, *first.best_us}}).configs;
  ASSERT_EQ(hint.size(), 1u);
  EXPECT_EQ(second.results[1].config, space_->config_string(hint[0]));
  // Within 40 evaluations (1-3 % of the space) both come within 3 % of the
  // recorded optimum.
  for (const ShapeReport& s : report.shapes) {
    ASSERT_TRUE(s.best_us) << s.shape;
    EXPECT_LE(*s.best_us, 1.03 * data_->optimum(space_->parse_shape(s.shape))) << s.shape;
  }

  // --no-warm-start: the same sweep without the hint.
  options.warm_start = false;
  const SweepReport cold = sweep(options, "cold.db", source);
  EXPECT_EQ(cold.shapes[1].warm_start, 0u);

  // Without a budget, auto measures everything: brute force.
  options.max_evals.reset();
  options.shapes = {space_->parse_shape(s0_)};
  const SweepReport every = sweep(options, "every.db", source);
  EXPECT_EQ(every.shapes[0].strategy, "brute_force");
  EXPECT_EQ(every.shapes[0].results.size(), space_->count(space_->parse_shape(s0_)));
}


// A brute-force sweep of `shapes` (seed 5) that asks to stop once
// `measured`, which its progress keeps up to date, reaches `stop_after`.
SweepOptions stopping_sweep(std::vector<Shape> shapes, std::uint64_t stop_after, std::uint64_t& measured) {
  SweepOptions options;
  options.shapes = std::move(shapes);
  options.strategy = parse_strategy_kind("brute_force");
  options.seed = 5;
  options.progress = [&measured](const SweepProgress& p) { measured = p.done; };
  options.stop_requested = [&measured, stop_after] { return measured >= stop_after; };
  return options;
}

// SweepOptions::stop_requested (what `tune` does on SIGINT or SIGTERM): the
// sweep stops before the next measurement, records the run as interrupted
// with what it measured, starts no further shape and does not retime; the
// same sweep again goes on from there and ends with every config measured
// exactly once.
TEST_F(SweepReplayed, AStopRequestEndsTheSweepBetweenCandidatesAndTheSameSweepGoesOn) {
  std::chrono::steady_clock::time_point now{};
  OneSecondEach source(*data_, now);
  constexpr std::uint64_t kBefore = 37;
  std::uint64_t measured = 0;
  SweepOptions options = stopping_sweep({space_->parse_shape(s0_), space_->parse_shape(s1_)}, kBefore, measured);
  const fs::path db = dir_ / "stopped.db";
  const SweepReport stopped = run_sweep(*space_, space_file_, db, source, device_, options);
  EXPECT_TRUE(stopped.interrupted);
  ASSERT_EQ(stopped.shapes.size(), 1u) << "a shape after the interrupted one was started";
  const ShapeReport& first = stopped.shapes[0];
  EXPECT_TRUE(first.interrupted);
  EXPECT_EQ(first.results.size(), kBefore);
  EXPECT_EQ(source.retime_calls, 0);
  {
    Store store = Store::open(db, StoreMode::read_only);
    EXPECT_EQ(store.measurement_count(), static_cast<std::int64_t>(kBefore));
    const std::vector<RunRecord> runs = store.runs();
    ASSERT_EQ(runs.size(), 1u);
    EXPECT_EQ(runs[0].status, "interrupted");
    EXPECT_FALSE(runs[0].finished_at.empty());
  }

  // Stopped in its last shape: the sweep still says so.
  SweepOptions last = options;
  last.shapes = {space_->parse_shape(s1_)};
  measured = 0;
  const SweepReport stopped_last = run_sweep(*space_, space_file_, dir_ / "last.db", source, device_, last);
  EXPECT_TRUE(stopped_last.interrupted);
  ASSERT_EQ(stopped_last.shapes.size(), 1u);
  EXPECT_EQ(stopped_last.shapes[0].results.size(), kBefore);
  EXPECT_EQ(Store::open(dir_ / "last.db", StoreMode::read_only).runs().at(0).status, "interrupted");

  // A stop asked before the sweep starts: nothing is measured.
  options.stop_requested = [] { return true; };
  const SweepReport at_once = run_sweep(*space_, space_file_, dir_ / "at_once.db", source, device_, options);
  EXPECT_TRUE(at_once.interrupted);
  EXPECT_TRUE(at_once.shapes.empty());

  // The same sweep again, not stopped: it goes on where the first stopped.
  options.stop_requested = nullptr;
  const SweepReport resumed = run_sweep(*space_, space_file_, db, source, device_, options);
  EXPECT_FALSE(resumed.interrupted);
  ASSERT_EQ(resumed.shapes.size(), 2u);
  const std::uint64_t s0_valid = space_->count(space_->parse_shape(s0_));
  EXPECT_EQ(resumed.shapes[0].already_measured, kBefore);
  EXPECT_EQ(resumed.shapes[0].results.size(), s0_valid - kBefore);
  EXPECT_FALSE(resumed.shapes[0].interrupted);
  EXPECT_EQ(source.retime_calls, 2);  // once a shape
  Store store = Store::open(db, StoreMode::read_only);
  EXPECT_EQ(store.measurement_count(),
            static_cast<std::int64_t>(s0_valid + space_->count(space_->parse_shape(s1_))));
  const std::vector<RunRecord> runs = store.runs();
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[1].status, "finished");
}

// A resumed sweep's early cut starts from the best its database holds at
// the shape, timed with the same cache method; a fresh one, or one with
// another cache method, starts from nothing (its first result).
TEST_F(SweepReplayed, AResumedSweepCutsFromTheDatabasesBestWithTheSameCacheMethod) {
  std::chrono::steady_clock::time_point now{};
  OneSecondEach source(*data_, now);
  source.method = "CUDA events around each launch, L2 flushed before each (120 MiB written); 5 launches";
  ASSERT_EQ(cache_mode_of_method(*source.method), CacheMode::cold);
  constexpr std::uint64_t kBefore = 23;
  std::uint64_t measured = 0;
  SweepOptions options = stopping_sweep({space_->parse_shape(s0_)}, kBefore, measured);
  const auto stop_after_23 = options.stop_requested;
  const fs::path db = dir_ / "resumed.db";
  const SweepReport first = run_sweep(*space_, space_file_, db, source, device_, options);
  ASSERT_TRUE(first.interrupted);
  ASSERT_EQ(source.starts.size(), 1u);
  EXPECT_EQ(source.starts[0].best_us, 0.0);
  EXPECT_EQ(source.starts[0].factor, options.cutoff_factor);
  EXPECT_FALSE(first.shapes.at(0).cutoff_start_us);
  double best = 0;
  for (const CandidateReport& c : first.shapes.at(0).results)
    if (c.outcome == Outcome::ok && (best == 0 || c.timing->median_us < best)) best = c.timing->median_us;
  ASSERT_GT(best, 0.0);

  options.stop_requested = nullptr;
  const SweepReport resumed = run_sweep(*space_, space_file_, db, source, device_, options);
  ASSERT_FALSE(resumed.interrupted);
  ASSERT_EQ(source.starts.size(), 2u);
  EXPECT_DOUBLE_EQ(source.starts[1].best_us, best);
  EXPECT_EQ(source.starts[1].factor, options.cutoff_factor);
  ASSERT_TRUE(resumed.shapes.at(0).cutoff_start_us);
  EXPECT_DOUBLE_EQ(*resumed.shapes[0].cutoff_start_us, best);

  // Hot-cache times are not comparable with cold ones: a hot sweep resumed
  // on cold results starts from nothing.
  const fs::path mixed_db = dir_ / "mixed.db";
  options.stop_requested = stop_after_23;
  measured = 0;
  run_sweep(*space_, space_file_, mixed_db, source, device_, options);
  SweepOptions hot = options;
  hot.stop_requested = nullptr;
  hot.timing.cache = CacheMode::hot;
  run_sweep(*space_, space_file_, mixed_db, source, device_, hot);
  ASSERT_EQ(source.starts.size(), 4u);
  EXPECT_EQ(source.starts[3].best_us, 0.0);

  // Replayed times name no cache method: they never start a cut.
  source.method.reset();
  const fs::path replayed_db = dir_ / "replayed.db";
  measured = 0;
  run_sweep(*space_, space_file_, replayed_db, source, device_, options);
  options.stop_requested = nullptr;
  run_sweep(*space_, space_file_, replayed_db, source, device_, options);
  ASSERT_EQ(source.starts.size(), 6u);
  EXPECT_EQ(source.starts[5].best_us, 0.0);
}

/// A replayed source that, like the GPU source, prepares the next shape's
/// candidates while the current shape's last are measured (or, with
/// `across` off, only after), `lookahead` ahead, each measurement taking one
/// second of the test's clock; it logs every call in order.
class Logged final : public MeasurementSource {
 public:
  Logged(const ReplayData& data, std::chrono::steady_clock::time_point& now, std::size_t lookahead, bool across)
      : inner_(replayed_measurements(data, "h200_sweeps.csv")), now_(now), lookahead_(lookahead), across_(across) {}
  unsigned compile_threads() const override { return 0; }
  std::size_t lookahead() const override { return lookahead_; }
  std::optional<std::string> origin() const override { return inner_->origin(); }
  bool prepares_across_shapes() const override { return across_; }
  void begin_preparing(const Shape& shape) override { log("begin_preparing", shape); }
  void prepare(const Config& config, const Shape& shape) override {
    log("prepare", shape);
    ++in_flight;
    max_in_flight = std::max(max_in_flight, in_flight);
    inner_->prepare(config, shape);
  }
  void begin_shape(const Shape& shape, const Cutoff& start, std::mt19937_64& rng, ShapeReport& report) override {
    log("begin_shape", shape);
    inner_->begin_shape(shape, start, rng, report);
  }
  CandidateReport measure(const Config& config, const Shape& shape, ShapeReport& report) override {
    log("measure", shape);
    --in_flight;
    now_ += std::chrono::seconds(1);
    return inner_->measure(config, shape, report);
  }
  std::vector<std::optional<TimingStats>> retime(const std::vector<std::string>& configs, int rounds,
                                                 ShapeReport& report) override {
    events.push_back("retime");
    return inner_->retime(configs, rounds, report);
  }
  void add_totals(SweepReport& report) const override { inner_->add_totals(report); }

  /// "what shape", in call order; "retime" alone.
  std::vector<std::string> events;
  std::size_t in_flight = 0;      // prepared, not yet measured
  std::size_t max_in_flight = 0;
  std::map<std::string, std::string> names;  // shape text -> its short name in `events`

  /// The index of the first (or last) event equal to `event`; -1 if none.
  long first(const std::string& event) const {
    auto it = std::find(events.begin(), events.end(), event);
    return it == events.end() ? -1 : static_cast<long>(it - events.begin());
  }
  long last(const std::string& event) const {
    auto it = std::find(events.rbegin(), events.rend(), event);
    return it == events.rend() ? -1 : static_cast<long>(events.rend() - it) - 1;
  }

 private:
  void log(const char* what, const Shape& shape) {
    std::string text;
    for (std::int64_t value : shape.values) text += std::to_string(value) + ",";
    auto it = names.find(text);
    if (it == names.end()) it = names.emplace(text, "S" + std::to_string(names.size())).first;
    events.push_back(std::string(what) + " " + it->second);
  }

  std::unique_ptr<MeasurementSource> inner_;
  std::chrono::steady_clock::time_point& now_;
  std::size_t lookahead_;
  bool across_;
};

// The next shape's first candidates are prepared (compiled, on a GPU) while
// this shape's last are measured and its fastest re-timed, never more than
// the lookahead in flight in all, and they are measured only after the next
// shape's begin_shape, which comes after this shape's last measurement and
// its re-timing.  What is measured, and the shapes' walls, are those of the
// same sweep without that overlap.
TEST_F(SweepReplayed, TheNextShapeIsPreparedWhileThisOneDrainsAndMeasuredOnlyAfterIt) {
  std::chrono::steady_clock::time_point now{};
  SweepOptions options;
  options.shapes = {space_->parse_shape(s0_), space_->parse_shape(s1_)};
  options.strategy = parse_strategy_kind("random");  // proposals independent of the results
  options.max_evals = 10;
  options.seed = 4;
  options.clock = [&now] { return now; };
  Logged overlapping(*data_, now, 4, true);
  const SweepReport report = sweep(options, "overlap.db", overlapping);
  Logged apart(*data_, now, 4, false);
  const SweepReport plain = sweep(options, "apart.db", apart);

  const std::vector<std::string>& e = overlapping.events;
  ASSERT_EQ(report.shapes.size(), 2u);
  const long s1_told = overlapping.first("begin_preparing S1");
  const long s1_first_prepare = overlapping.first("prepare S1");
  const long s0_last_measure = overlapping.last("measure S0");
  const long s0_retime = static_cast<long>(std::find(e.begin(), e.end(), "retime") - e.begin());
  const long s1_begin = overlapping.first("begin_shape S1");
  const long s1_first_measure = overlapping.first("measure S1");
  ASSERT_GE(s1_told, 0);
  EXPECT_LT(s1_told, s1_first_prepare);
  EXPECT_LT(s1_first_prepare, s0_last_measure) << "nothing of S1 was prepared while S0 drained";
  EXPECT_LT(s0_last_measure, s0_retime);
  EXPECT_LT(s0_retime, s1_begin);
  EXPECT_LT(s1_begin, s1_first_measure);
  EXPECT_LE(overlapping.max_in_flight, 4u);
  // Without the overlap S1 is prepared only after S0 is done.
  EXPECT_GT(apart.first("prepare S1"), apart.first("begin_shape S1") - 5);
  EXPECT_GT(apart.first("prepare S1"), apart.last("measure S0"));

  // How many were prepared ahead: S1's prepares before its begin_shape,
  // the last of them after S0's last measurement, before its re-timing.
  const auto ahead =
      static_cast<std::uint64_t>(std::count(e.begin() + s1_first_prepare, e.begin() + s1_begin, "prepare S1"));
  EXPECT_EQ(report.shapes[1].prepared_ahead, ahead);
  EXPECT_EQ(report.shapes[0].prepared_ahead, 0u);
  EXPECT_EQ(plain.shapes[1].prepared_ahead, 0u);

  for (std::size_t k = 0; k < 2; ++k) {
    ASSERT_EQ(report.shapes[k].results.size(), 10u);
    for (std::size_t i = 0; i < 10; ++i)
      EXPECT_EQ(report.shapes[k].results[i].config, plain.shapes[k].results[i].config) << k << " " << i;
    EXPECT_EQ(report.shapes[k].best_config, plain.shapes[k].best_config);
    // One second a measurement: each shape's wall is its own ten, though S1
    // was planned during S0.
    EXPECT_DOUBLE_EQ(report.shapes[k].wall_s, 10.0) << k;
  }
}

// A shape given twice is not prepared ahead of itself: the second time, every
// config the first measured is already in the database, and none is
// measured again.
TEST_F(SweepReplayed, TheSameShapeTwiceIsNotPreparedAheadAndNothingIsMeasuredTwice) {
  std::chrono::steady_clock::time_point now{};
  SweepOptions options;
  options.shapes = {space_->parse_shape(s0_), space_->parse_shape(s0_)};
  options.strategy = parse_strategy_kind("random");
  options.max_evals = 10;
  options.seed = 4;
  options.clock = [&now] { return now; };
  Logged source(*data_, now, 4, true);
  const SweepReport report = sweep(options, "twice.db", source);
  ASSERT_EQ(report.shapes.size(), 2u);
  EXPECT_EQ(report.shapes[0].results.size(), 10u);
  EXPECT_EQ(report.shapes[1].results.size(), 0u);
  EXPECT_EQ(report.shapes[1].already_measured, 10u);
  EXPECT_EQ(report.shapes[1].prepared_ahead, 0u);
  EXPECT_EQ(Store::open(dir_ / "twice.db", StoreMode::read_only).measurement_count(), 10);
}

// A stop request while the next shape is prepared ahead drops what was
// prepared: that shape is not reported, nothing of it is recorded, and the
// same sweep again measures it in full.  A time budget runs from when a
// shape prepared ahead becomes current: it proposes what it would have.
TEST_F(SweepReplayed, AShapePreparedAheadIsDroppedOnAStopAndItsTimeBudgetStartsWithIt) {
  std::chrono::steady_clock::time_point now{};
  std::uint64_t measured = 0;
  SweepOptions options = stopping_sweep({space_->parse_shape(s0_), space_->parse_shape(s1_)}, 9, measured);
  options.strategy = parse_strategy_kind("random");
  options.max_evals = 10;
  options.clock = [&now] { return now; };
  Logged source(*data_, now, 4, true);
  const fs::path db = dir_ / "stop.db";
  const SweepReport stopped = run_sweep(*space_, space_file_, db, source, device_, options);
  EXPECT_TRUE(stopped.interrupted);
  ASSERT_EQ(stopped.shapes.size(), 1u);
  ASSERT_GE(source.first("prepare S1"), 0) << "S1 was not prepared ahead before the stop";
  EXPECT_EQ(source.first("begin_shape S1"), -1);
  EXPECT_EQ(Store::open(db, StoreMode::read_only).measurement_count(), 9);
  options.stop_requested = nullptr;
  const SweepReport resumed = run_sweep(*space_, space_file_, db, source, device_, options);
  ASSERT_EQ(resumed.shapes.size(), 2u);
  EXPECT_EQ(resumed.shapes[1].results.size(), 10u);
  EXPECT_EQ(Store::open(db, StoreMode::read_only).measurement_count(), 20);

  // With a time budget: every shape proposes as many as without the
  // overlap, and only the budget's own end marks it spent.
  options.max_evals.reset();
  options.time_budget = parse_time_budget("8s");
  options.progress = nullptr;
  Logged overlapping(*data_, now, 4, true);
  Logged apart(*data_, now, 4, false);
  const SweepReport a = run_sweep(*space_, space_file_, dir_ / "budget_a.db", overlapping, device_, options);
  const SweepReport b = run_sweep(*space_, space_file_, dir_ / "budget_b.db", apart, device_, options);
  ASSERT_EQ(a.shapes.size(), 2u);
  ASSERT_GT(a.shapes[1].prepared_ahead, 0u);
  for (std::size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(a.shapes[k].results.size(), b.shapes[k].results.size()) << k;
    EXPECT_TRUE(a.shapes[k].time_budget_spent) << k;
  }
}

}  // namespace
}  // namespace mlatune
