#include "tuner/sweep.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <future>
#include <random>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/store.h"
#include "tuner/binary_cache.h"
#include "tuner/compile_pool.h"
#include "core/compiler.h"
#include "tuner/replay.h"

namespace mlatune {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

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

/// What earlier runs of this kernel version, device and toolchain committed
/// at one shape: config text -> median (nullopt: it did not run correctly).
std::map<std::string, std::optional<double>> earlier_results(Store& store, const KernelInfo& kernel,
                                                             const DeviceInfo& device,
                                                             const ToolchainInfo& toolchain,
                                                             const std::string& shape) {
  std::map<std::string, std::optional<double>> earlier;
  for (const MeasurementRecord& r : store.measurements({kernel.name, shape})) {
    if (!(r.kernel == kernel) || r.device.name != device.name || r.device.arch != device.arch ||
        r.device.sm_count != device.sm_count || r.device.memory_bytes != device.memory_bytes ||
        r.device.driver_version != device.driver_version || !(r.toolchain == toolchain))
      continue;
    const Measurement& m = r.measurement;
    std::optional<double> time;
    if (m.outcome == Outcome::ok && m.timing) time = m.timing->median_us;
    auto [at, inserted] = earlier.emplace(m.config, time);
    if (!inserted && time && (!at->second || *time < *at->second)) at->second = time;
  }
  return earlier;
}

}  // namespace

SweepReport run_sweep(const SearchSpace& space, const std::filesystem::path& space_file,
                      const std::filesystem::path& database, Worker* worker,
                      const DeviceInfo& device, const SweepOptions& options) {
  const auto sweep_start = Clock::now();
  SweepProgress progress;
  auto say = [&](std::string line) {
    if (!options.progress) return;
    progress.line = std::move(line);
    options.progress(progress);
  };
  if (!worker && !options.replay)
    throw EnvironmentError("run_sweep: neither a GPU worker nor replay data to evaluate with");
  if (!(options.cutoff_factor == 0 || options.cutoff_factor > 1))
    throw InputError(fmt::format("cutoff factor {:g}: must be 0 (no early cut) or above 1, so that a "
                                 "candidate faster than the best is never cut",
                                 options.cutoff_factor));

  Store store = Store::open(database, StoreMode::read_write);
  const KernelInfo kernel{space.kernel_name(), space.template_hash(), space.definition_hash()};
  const ToolchainInfo toolchain = ToolchainInfo::current();
  const std::int64_t kernel_id = store.ensure_kernel(kernel);
  const std::int64_t device_id = store.ensure_device(device);
  const std::int64_t toolchain_id = store.ensure_toolchain(toolchain);

  std::uint64_t seed = options.seed ? *options.seed : std::random_device{}();
  std::mt19937_64 rng(seed);
  RunInfo run_info;
  run_info.kernel_id = kernel_id;
  run_info.device_id = device_id;
  run_info.toolchain_id = toolchain_id;
  run_info.space_path = std::filesystem::absolute(space_file).string();
  run_info.space_text = space.text();
  run_info.strategy = std::string(to_string(options.strategy));
  run_info.strategy_settings =
      nlohmann::json{{"max_evals", options.max_evals ? nlohmann::json(*options.max_evals) : nlohmann::json()},
                     {"seed", seed},
                     {"replay", options.replay ? nlohmann::json(options.replay_source) : nlohmann::json()},
                     {"cache", std::string(to_string(options.timing.cache))},
                     {"budget_ms", options.timing.budget_ms},
                     {"cutoff", options.cutoff_factor},
                     {"cut_after", options.timing.cut_min_samples},
                     {"retime_top", options.retime_top}}
          .dump();
  SweepReport report;
  report.device = device;
  report.run_id = store.begin_run(run_info);

  Compiler compiler;
  std::optional<StoreBinaryCache> binary_cache;
  std::optional<CompilePool> pool;
  if (!options.replay) {  // replay serves times, it needs no binaries
    binary_cache.emplace(database, space.kernel_name(), space.template_hash());
    pool.emplace(compiler, options.jobs, binary_cache->hooks());
    report.compile_threads = pool->threads();
  }
  // Binaries whose NVRTC time was counted: configs that compile to the same
  // binary (or a shape that reuses one) share one compilation.
  std::set<std::string> timed_binaries;

  struct Pending {
    Config config;
    std::string config_text;
    std::shared_future<CompileResult> compiled;  // empty in replay
  };

  try {
    for (const Shape& shape : options.shapes) {
      const auto shape_start = Clock::now();
      ShapeReport shape_report;
      shape_report.shape = space.shape_string(shape);
      const SearchSpace& subspace = options.candidates ? *options.candidates : space;
      shape_report.valid_configs = subspace.count(shape);
      const std::uint64_t budget = options.max_evals.value_or(shape_report.valid_configs);

      std::unique_ptr<Strategy> strategy = make_strategy(options.strategy, subspace, shape, rng());
      std::map<std::string, std::optional<double>> earlier =
          earlier_results(store, kernel, device, toolchain, shape_report.shape);
      std::set<Config> proposed;
      bool default_offered = false;

      // The next config to evaluate: the space's default first (so every sweep
      // can say what tuning gained over it), then the strategy's proposals.
      // A config committed by an earlier run is not evaluated again; its
      // result is told to the strategy instead (resume).
      auto next_config = [&]() -> std::optional<Config> {
        while (shape_report.planned < budget) {
          std::optional<Config> config;
          if (!default_offered) {
            default_offered = true;
            if (subspace.check(space.default_config(), shape)) config = space.default_config();
            else continue;
          } else {
            config = strategy->next();
          }
          if (!config) return std::nullopt;
          if (!proposed.insert(*config).second) continue;
          ++shape_report.planned;
          auto found = earlier.find(space.config_string(*config));
          if (found != earlier.end()) {
            ++shape_report.already_measured;
            strategy->observe(*config, found->second);
            continue;
          }
          return config;
        }
        return std::nullopt;
      };

      // Keep enough candidates compiling that the GPU never waits for the
      // compiler when it could be busy; adaptive strategies see results with
      // at most this lag.
      const std::size_t window = options.replay ? 1 : std::max<std::size_t>(4, 2 * pool->threads());
      std::deque<Pending> in_flight;
      auto refill = [&] {
        while (in_flight.size() < window) {
          std::optional<Config> config = next_config();
          if (!config) return;
          Pending p{*config, space.config_string(*config), {}};
          if (pool) p.compiled = pool->submit(compile_request(space, *config, shape, options.arch));
          in_flight.push_back(std::move(p));
        }
      };
      refill();
      progress = SweepProgress{};
      progress.shape = shape_report.shape;
      progress.total = std::min<std::uint64_t>(budget, shape_report.valid_configs) -
                       std::min(shape_report.already_measured, budget);
      say(fmt::format("{}: {} valid configs, strategy {}, budget {}, {} already in the database",
                      shape_report.shape, shape_report.valid_configs, to_string(options.strategy),
                      budget, shape_report.already_measured));
      if (in_flight.empty()) {
        report.shapes.push_back(std::move(shape_report));
        continue;
      }

      if (worker && !options.replay) {
        WorkloadRequest workload_request;
        workload_request.space_file = std::filesystem::absolute(space_file);
        workload_request.shape = shape_report.shape;
        workload_request.seed = rng();
        workload_request.timing = options.timing;
        auto setup_start = Clock::now();
        shape_report.workload = worker->set_workload(workload_request);
        shape_report.setup_s = seconds_since(setup_start);
      }

      std::vector<Candidate> candidates;  // parallel to shape_report.results
      while (!in_flight.empty()) {
        Pending p = std::move(in_flight.front());
        in_flight.pop_front();
        CandidateReport c;
        c.config = p.config_text;
        Candidate candidate;
        if (options.replay) {
          c.outcome = options.replay->outcome(shape, p.config);
          if (auto time = options.replay->time(shape, p.config)) {
            TimingStats t;
            t.median_us = t.min_us = t.p90_us = *time;
            t.count = 1;
            t.method = "replayed from " + options.replay_source;
            c.timing = t;
          } else {
            c.reason = "replayed from " + options.replay_source;
          }
        } else {
          auto wait_start = Clock::now();
          const CompileResult& compiled = p.compiled.get();
          shape_report.compile_wait_s += seconds_since(wait_start);
          if (timed_binaries.insert(compiled.key().hash).second)
            shape_report.nvrtc_s += compiled.compile_seconds();
          LaunchPlan plan = plan_launch(space, p.config, shape);
          if (!compiled.ok()) {
            c.outcome = Outcome::compile_error;
            c.reason = compiled.failure().message;
          } else if (!plan.ok()) {
            c.outcome = Outcome::launch_error;
            c.reason = plan.refusal;
            c.usage = compiled.binary().usage;
          } else {
            candidate = make_candidate(plan, p.config_text, compiled.binary().cubin);
            // The best of this sweep only: an earlier run's times may have
            // been taken with another cache method.
            Cutoff cutoff{progress.best_us.value_or(0.0), options.cutoff_factor};
            auto gpu_start = Clock::now();
            EvaluationResult result = worker->evaluate(candidate, cutoff);
            shape_report.gpu_s += seconds_since(gpu_start);
            c.outcome = result.outcome;
            c.reason = result.reason;
            c.timing = result.timing;
            c.validation = result.validation;
            c.usage = compiled.binary().usage;
            if (c.outcome != Outcome::ok) candidate.cubin.clear();
          }
        }
        store.record(to_measurement(report.run_id, shape_report.shape, c));
        strategy->observe(p.config, c.outcome == Outcome::ok && c.timing
                                        ? std::optional<double>(c.timing->median_us)
                                        : std::nullopt);
        ++shape_report.outcomes[c.outcome];
        const bool cut = c.outcome == Outcome::ok && c.timing && c.timing->cut;
        if (cut) ++shape_report.cut;
        ++progress.done;
        // Configs found already measured while refilling shrink what is left.
        progress.total = std::max(progress.done, std::min<std::uint64_t>(budget, shape_report.valid_configs) -
                                                     std::min(shape_report.already_measured, budget));
        if (c.outcome != Outcome::ok) ++progress.failures;
        if (c.outcome == Outcome::ok && c.timing && (!progress.best_us || c.timing->median_us < *progress.best_us))
          progress.best_us = c.timing->median_us;
        progress.elapsed_s = seconds_since(shape_start);
        if (p.config == space.default_config()) shape_report.default_config = c;
        say(fmt::format("[{}/{}] {} {} {}", progress.done, progress.total, c.config, to_string(c.outcome),
                        c.timing && c.outcome == Outcome::ok
                            ? fmt::format("{:.2f} us{}", c.timing->median_us,
                                          cut ? fmt::format(" (timing cut after {} launches)", c.timing->count)
                                              : std::string())
                            : c.reason.substr(0, c.reason.find('\n'))));
        shape_report.results.push_back(std::move(c));
        candidates.push_back(std::move(candidate));
        refill();
      }

      // Median over the valid configs, and the fastest few timed again,
      // interleaved, so that drift during the sweep cannot pick the winner.
      std::vector<std::size_t> ok;
      for (std::size_t i = 0; i < shape_report.results.size(); ++i)
        if (shape_report.results[i].outcome == Outcome::ok) ok.push_back(i);
      std::sort(ok.begin(), ok.end(), [&](std::size_t a, std::size_t b) {
        return shape_report.results[a].timing->median_us < shape_report.results[b].timing->median_us;
      });
      if (!ok.empty()) shape_report.median_ok_us = shape_report.results[ok[ok.size() / 2]].timing->median_us;
      std::size_t top = std::min<std::size_t>(ok.size(), static_cast<std::size_t>(std::max(0, options.retime_top)));
      if (top > 0 && worker && !options.replay) {
        std::vector<Candidate> again;
        for (std::size_t k = 0; k < top; ++k) again.push_back(candidates[ok[k]]);
        auto gpu_start = Clock::now();
        std::vector<std::optional<TimingStats>> retimed = worker->retime(again, options.retime_rounds);
        shape_report.gpu_s += seconds_since(gpu_start);
        for (std::size_t k = 0; k < top; ++k) {
          if (!retimed[k]) continue;
          const CandidateReport& c = shape_report.results[ok[k]];
          shape_report.retimed.push_back({c.config, c.timing->median_us, *retimed[k]});
        }
        std::sort(shape_report.retimed.begin(), shape_report.retimed.end(),
                  [](const RetimedCandidate& a, const RetimedCandidate& b) {
                    return a.retimed.median_us < b.retimed.median_us;
                  });
      }
      if (auto best = store.best(kernel_id, device_id, toolchain_id, shape_report.shape)) {
        shape_report.best_config = best->config;
        shape_report.best_us = best->median_us;
      }
      shape_report.wall_s = seconds_since(shape_start);
      report.shapes.push_back(std::move(shape_report));
    }
  } catch (...) {
    store.finish_run(report.run_id, RunStatus::failed);
    throw;
  }
  store.finish_run(report.run_id, RunStatus::finished);
  if (pool) {
    CompilePoolStats stats = pool->stats();
    report.nvrtc_runs = stats.compiled;
    report.binaries_reused = stats.memory_hits + stats.external_hits;
  }
  report.worker_replacements = worker ? worker->replacements() : 0;
  report.wall_s = seconds_since(sweep_start);
  return report;
}

SweepTotals sweep_totals(const SweepReport& report) {
  SweepTotals t;
  for (const ShapeReport& s : report.shapes) {
    t.evaluated += s.results.size();
    t.cut += static_cast<std::uint64_t>(std::max(0, s.cut));
    t.gpu_s += s.gpu_s;
    t.compile_wait_s += s.compile_wait_s;
    t.setup_s += s.setup_s;
    t.nvrtc_s += s.nvrtc_s;
  }
  t.wall_s = report.wall_s;
  t.other_s = std::max(0.0, t.wall_s - t.gpu_s - t.compile_wait_s - t.setup_s);
  t.compile_threads = report.compile_threads;
  const auto n = static_cast<double>(t.evaluated);
  if (t.evaluated > 0 && t.wall_s > 0) t.configs_per_s = n / t.wall_s;
  if (t.evaluated > 0 && t.gpu_s > 0) t.gpu_limit_configs_per_s = n / t.gpu_s;
  if (t.evaluated > 0 && t.nvrtc_s > 0 && t.compile_threads > 0)
    t.compile_limit_configs_per_s = n / (t.nvrtc_s / t.compile_threads);
  if (t.wall_s > 0) t.gpu_busy_fraction = t.gpu_s / t.wall_s;
  return t;
}

}  // namespace mlatune
