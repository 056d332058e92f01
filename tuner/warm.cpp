#include "tuner/warm.h"

#include <algorithm>
#include <chrono>
#include <exception>
#include <future>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "core/compiler.h"
#include "core/error.h"
#include "tuner/compile_pool.h"

namespace mlatune {

namespace {

bool runs_at(const SearchSpace& space, const Config& config, const Shape& shape) {
  return space.check(config, shape).valid && space.geometry(config, shape).valid();
}

/// What one probing thread found.
struct ProbeFindings {
  std::map<BinaryKey, WarmBinary> binaries;
  std::map<ChoiceReason, std::uint64_t> reasons;

  void add(const BinaryKey& key, const Config& config, const Shape& shape) {
    binaries.try_emplace(key, WarmBinary{key, config, shape});
  }
  void merge(ProbeFindings&& other) {
    binaries.merge(other.binaries);
    for (const auto& [reason, count] : other.reasons) reasons[reason] += count;
  }
};

/// Probes shapes first, first + stride, ... of the plan.
ProbeFindings probe(const DispatchIndex& index, const ProbePlan& plan, const std::vector<Config>& standing,
                    std::uint64_t first, std::uint64_t stride) {
  const SearchSpace& space = index.space();
  const std::string& arch = index.target().device.arch;
  const Compiler compiler;
  ProbeFindings found;
  for (std::uint64_t i = first; i < plan.count(); i += stride) {
    const Shape shape = plan.shape(i);
    Choice choice = index.choose(shape);
    ++found.reasons[choice.reason];
    if (choice.ok()) found.add(choice.binary, choice.config, shape);
    for (const Config& config : standing)
      if (runs_at(space, config, shape))
        found.add(compiler.key(compile_request(space, config, shape, arch)), config, shape);
  }
  return found;
}

unsigned thread_count(unsigned jobs) {
  if (jobs) return jobs;
  return std::max(1u, std::thread::hardware_concurrency());
}

bool stored_for(const BinaryRecord& record, const DispatchIndex& index) {
  const DispatchTarget& target = index.target();
  return record.arch == target.device.arch && record.nvrtc_version == target.toolchain.nvrtc_version &&
         record.kernel_name == index.space().kernel_name() &&
         record.template_hash == index.space().template_hash() && !record.cubin.empty();
}

}  // namespace

std::vector<Config> standing_configs(const SearchSpace& space) {
  std::vector<Config> configs{space.default_config()};
  return configs;
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
      tuned.shapes.push_back(space.parse_shape(record.entry.shape));
      configs.insert(space.parse_config(record.entry.config));
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
  const SearchSpace& space = index.space();
  const std::vector<Config> standing = standing_configs(space);
  std::set<Config> candidates(tuned.configs.begin(), tuned.configs.end());
  candidates.insert(standing.begin(), standing.end());
  WarmPlan plan;
  plan.probes = plan_probes(space, options.box, {candidates.begin(), candidates.end()}, tuned.shapes,
                            options.max_probe_shapes);

  const unsigned threads = static_cast<unsigned>(
      std::min<std::uint64_t>(thread_count(options.jobs), std::max<std::uint64_t>(1, plan.probes.count())));
  std::vector<std::future<ProbeFindings>> parts;
  for (unsigned t = 0; t < threads; ++t)
    parts.push_back(std::async(std::launch::async, probe, std::cref(index), std::cref(plan.probes),
                               std::cref(standing), std::uint64_t{t}, std::uint64_t{threads}));
  ProbeFindings all;
  for (auto& part : parts) all.merge(part.get());  // rethrows a thread's exception
  for (auto& [key, binary] : all.binaries) plan.binaries.push_back(std::move(binary));
  plan.reasons = std::move(all.reasons);
  return plan;
}

WarmReport warm(Store& store, const DispatchIndex& index, const WarmOptions& options,
                const std::function<void(std::uint64_t, std::uint64_t)>& progress) {
  const auto start = std::chrono::steady_clock::now();
  const SearchSpace& space = index.space();
  const std::string& arch = index.target().device.arch;
  WarmReport report;
  report.plan = plan_warm(index, tuned_entries(store, space, index.target().toolchain), options);
  const std::uint64_t total = report.plan.binaries.size();

  std::vector<const WarmBinary*> missing;
  for (const WarmBinary& binary : report.plan.binaries) {
    std::optional<BinaryRecord> record = store.get_binary(binary.key.hash);
    if (record && stored_for(*record, index)) {
      ++report.already_stored;
      if (progress) progress(report.already_stored, total);
    } else {
      missing.push_back(&binary);
    }
  }

  const Compiler compiler;
  CompilePool pool(compiler, options.jobs);
  std::vector<std::shared_future<CompileResult>> results;
  for (const WarmBinary* binary : missing)
    results.push_back(pool.submit(compile_request(space, binary->config, binary->shape, arch)));
  for (std::size_t i = 0; i < results.size(); ++i) {
    const CompileResult& result = results[i].get();
    if (result.key() != missing[i]->key)
      throw InternalError(fmt::format("warm: {} compiled under key {}, planned as {}", space.config_string(missing[i]->config),
                                      result.key().hash, missing[i]->key.hash));
    if (result.ok()) {
      store.put_binary(index.binary_record(result.binary()));
      ++report.compiled;
    } else {
      if (!report.failed) report.first_failure = result.failure().message;
      ++report.failed;
    }
    if (progress) progress(report.already_stored + i + 1, total);
  }

  store.record_warm_range(WarmRange{space.kernel_name(), space.template_hash(), space.definition_hash(), arch,
                                    index.target().toolchain.nvrtc_version, options.box.text(space),
                                    static_cast<std::int64_t>(report.plan.probes.count()),
                                    static_cast<std::int64_t>(total), static_cast<std::int64_t>(report.failed)});
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

}  // namespace mlatune
