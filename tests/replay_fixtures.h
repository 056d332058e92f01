// Test support: the recorded H200 sweeps of the flagship space as replay
// fixtures (tests/data/*.csv and *.csv.gz), one per recorded shape, and how a
// strategy is judged on one: evaluations to come within 3 % of the fixture's
// optimum, and the best found after 5 %, 10 % and 25 % of its configs.
// Shared by tests/strategy_test.cpp and tests/bench_strategies.cpp so that
// the test of the target and the table that reports it measure alike.
//
// Each file states what it recorded ("# where:" lines, tuner/replay.h): its
// shapes are searched in the flagship space restricted so.  A shape recorded
// in several files is taken from the one that recorded most of it.  A shape
// recorded only in part (a random sample) is searched over its recorded
// configs only (Unrecorded::skip): the fractions are then of those.
#pragma once
#include <algorithm>
#include <cstddef>
#include <filesystem>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/space.h"
#include "tuner/replay.h"
#include "tuner/strategies/warm_start.h"
#include "tuner/strategy.h"

namespace mlatune::test_support {

/// One recorded shape.
struct Fixture {
  std::string file;              // the file's name
  std::string name;              // "S0" for a target shape, else the shape's text
  const SearchSpace* space = nullptr;  // the flagship restricted as the file says
  const ReplayData* data = nullptr;
  Shape shape;
  std::size_t valid = 0;         // valid configs of `space` at the shape
  std::size_t recorded = 0;      // of those, recorded
  bool exhaustive() const { return recorded == valid; }
  Unrecorded unrecorded() const { return exhaustive() ? Unrecorded::error : Unrecorded::skip; }
  /// The configs a search can evaluate: all valid ones, or the recorded ones.
  std::size_t searchable() const { return exhaustive() ? valid : recorded; }
};

inline const std::filesystem::path& flagship_space_path() {
  static const std::filesystem::path path =
      std::filesystem::path(MLATUNE_TEST_DATA_DIR).parent_path() / "search_spaces" / "fused_mla_attention.yaml";
  return path;
}

/// tests/data/*.csv and *.csv.gz, by name.
inline std::vector<std::filesystem::path> default_fixture_files() {
  std::vector<std::filesystem::path> files;
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(MLATUNE_TEST_DATA_DIR) / "data")) {
    const std::string name = entry.path().filename().string();
    auto ends_with = [&](const std::string& suffix) {
      return name.size() >= suffix.size() && name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
    };
    if (ends_with(".csv") || ends_with(".csv.gz")) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

/// The S0-S4 names of tests/named_shape.h (which needs GoogleTest, so that a
/// benchmark cannot include it).
inline std::string target_name(const std::string& shape_text) {
  static const char* const kTargets[][2] = {{"S0", "B=2,T=32,H=4,D=16,R=24"},
                                            {"S1", "B=4,T=256,H=8,D=32,R=64"},
                                            {"S2", "B=4,T=1024,H=16,D=64,R=128"},
                                            {"S3", "B=2,T=2048,H=32,D=64,R=256"},
                                            {"S4", "B=1,T=4096,H=16,D=128,R=512"}};
  for (const auto& target : kTargets)
    if (shape_text == target[1]) return target[0];
  return shape_text;
}

/// The fixtures of some files, and what they refer to.
class FixtureSet {
 public:
  explicit FixtureSet(const std::vector<std::filesystem::path>& files)
      : flagship_(std::make_unique<SearchSpace>(SearchSpace::load(flagship_space_path()))) {
    for (const std::filesystem::path& file : files) {
      data_.push_back(std::make_unique<ReplayData>(ReplayData::load(file, *flagship_)));
      const ReplayData& data = *data_.back();
      spaces_.push_back(std::make_unique<SearchSpace>(flagship_->restrict(data.restriction())));
      const SearchSpace& space = *spaces_.back();
      for (const Shape& shape : data.shapes()) {
        Fixture f{file.filename().string(), target_name(flagship_->shape_string(shape)), &space, &data, shape,
                  static_cast<std::size_t>(space.count(shape)), data.size(shape)};
        auto same = std::find_if(fixtures_.begin(), fixtures_.end(), [&](const Fixture& g) { return g.shape == shape; });
        if (same == fixtures_.end())
          fixtures_.push_back(std::move(f));
        else if (f.recorded > same->recorded)
          *same = std::move(f);
      }
    }
    std::sort(fixtures_.begin(), fixtures_.end(), [](const Fixture& a, const Fixture& b) {
      return a.valid != b.valid ? a.valid < b.valid : a.shape < b.shape;
    });
  }

  const std::vector<Fixture>& fixtures() const { return fixtures_; }
  const Fixture* find(const std::string& name) const {
    for (const Fixture& f : fixtures_)
      if (f.name == name) return &f;
    return nullptr;
  }

  /// What a sweep tells a strategy at `target` with every other fixture
  /// shape tuned in its database: a warm start from the best recorded config
  /// of each, repaired to be valid at the target, nearest first; and the
  /// costly values (strategies::costly_values) of their recordings, whose
  /// fastest configs follow the warm start.
  StrategyContext warm_context(const Fixture& target) const {
    std::vector<strategies::TunedText> tuned;
    for (const Fixture& f : fixtures_)
      if (!(f.shape == target.shape))
        tuned.push_back({flagship_->shape_string(f.shape), flagship_->config_string(f.data->best_config(f.shape)),
                         f.data->optimum(f.shape)});
    StrategyContext context;
    context.warm_start = strategies::warm_start(*target.space, target.shape, tuned).configs;
    std::vector<strategies::MeasuredShape> measured;
    for (const std::string& shape : strategies::tuned_shapes_nearest_first(*target.space, target.shape, tuned)) {
      strategies::MeasuredShape m{shape, {}};
      for (const Fixture& f : fixtures_)
        if (flagship_->shape_string(f.shape) == shape)
          for (const auto& [config, time] : f.data->measured(f.shape)) m.results[flagship_->config_string(config)] = time;
      measured.push_back(std::move(m));
    }
    strategies::add_costly_values(strategies::costly_values(*target.space, target.shape, measured), context);
    return context;
  }

 private:
  std::unique_ptr<SearchSpace> flagship_;
  std::vector<std::unique_ptr<ReplayData>> data_;
  std::vector<std::unique_ptr<SearchSpace>> spaces_;
  std::vector<Fixture> fixtures_;
};

/// How one search did on a fixture.
struct SearchRecord {
  std::size_t evaluations_to_3_percent = 0;  // searchable() when it never got there
  double above_at[3] = {0, 0, 0};            // % above the optimum after 5, 10, 25 % of searchable()
};

inline constexpr double kBudgetFractions[3] = {0.05, 0.10, 0.25};

/// One search of `kind` (seed, context) on `f`: a quarter of the searchable
/// configs, then on only until within 3 % of the optimum; proposals made
/// `lookahead` ahead of the results (replay()).
inline SearchRecord judge(StrategyKind kind, const Fixture& f, std::uint64_t seed, const StrategyContext& context,
                          std::size_t lookahead = 1) {
  const double optimum = f.data->optimum(f.shape);
  auto strategy = make_strategy(kind, *f.space, f.shape, seed, {}, context);
  const std::size_t quarter = f.searchable() / 4;
  ReplayTrace trace = replay(*strategy, *f.data, f.shape, quarter, std::nullopt, f.unrecorded(), lookahead);
  if (!trace.evaluations_to_within(optimum, 0.03)) {
    ReplayTrace rest = replay(*strategy, *f.data, f.shape, std::numeric_limits<std::size_t>::max(), optimum * 1.03,
                              f.unrecorded(), lookahead);
    const double before = trace.best_after.empty() ? std::numeric_limits<double>::infinity() : trace.best_after.back();
    for (double best : rest.best_after) trace.best_after.push_back(std::min(best, before));
  }
  SearchRecord record;
  const auto n = trace.evaluations_to_within(optimum, 0.03);
  record.evaluations_to_3_percent = n ? *n : f.searchable();
  for (int b = 0; b < 3; ++b) {
    const auto evaluations = static_cast<std::size_t>(kBudgetFractions[b] * static_cast<double>(f.searchable()));
    record.above_at[b] = 100.0 * (trace.best_after_evaluations(evaluations) / optimum - 1.0);
  }
  return record;
}

inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  if (n == 0) return 0;
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace mlatune::test_support
