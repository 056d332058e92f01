#include "tuner/sweep.h"

#include <algorithm>
#include <chrono>
#include <future>
#include <random>
#include <set>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/store.h"
#include "tuner/binary_cache.h"
#include "tuner/compile_pool.h"
#include "tuner/compiler.h"

namespace mlatune {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

/// The configs to try at one shape: the default config first (so every sweep
/// can say what tuning gained over it), then every valid config, or a uniform
/// random sample of max_evals distinct ones.
std::vector<Config> plan_configs(const SearchSpace& space, const Shape& shape,
                                 std::optional<std::uint64_t> max_evals, std::mt19937_64& rng) {
  std::vector<Config> plan;
  std::set<Config> chosen;
  const Config& default_config = space.default_config();
  if (space.check(default_config, shape)) {
    plan.push_back(default_config);
    chosen.insert(default_config);
  }
  std::uint64_t valid = space.count(shape);
  if (!max_evals || *max_evals >= valid) {
    space.for_each_valid(shape, [&](const Config& config) {
      if (chosen.insert(config).second) plan.push_back(config);
      return true;
    });
    return plan;
  }
  // Distinct uniform draws; max_evals < valid, so this terminates, and when
  // it asks for most of the space the rejection of repeats stays cheap enough.
  while (plan.size() < *max_evals) {
    std::optional<Config> config = space.sample(shape, rng);
    if (!config) break;
    if (chosen.insert(*config).second) plan.push_back(*config);
  }
  return plan;
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

}  // namespace

SweepReport run_sweep(const SearchSpace& space, const std::filesystem::path& space_file,
                      const std::filesystem::path& database, Worker& worker,
                      const DeviceInfo& device, const SweepOptions& options) {
  const auto sweep_start = Clock::now();
  auto say = [&](std::string_view line) {
    if (options.progress) options.progress(line);
  };

  Store store = Store::open(database, StoreMode::read_write);
  const KernelInfo kernel{space.kernel_name(), space.template_hash(), space.definition_hash()};
  const std::int64_t kernel_id = store.ensure_kernel(kernel);
  const std::int64_t device_id = store.ensure_device(device);
  const std::int64_t toolchain_id = store.ensure_toolchain(ToolchainInfo::current());

  std::uint64_t seed = options.seed ? *options.seed : std::random_device{}();
  std::mt19937_64 rng(seed);
  const bool brute_force = !options.max_evals.has_value();
  RunInfo run_info;
  run_info.kernel_id = kernel_id;
  run_info.device_id = device_id;
  run_info.toolchain_id = toolchain_id;
  run_info.space_path = std::filesystem::absolute(space_file).string();
  run_info.space_text = space.text();
  run_info.strategy = brute_force ? "brute_force" : "random";
  run_info.strategy_settings =
      nlohmann::json{{"max_evals", options.max_evals ? nlohmann::json(*options.max_evals) : nlohmann::json()},
                     {"seed", seed},
                     {"cache", std::string(to_string(options.timing.cache))},
                     {"budget_ms", options.timing.budget_ms},
                     {"retime_top", options.retime_top}}
          .dump();
  SweepReport report;
  report.device = device;
  report.run_id = store.begin_run(run_info);

  Compiler compiler;
  StoreBinaryCache binary_cache(database, space.kernel_name(), space.template_hash());
  CompilePool pool(compiler, options.jobs, binary_cache.hooks());

  struct Pending {
    Config config;
    std::string config_text;
    std::shared_future<CompileResult> compiled;
  };

  try {
    for (const Shape& shape : options.shapes) {
      const auto shape_start = Clock::now();
      ShapeReport shape_report;
      shape_report.shape = space.shape_string(shape);
      shape_report.valid_configs = space.count(shape);

      std::vector<Pending> pending;
      for (const Config& config : plan_configs(space, shape, options.max_evals, rng)) {
        ++shape_report.planned;
        std::string text = space.config_string(config);
        if (store.measured(kernel_id, device_id, toolchain_id, shape_report.shape, text)) {
          ++shape_report.already_measured;
          continue;
        }
        CompileRequest request = compile_request(space, config, shape, options.arch);
        pending.push_back({config, text, pool.submit(std::move(request))});
      }
      say(fmt::format("{}: {} valid configs, {} planned, {} already in the database, {} to evaluate",
                      shape_report.shape, shape_report.valid_configs, shape_report.planned,
                      shape_report.already_measured, pending.size()));
      if (pending.empty()) {
        report.shapes.push_back(std::move(shape_report));
        continue;
      }

      WorkloadRequest workload_request;
      workload_request.space_file = std::filesystem::absolute(space_file);
      workload_request.shape = shape_report.shape;
      workload_request.seed = rng();
      workload_request.timing = options.timing;
      shape_report.workload = worker.set_workload(workload_request);

      std::vector<Candidate> candidates(pending.size());
      for (std::size_t i = 0; i < pending.size(); ++i) {
        const Pending& p = pending[i];
        CandidateReport c;
        c.config = p.config_text;
        auto wait_start = Clock::now();
        const CompileResult& compiled = p.compiled.get();
        shape_report.compile_wait_s += seconds_since(wait_start);
        LaunchGeometry geometry = space.geometry(p.config, shape);
        if (!compiled.ok()) {
          c.outcome = Outcome::compile_error;
          c.reason = compiled.failure().message;
        } else if (!geometry.valid()) {
          c.outcome = Outcome::launch_error;
          c.reason = "invalid launch geometry: " + geometry.invalid_reason;
          c.usage = compiled.binary().usage;
        } else {
          Candidate& candidate = candidates[i];
          candidate.label = p.config_text;
          candidate.cubin = compiled.binary().cubin;
          candidate.entry = space.kernel().entry;
          candidate.geometry = geometry;
          auto gpu_start = Clock::now();
          EvaluationResult result = worker.evaluate(candidate);
          shape_report.gpu_s += seconds_since(gpu_start);
          c.outcome = result.outcome;
          c.reason = result.reason;
          c.timing = result.timing;
          c.validation = result.validation;
          c.usage = compiled.binary().usage;
          if (c.outcome != Outcome::ok) candidate.cubin.clear();
        }
        store.record(to_measurement(report.run_id, shape_report.shape, c));
        ++shape_report.outcomes[c.outcome];
        if (p.config == space.default_config()) shape_report.default_config = c;
        say(fmt::format("[{}/{}] {} {} {}", i + 1, pending.size(), c.config, to_string(c.outcome),
                        c.timing && c.outcome == Outcome::ok
                            ? fmt::format("{:.2f} us", c.timing->median_us)
                            : c.reason.substr(0, c.reason.find('\n'))));
        shape_report.results.push_back(std::move(c));
      }

      // Median over the valid configs, and the fastest few timed again,
      // interleaved, so that drift during the sweep cannot pick the winner.
      std::vector<std::size_t> ok;
      for (std::size_t i = 0; i < shape_report.results.size(); ++i)
        if (shape_report.results[i].outcome == Outcome::ok) ok.push_back(i);
      std::sort(ok.begin(), ok.end(), [&](std::size_t a, std::size_t b) {
        return shape_report.results[a].timing->median_us < shape_report.results[b].timing->median_us;
      });
      if (!ok.empty()) {
        const auto& mid = shape_report.results[ok[ok.size() / 2]];
        shape_report.median_ok_us = mid.timing->median_us;
      }
      std::size_t top = std::min<std::size_t>(ok.size(), static_cast<std::size_t>(std::max(0, options.retime_top)));
      if (top > 0) {
        std::vector<Candidate> again;
        for (std::size_t k = 0; k < top; ++k) again.push_back(candidates[ok[k]]);
        auto gpu_start = Clock::now();
        std::vector<std::optional<TimingStats>> retimed = worker.retime(again, options.retime_rounds);
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
  CompilePoolStats stats = pool.stats();
  report.nvrtc_runs = stats.compiled;
  report.binaries_reused = stats.memory_hits + stats.external_hits;
  report.worker_replacements = worker.replacements();
  report.wall_s = seconds_since(sweep_start);
  return report;
}

}  // namespace mlatune
