#include "tuner/sweep_journal.h"

#include <nlohmann/json.hpp>

namespace mlatune {
namespace {

Measurement to_measurement(std::int64_t run_id, const std::string& shape, const CandidateReport& c) {
  Measurement m;
  m.run_id = run_id;
  m.shape = shape;
  m.config = c.config;
  m.outcome = c.outcome;
  m.message = c.reason;
  if (c.timing && c.outcome == Outcome::ok) {
    m.timing = Timing{c.timing->median_us, c.timing->min_us, c.timing->p90_us, c.timing->count,
                      c.timing->spread, c.timing->method};
  }
  if (c.validation) m.error = ErrorFigures{c.validation->relative_l2, c.validation->max_abs};
  m.resources = c.usage;
  return m;
}

/// One run in the store: every measurement committed as it comes.
class StoreJournal final : public Journal {
 public:
  StoreJournal(const std::filesystem::path& database, const SearchSpace& space,
               const std::filesystem::path& space_file, const DeviceInfo& device,
               const SweepOptions& options, const MeasurementSource& source, std::uint64_t seed)
      : store_(Store::open(database, StoreMode::read_write)),
        kernel_{space.kernel_name(), space.template_hash(), space.definition_hash()},
        device_(device),
        toolchain_(ToolchainInfo::current()) {
    RunInfo run;
    run.kernel_id = kernel_id_ = store_.ensure_kernel(kernel_);
    run.device_id = device_id_ = store_.ensure_device(device_);
    run.toolchain_id = toolchain_id_ = store_.ensure_toolchain(toolchain_);
    run.space_path = std::filesystem::absolute(space_file).string();
    run.space_text = space.text();
    run.strategy = options.given ? std::string("given_configs") : std::string(to_string(options.strategy));
    run.strategy_settings = settings_text(options, source, seed);
    run_id_ = store_.begin_run(run);
  }

  std::int64_t run_id() const override { return run_id_; }

  EarlierResults earlier(const std::string& shape) override {
    EarlierResults earlier;
    for (const MeasurementRecord& r : store_.measurements({kernel_.name, shape})) {
      if (!(r.kernel == kernel_) || !(r.device == device_.identity()) || !(r.toolchain == toolchain_)) continue;
      const Measurement& m = r.measurement;
      std::optional<double> time;
      if (m.outcome == Outcome::ok && m.timing) time = m.timing->median_us;
      auto [at, inserted] = earlier.emplace(m.config, time);
      if (!inserted && time && (!at->second || *time < *at->second)) at->second = time;
    }
    return earlier;
  }

  std::optional<double> earlier_best_us(const std::string& shape, CacheMode cache) override {
    std::optional<double> best;
    for (const MeasurementRecord& r : store_.measurements({kernel_.name, shape})) {
      if (!(r.kernel == kernel_) || !(r.device == device_.identity()) || !(r.toolchain == toolchain_)) continue;
      const Measurement& m = r.measurement;
      if (m.outcome != Outcome::ok || !m.timing || cache_mode_of_method(m.timing->method) != cache) continue;
      if (!best || m.timing->median_us < *best) best = m.timing->median_us;
    }
    return best;
  }

  // The same GPU model is what matters for a first guess: a driver update
  // does not make another device's winners a worse one.
  std::vector<strategies::TunedText> tuned_elsewhere(const std::string& shape) override {
    std::vector<strategies::TunedText> tuned;
    for (const BestRecord& b : store_.all_best())
      if (b.kernel.name == kernel_.name && b.device.name == device_.name && b.device.arch == device_.arch &&
          b.entry.shape != shape)
        tuned.push_back({b.entry.shape, b.entry.config, b.entry.median_us});
    return tuned;
  }

  void record(const std::string& shape, const CandidateReport& candidate) override {
    store_.record(to_measurement(run_id_, shape, candidate));
  }

  void look_up_best(ShapeReport& report) override {
    if (auto best = store_.best(kernel_id_, device_id_, toolchain_id_, report.shape)) {
      report.best_config = best->config;
      report.best_us = best->median_us;
    }
  }

  void finish(RunStatus status) override { store_.finish_run(run_id_, status); }

 private:
  static std::string settings_text(const SweepOptions& options, const MeasurementSource& source,
                                   std::uint64_t seed) {
    using nlohmann::json;
    const std::optional<std::string> origin = source.origin();
    return json{{"max_evals", options.max_evals ? json(*options.max_evals) : json()},
                {"time_budget", options.time_budget ? json(to_string(*options.time_budget)) : json()},
                {"warm_start", options.warm_start},
                {"seed", seed},
                {"replay", origin ? json(*origin) : json()},
                {"cache", std::string(to_string(options.timing.cache))},
                {"budget_ms", options.timing.budget_ms},
                {"cutoff", options.cutoff_factor},
                {"cut_after", options.timing.cut_min_samples},
                {"validate_first", options.timing.validate_first},
                {"first_launch_cut", options.timing.first_launch_cut},
                {"retime_top", options.retime_top},
                {"shard", options.shard ? json(to_string(*options.shard)) : json()}}
        .dump();
  }

  Store store_;
  KernelInfo kernel_;
  DeviceInfo device_;
  ToolchainInfo toolchain_;
  std::int64_t kernel_id_ = 0, device_id_ = 0, toolchain_id_ = 0, run_id_ = 0;
};

/// A compile-only sweep records nothing: its binaries reach the database
/// through the compile pool's cache, and nothing is skipped as done.
class NoJournal final : public Journal {
 public:
  std::int64_t run_id() const override { return 0; }
  EarlierResults earlier(const std::string&) override { return {}; }
  std::optional<double> earlier_best_us(const std::string&, CacheMode) override { return std::nullopt; }
  std::vector<strategies::TunedText> tuned_elsewhere(const std::string&) override { return {}; }
  void record(const std::string&, const CandidateReport&) override {}
  void look_up_best(ShapeReport&) override {}
  void finish(RunStatus) override {}
};

}  // namespace

std::unique_ptr<Journal> store_journal(const std::filesystem::path& database, const SearchSpace& space,
                                       const std::filesystem::path& space_file, const DeviceInfo& device,
                                       const SweepOptions& options, const MeasurementSource& source,
                                       std::uint64_t seed) {
  return std::make_unique<StoreJournal>(database, space, space_file, device, options, source, seed);
}

std::unique_ptr<Journal> no_journal() { return std::make_unique<NoJournal>(); }

}  // namespace mlatune
