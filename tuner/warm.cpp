#include "tuner/warm.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <future>
#include <map>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "core/compiler.h"
#include "core/error.h"
#include "tuner/compile_pool.h"

namespace mlatune {

namespace {

unsigned thread_count(unsigned jobs) {
  if (jobs) return jobs;
  return std::max(1u, std::thread::hardware_concurrency());
}

/// Plans one candidate and names its binaries.
std::vector<WarmBinary> plan_candidate(const DispatchIndex& index, const PlannedConfig& planned) {
  std::vector<WarmBinary> binaries;
  for (const Shape& shape : planned.binaries.shapes)
    binaries.push_back(
        WarmBinary{index.binary_key(planned.binaries.config, shape), planned.binaries.config, shape});
  return binaries;
}

/// Adds each tuned entry's binary at its own shape, where that shape lies in
/// `box`: the dispatcher's hit there loads exactly it, also when its config
/// compiles a variable exactly and so has no plan over the box.  Returns how
/// many were not planned already.
std::size_t add_tuned_shape_binaries(const DispatchIndex& index, const TunedEntries& tuned, const ShapeBox& box,
                                     std::map<BinaryKey, WarmBinary>& distinct) {
  const SearchSpace& space = index.space();
  std::size_t added = 0;
  for (const auto& [shape, config] : tuned.entries) {
    if (!box.contains(shape) || !space.check(config, shape)) continue;
    BinaryKey key = index.binary_key(config, shape);
    if (distinct.try_emplace(key, WarmBinary{key, config, shape}).second) ++added;
  }
  return added;
}

}  // namespace

std::vector<CandidateConfig> candidate_configs(const SearchSpace& space, const TunedEntries& tuned) {
  std::vector<CandidateConfig> candidates;
  std::set<Config> seen;
  auto add = [&](const Config& config, std::string origin) {
    if (seen.insert(config).second) candidates.push_back({config, std::move(origin)});
  };
  for (std::size_t i = 0; i < space.fallbacks().size(); ++i) add(space.fallbacks()[i], fmt::format("fallback {}", i));
  add(space.default_config(), "default");
  for (const Config& config : tuned.configs) add(config, "tuned");
  return candidates;
}

std::uint64_t WarmPlan::shapes() const {
  std::uint64_t count = 0;
  for (const PlannedConfig& planned : configs) count += planned.binaries.shapes.size();
  return count;
}

TunedEntries tuned_entries(Store& store, const SearchSpace& space, const ToolchainInfo& toolchain) {
  TunedEntries tuned;
  std::set<Config> configs;
  const std::string template_hash = space.template_hash();
  const std::string definition_hash = space.definition_hash();
  for (const BestRecord& record : store.all_best()) {
    if (record.kernel.name != space.kernel_name() || record.kernel.template_hash != template_hash ||
        record.kernel.definition_hash != definition_hash || !(record.toolchain == toolchain))
      continue;
    try {
      Shape shape = space.parse_shape(record.entry.shape);
      Config config = space.parse_config(record.entry.config);
      tuned.shapes.push_back(shape);
      configs.insert(config);
      tuned.entries.emplace_back(std::move(shape), std::move(config));
      if (std::find(tuned.devices.begin(), tuned.devices.end(), record.device) == tuned.devices.end())
        tuned.devices.push_back(record.device);
    } catch (const InputError&) {
      continue;  // the index ignores such an entry too
    }
  }
  tuned.configs.assign(configs.begin(), configs.end());
  return tuned;
}

WarmPlan plan_warm(const DispatchIndex& index, const TunedEntries& tuned, const WarmOptions& options) {
  const std::vector<CandidateConfig> candidates = candidate_configs(index.space(), tuned);
  WarmPlan plan;
  plan.configs.resize(candidates.size());
  std::vector<std::vector<WarmBinary>> binaries(candidates.size());
  std::atomic<std::size_t> next{0};
  auto work = [&] {
    for (std::size_t i; (i = next++) < candidates.size();) {
      plan.configs[i].origin = candidates[i].origin;
      plan.configs[i].binaries = plan_config_binaries(index.space(), options.box, candidates[i].config,
                                                      options.max_binaries_per_config);
      binaries[i] = plan_candidate(index, plan.configs[i]);
    }
  };
  std::vector<std::future<void>> parts;
  const unsigned threads = static_cast<unsigned>(std::min<std::size_t>(thread_count(options.jobs), candidates.size()));
  for (unsigned t = 0; t < threads; ++t) parts.push_back(std::async(std::launch::async, work));
  for (auto& part : parts) part.get();  // rethrows a thread's exception
  std::map<BinaryKey, WarmBinary> distinct;
  for (std::vector<WarmBinary>& part : binaries)
    for (WarmBinary& binary : part) distinct.try_emplace(binary.key, std::move(binary));
  plan.tuned_shape_binaries = add_tuned_shape_binaries(index, tuned, options.box, distinct);
  for (auto& [key, binary] : distinct) plan.binaries.push_back(std::move(binary));
  return plan;
}

namespace {

/// Compiles `missing` with a pool, stores each binary that compiles and adds
/// its key to `ready`.
void compile_missing(Store& store, const DispatchIndex& index, const std::vector<const WarmBinary*>& missing,
                     const WarmOptions& options, WarmReport& report, std::set<BinaryKey>& ready,
                     const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  const SearchSpace& space = index.space();
  const Compiler compiler;
  CompilePool pool(compiler, options.jobs, {}, options.compile_in);
  report.compiled_in = pool.where();
  report.compile_threads = pool.threads();
  std::vector<std::shared_future<CompileResult>> results;
  for (const WarmBinary* binary : missing)
    results.push_back(pool.submit(compile_request(space, binary->config, binary->shape, index.target().device.arch)));
  const std::uint64_t total = report.plan.binaries.size();
  for (std::size_t i = 0; i < results.size(); ++i) {
    const CompileResult& result = results[i].get();
    if (result.key() != missing[i]->key)
      throw InternalError(fmt::format("warm: {} compiled under key {}, planned as {}", space.config_string(missing[i]->config),
                                      result.key().hash, missing[i]->key.hash));
    if (result.ok()) {
      store.put_binary(index.binary_record(result.binary()));
      ready.insert(result.key());
      ++report.compiled;
    } else {
      if (!report.failed) report.first_failure = result.failure().message;
      ++report.failed;
    }
    if (progress) progress(report.already_stored + i + 1, total);
  }
}

}  // namespace

WarmReport warm(Store& store, const DispatchIndex& index, const WarmOptions& options,
                const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  const SearchSpace& space = index.space();
  WarmReport report;
  report.plan = plan_warm(index, tuned_entries(store, space, index.target().toolchain), options);
  const std::uint64_t total = report.plan.binaries.size();

  std::set<BinaryKey> ready;
  std::vector<const WarmBinary*> missing;
  for (const WarmBinary& binary : report.plan.binaries) {
    std::optional<BinaryRecord> record = store.get_binary(binary.key.hash);
    if (record && usable_by(*record, index)) {
      ready.insert(binary.key);
      ++report.already_stored;
      if (progress) progress(report.already_stored, total);
    } else {
      missing.push_back(&binary);
    }
  }
  compile_missing(store, index, missing, options, report, ready, progress);

  store.record_warm_range(WarmRange{space.kernel_name(), space.template_hash(), space.definition_hash(),
                                    index.target().device.arch, index.target().toolchain.nvrtc_version,
                                    options.box.text(space), static_cast<std::int64_t>(report.plan.shapes()),
                                    static_cast<std::int64_t>(total), static_cast<std::int64_t>(report.failed)});
  report.coverage = check_coverage(store, index, options.box, ready, options.samples, options.seed, options.jobs);
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace mlatune
