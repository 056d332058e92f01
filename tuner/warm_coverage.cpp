#include "tuner/warm_coverage.h"

#include <algorithm>
#include <cmath>
#include <future>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include <fmt/format.h>

#include "core/compiler.h"
#include "core/launch_plan.h"

namespace mlatune {

namespace {

/// Corners of more variables than this are not all sampled (2^12 shapes).
constexpr std::size_t max_corner_variables = 12;

std::int64_t draw(std::int64_t low, std::int64_t high, std::mt19937_64& rng) {
  if (std::uniform_int_distribution<int>(0, 1)(rng))
    return std::uniform_int_distribution<std::int64_t>(low, high)(rng);
  // log-uniform, so that T=1..16 is drawn as often as T=256..4096
  std::uniform_real_distribution<double> log_value(std::log(static_cast<double>(low)),
                                                   std::log(static_cast<double>(high) + 1));
  return std::clamp(static_cast<std::int64_t>(std::floor(std::exp(log_value(rng)))), low, high);
}

/// What the index says at one sampled shape.
struct Sample {
  std::vector<Choice> ranked;                     // those that can run it
  std::vector<std::optional<BinaryKey>> standing;  // per standing config: its key where it runs
  std::uint64_t workspace_bytes = 0;              // the largest of the ranked configs', summed
};

Sample examine(const DispatchIndex& index, const std::vector<Config>& standing, const Shape& shape) {
  const SearchSpace& space = index.space();
  Sample sample;
  for (Choice& choice : index.ranked(shape, coverage_rank_limit))
    if (choice.ok()) sample.ranked.push_back(std::move(choice));
  // The first call may run the choice or a stand-in, and a race the next
  // few of the ranking: the pool must hold the largest of their workspaces.
  for (const Choice& choice : sample.ranked) {
    std::uint64_t total = 0;
    for (std::int64_t bytes : plan_launch(space, choice.config, shape).steps.workspace_bytes)
      total += static_cast<std::uint64_t>(bytes);
    sample.workspace_bytes = std::max(sample.workspace_bytes, total);
  }
  for (const Config& config : standing) {
    if (space.check(config, shape).valid && space.geometry(config, shape).valid())
      sample.standing.emplace_back(index.binary_key(config, shape));
    else
      sample.standing.emplace_back();
  }
  return sample;
}

std::vector<Sample> examine_all(const DispatchIndex& index, const std::vector<Config>& standing,
                                const std::vector<Shape>& shapes, unsigned jobs) {
  const unsigned threads = static_cast<unsigned>(std::clamp<std::size_t>(
      jobs ? jobs : std::max(1u, std::thread::hardware_concurrency()), 1, std::max<std::size_t>(1, shapes.size())));
  std::vector<Sample> samples(shapes.size());
  std::vector<std::future<void>> parts;
  for (unsigned t = 0; t < threads; ++t)
    parts.push_back(std::async(std::launch::async, [&, t] {
      for (std::size_t i = t; i < shapes.size(); i += threads) samples[i] = examine(index, standing, shapes[i]);
    }));
  for (auto& part : parts) part.get();  // rethrows a thread's exception
  return samples;
}

/// Whether a key's binary is warmed or stored for the index; the store is
/// asked once per key.
class Readiness {
 public:
  Readiness(Store& store, const DispatchIndex& index, const std::set<BinaryKey>& warmed)
      : store_(store), index_(index), warmed_(warmed) {}
  bool operator()(const BinaryKey& key) {
    if (warmed_.count(key)) return true;
    auto [it, inserted] = known_.try_emplace(key, false);
    if (inserted) {
      std::optional<BinaryRecord> record = store_.get_binary(key.hash);
      it->second = record && usable_by(*record, index_);
    }
    return it->second;
  }

 private:
  Store& store_;
  const DispatchIndex& index_;
  const std::set<BinaryKey>& warmed_;
  std::map<BinaryKey, bool> known_;
};

std::string describe(const SearchSpace& space, const Shape& shape, const Sample& sample) {
  const Choice& choice = sample.ranked.front();
  return fmt::format("{}: {} {} ({} ranked, none warmed)", space.shape_string(shape), to_string(choice.reason),
                     choice.config_text, sample.ranked.size());
}

}  // namespace

std::vector<Shape> coverage_samples(const ShapeBox& box, std::size_t random, std::uint64_t seed) {
  std::vector<Shape> shapes;
  const std::size_t n = box.low.size();
  if (n <= max_corner_variables) {
    std::set<Shape> corners;
    for (std::uint64_t mask = 0; mask < (std::uint64_t{1} << n); ++mask) {
      Shape corner;
      for (std::size_t i = 0; i < n; ++i) corner.values.push_back(mask >> i & 1 ? box.high[i] : box.low[i]);
      corners.insert(std::move(corner));
    }
    shapes.assign(corners.begin(), corners.end());
  }
  std::mt19937_64 rng(seed);
  for (std::size_t s = 0; s < random; ++s) {
    Shape shape;
    for (std::size_t i = 0; i < n; ++i) shape.values.push_back(draw(box.low[i], box.high[i], rng));
    shapes.push_back(std::move(shape));
  }
  return shapes;
}

std::string reserve_text(std::uint64_t bytes) {
  constexpr std::uint64_t mebibyte = std::uint64_t{1} << 20;
  if (bytes == 0) return "0";
  return fmt::format("{}M", bytes / mebibyte + (bytes % mebibyte ? 1 : 0));
}

bool usable_by(const BinaryRecord& record, const DispatchIndex& index) {
  return index.loads(record.kernel_name, record.template_hash, record.nvrtc_version, record.arch) &&
         !record.cubin.empty();
}

CoverageReport check_coverage(Store& store, const DispatchIndex& index, const ShapeBox& box,
                              const std::set<BinaryKey>& warmed, std::size_t samples, std::uint64_t seed,
                              unsigned jobs) {
  const SearchSpace& space = index.space();
  CoverageReport report;
  report.seed = seed;
  std::vector<Config> standing = space.fallbacks();
  for (std::size_t i = 0; i < standing.size(); ++i)
    report.standing.push_back({fmt::format("fallback {}", i), space.config_string(standing[i]), 0});
  standing.push_back(space.default_config());
  report.standing.push_back({"default", space.config_string(space.default_config()), 0});

  const std::vector<Shape> shapes = coverage_samples(box, samples, seed);
  report.sampled = shapes.size();
  report.corners = shapes.size() - samples;
  const std::vector<Sample> found = examine_all(index, standing, shapes, jobs);
  Readiness ready(store, index, warmed);
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    const Sample& sample = found[i];
    for (std::size_t c = 0; c < standing.size(); ++c)
      if (sample.standing[c] && ready(*sample.standing[c])) ++report.standing[c].ready;
    if (sample.ranked.empty()) {
      ++report.unrunnable;
      continue;
    }
    if (sample.workspace_bytes > report.largest_workspace_bytes) {
      report.largest_workspace_bytes = sample.workspace_bytes;
      report.largest_workspace_shape = space.shape_string(shapes[i]);
    }
    if (std::any_of(sample.ranked.begin(), sample.ranked.end(), [&](const Choice& c) { return ready(c.binary); }))
      continue;
    if (++report.uncovered <= coverage_examples) report.examples.push_back(describe(space, shapes[i], sample));
  }
  return report;
}

}  // namespace mlatune
