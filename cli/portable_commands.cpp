// mlatune cache export-best / import / revalidate: best configs that travel
// between databases and devices (cache/portable_configs.h; the file format is
// docs/portable-configs.md).  Export and import need no GPU; revalidate
// measures the configs of other devices and toolchains on this one.
#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "cache/portable_configs.h"
#include "cache/store.h"
#include "cli/commands.h"
#include "cli/option_checks.h"
#include "cli/tune_report.h"
#include "core/compiler.h"
#include "core/error.h"
#include "core/space.h"
#include "tuner/binary_cache.h"
#include "tuner/code_identity.h"
#include "tuner/compile_pool.h"
#include "tuner/measurement_source.h"
#include "tuner/revalidation.h"
#include "tuner/sweep.h"
#include "tuner/worker/client.h"

namespace mlatune::cli {
namespace {

struct PortableOptions {
  std::string output;
  std::string kernel;
  std::string file;
  std::string space;
  bool skip_other_versions = false;
  bool quiet = false;
  bool json = false;
  unsigned jobs = 0;
};

std::string device_text(const DeviceIdentity& d) {
  return fmt::format("{} ({}, {} SMs, {:.0f} GiB, driver {})", d.name, d.arch, d.sm_count,
                     static_cast<double>(d.memory_bytes) / (1 << 30), d.driver_version);
}

std::string toolchain_text(const ToolchainInfo& t) {
  return fmt::format("NVRTC {}, mlatune {}", t.nvrtc_version, t.mlatune_version);
}

/// Entries per device and toolchain, as "N on DEVICE with TOOLCHAIN" lines.
std::vector<std::string> origin_lines(const std::vector<PortableEntry>& entries) {
  std::map<std::string, int> counts;
  for (const PortableEntry& e : entries)
    ++counts[fmt::format("{} with {}", device_text(e.device), toolchain_text(e.toolchain))];
  std::vector<std::string> lines;
  for (const auto& [origin, n] : counts) lines.push_back(fmt::format("{} on {}", n, origin));
  return lines;
}

// ---- export-best ------------------------------------------------------------------

// The file replaces whatever --out names: never a database (a slip of
// `--out mlatune.db` would lose every measurement).
void check_output(const std::filesystem::path& output) {
  std::ifstream in(output, std::ios::binary);
  char header[16] = {};
  if (in && in.read(header, sizeof header) && std::equal(header, header + 16, "SQLite format 3"))
    throw InputError(fmt::format("--out {} is an SQLite database, which the export would overwrite; expected "
                                 "a .json file",
                                 output.string()));
}

/// Writes the code identity (tuner/code_identity.h) of every entry of
/// `space`'s current version into `entries`, compiling each with NVRTC (a
/// stored binary has no PTX).  Prints what it did and which entries have none.
void add_code_identities(const SearchSpace& space, unsigned jobs, std::vector<PortableEntry>& entries) {
  const KernelInfo current{space.kernel_name(), space.template_hash(), space.definition_hash()};
  std::vector<PortableEntry*> mine;
  std::vector<CodeSubject> subjects;
  for (PortableEntry& e : entries)
    if (e.kernel == current) {
      mine.push_back(&e);
      subjects.push_back({e.shape, e.config, e.device.arch});
    }
  if (mine.empty()) {
    fmt::print(stderr, "mlatune: no entry is of {}'s current version (template {}): no code identities written\n",
               space.kernel_name(), space.template_hash());
    return;
  }
  const Compiler compiler;
  CompilePool pool(compiler, jobs, {}, CompileIn::threads);
  const std::vector<CodeIdentity> identities = code_identities(space, subjects, pool);
  std::size_t written = 0;
  for (std::size_t i = 0; i < mine.size(); ++i) {
    if (identities[i].ok()) {
      mine[i]->code = identities[i].hash;
      ++written;
    } else {
      fmt::print(stderr, "mlatune: no code identity for {} at {}: {}\n", mine[i]->config, mine[i]->shape,
                 identities[i].refusal);
    }
  }
  fmt::print("code identities of {} of {} entr(ies) of {} ({} binaries compiled with NVRTC {})\n", written,
             mine.size(), space.kernel_name(), pool.stats().compiled, compiler.version());
}

void export_best(const std::string& db, const PortableOptions& o) {
  check_output(o.output);
  PortableConfigs configs;
  {
    Store store = Store::open(database_path(db), StoreMode::read_only);
    configs.entries = store.export_best(o.kernel);
    if (configs.entries.empty())
      throw InputError(fmt::format("no best entries{} in {}: nothing to export",
                                   o.kernel.empty() ? "" : " of kernel " + o.kernel, store.path().string()));
  }
  if (!o.space.empty()) add_code_identities(SearchSpace::load(o.space), o.jobs, configs.entries);
  write_portable_file(o.output, configs);
  std::set<std::string> kernels;
  for (const PortableEntry& e : configs.entries) kernels.insert(e.kernel.name);
  fmt::print("wrote {} best config(s) of {} kernel(s) to {} (no binaries):\n", configs.entries.size(),
             kernels.size(), o.output);
  for (const std::string& line : origin_lines(configs.entries)) fmt::print("  {}\n", line);
}

// ---- import -----------------------------------------------------------------------

/// Whether the device an entry names could have run its config: not when
/// the config needs an architecture that device lacks (`requires:`), which
/// only a hand-edited file can claim.  Such an entry is said on stderr.
bool runnable_where_measured(const SearchSpace& space, const PortableEntry& entry) {
  const SearchSpace there = space.for_device(entry.device.arch);
  const Validity validity = there.check(there.parse_config(entry.config), there.parse_shape(entry.shape));
  if (validity) return true;
  fmt::print(stderr, "mlatune: skipped {} at {} on {}: {}\n", entry.config, entry.shape, entry.device.name,
             validity.failed_constraint);
  return false;
}

/// The entries of other versions that carry over to `space`'s current one
/// (same code identity: tuner/code_identity.h), each compiled here (into a
/// database that exists, the binaries are stored for `cache warm` and the
/// dispatcher).  InputError naming the first that does not, unless
/// `skip_other_versions`.
std::vector<PortableEntry> carried_entries(const SearchSpace& space, const std::filesystem::path& database,
                                           const PortableOptions& o, const std::vector<PortableEntry>& others,
                                           std::size_t current_count) {
  if (others.empty()) return {};
  // Only entries with an identity are compiled (carry_over); into a
  // database that exists, their binaries are stored for `cache warm` and
  // the dispatcher (a new one is made only by a successful import, below);
  // none is looked up there, since a stored binary has no PTX.
  const bool any_code = std::any_of(others.begin(), others.end(), [](const PortableEntry& e) { return e.code; });
  const Compiler compiler;
  std::error_code ec;
  std::optional<StoreBinaryCache> cache;
  BinaryCacheHooks hooks;
  if (any_code && std::filesystem::exists(database, ec)) {
    cache.emplace(database, space.kernel_name(), space.template_hash());
    hooks.store = cache->hooks().store;
  }
  CompilePool pool(compiler, o.jobs, std::move(hooks), CompileIn::threads);
  if (any_code) {
    fmt::print("{} entr(ies) of other versions of {}: compiling their configs under this version to compare their "
               "code (NVRTC {}, {} thread(s))\n",
               others.size(), space.kernel_name(), compiler.version(), pool.threads());
    std::fflush(stdout);
  }
  const CarryOver carry = carry_over(space, others, pool);
  if (!carry.refused.empty()) {
    const auto& [first, why] = carry.refused.front();
    const std::string what = fmt::format(
        "{} of {} entr(ies) of other versions of {} do not carry over to this one (template {}, definitions {}); "
        "the first: {} at {} (template {}, definitions {}): {}",
        carry.refused.size(), others.size(), space.kernel_name(), space.template_hash(), space.definition_hash(),
        first.config, first.shape, first.kernel.template_hash, first.kernel.definition_hash, why);
    if (!o.skip_other_versions)
      throw InputError(SourceLocation{o.file},
                       fmt::format("{}. A config may not mean or run the same under another version, so no time of "
                                   "them is imported (--skip-other-versions imports the other {}, {} of them "
                                   "carried over; re-measure these with `mlatune tune --configs-file`)",
                                   what, current_count + carry.carried.size(), carry.carried.size()));
    fmt::print(stderr, "mlatune: {}; left out (--skip-other-versions)\n", what);
  }
  if (!carry.carried.empty())
    fmt::print("carried over {} of {} entr(ies) of other versions of {} to this one (template {}, definitions {}): "
               "at its shape each compiles to the same code and launches the same way as when it was measured\n",
               carry.carried.size(), others.size(), space.kernel_name(), space.template_hash(),
               space.definition_hash());
  return carry.carried;
}

void import_file(const std::string& db, const PortableOptions& o) {
  const SearchSpace space = SearchSpace::load(o.space);
  const PortableConfigs configs = read_portable_file(o.file);
  const KernelInfo current{space.kernel_name(), space.template_hash(), space.definition_hash()};
  const std::filesystem::path database = database_path(db);
  const VersionSplit split = split_by_version(configs, current);
  std::vector<PortableEntry> entries = split.current;
  for (PortableEntry& e : carried_entries(space, database, o, split.other, split.current.size()))
    entries.push_back(std::move(e));
  if (entries.empty())
    throw InputError(SourceLocation{o.file},
                     fmt::format("no entry of kernel {} at this version (template {}, definitions {}){}",
                                 current.name, current.template_hash, current.definition_hash,
                                 split.other.empty() ? "" : " or carried over to it"));
  std::erase_if(entries, [&](const PortableEntry& e) { return !runnable_where_measured(space, e); });
  Store store = Store::open(database, StoreMode::read_write);
  const ImportCounts counts = store.import_best(entries, std::filesystem::absolute(o.file).string());
  fmt::print("imported {} into {}: {} entr(ies) of {} added, {} already there; {} best entr(ies) changed\n", o.file,
             store.path().string(), counts.added, space.kernel_name(), counts.present, counts.best_changed);
  for (const std::string& line : origin_lines(entries)) fmt::print("  {}\n", line);
  if (const std::size_t others = configs.entries.size() - entries.size(); others > 0)
    fmt::print("  {} entr(ies) of other kernels or kernel versions not imported\n", others);
  fmt::print("the dispatcher uses an entry as tuned only on the device and toolchain it names (elsewhere as "
             "guidance); `mlatune cache revalidate --space {}` measures the others on this GPU\n",
             o.space);
}

// ---- revalidate ---------------------------------------------------------------------

/// This GPU, as the worker process sees it; EnvironmentError without one.
DeviceInfo gpu_or_fail(Worker& worker) {
  const DeviceReport report = worker.probe_device();
  if (!report.usable)
    throw EnvironmentError(fmt::format("revalidate measures configs on this GPU, and there is none ({})", report.reason));
  return report.device.info();
}

/// What became of a foreign config here: its time, its failure, or why it
/// was not evaluated now.
std::string result_here(const SweepReport& report, const ForeignEntry& e) {
  for (const ShapeReport& s : report.shapes) {
    if (s.shape != e.shape) continue;
    for (const CandidateReport& c : s.results)
      if (c.config == e.config)
        return c.outcome == Outcome::ok && c.timing ? fmt::format("{:.2f} us", c.timing->median_us)
                                                    : std::string(to_string(c.outcome));
    for (const SkippedConfig& k : s.skipped)
      if (k.config == e.config) return "invalid here (" + k.reason + ")";
  }
  return "measured here earlier";
}

void print_revalidation(const RevalidationPlan& plan, const SweepReport& report) {
  fmt::print("\nrevalidated {} foreign best config(s):\n", plan.foreign.size());
  for (const ForeignEntry& e : plan.foreign)
    fmt::print("  {}  {}\n    there: {:.2f} us on {} with {}; here: {}\n", e.shape, e.config, e.median_us,
               device_text(e.device), toolchain_text(e.toolchain), result_here(report, e));
}

void revalidate(const std::string& db, const PortableOptions& o) {
  const SearchSpace space = SearchSpace::load(o.space);
  const std::filesystem::path database = database_path(db);
  Worker worker;
  const DeviceInfo device = gpu_or_fail(worker);
  RevalidationPlan plan;
  {
    Store store = Store::open(database, StoreMode::read_only);
    plan = plan_revalidation(store, space, device.identity(), ToolchainInfo::current());
  }
  for (const std::string& line : plan.unreadable) fmt::print(stderr, "mlatune: skipped {}\n", line);
  if (plan.foreign.empty()) {
    fmt::print("nothing to revalidate: every best entry of {} in {} was measured on this device with this "
               "toolchain\n",
               space.kernel_name(), database.string());
    return;
  }
  SweepOptions sweep;
  sweep.shapes = plan.shapes;
  sweep.given = plan.given;
  sweep.arch = parse_architecture(device.arch);
  sweep.jobs = o.jobs;
  // Revalidation is for validating: every imported config on every input
  // set, even one the early cut ends.
  sweep.timing.validate_first = true;
  std::optional<ProgressPrinter> printer;
  if (!o.quiet) {
    printer.emplace(::isatty(STDERR_FILENO) == 1);
    sweep.progress = [&printer](const SweepProgress& p) { printer->update(p); };
  }
  // A foreign config that needs an architecture this GPU lacks is reported invalid here.
  SweepReport report = run_sweep(space.for_device(device.arch), o.space, database, &worker, device, sweep);
  if (printer) printer->finish();
  const SweepSummary summary{space.kernel_name(), device, database, false, sweep.cutoff_factor,
                             sweep.timing.cut_min_samples, sweep.timing.budget_ms};
  print_sweep_text(report, summary);
  print_revalidation(plan, report);
}

}  // namespace

void add_portable_commands(CLI::App& cache, std::shared_ptr<const std::string> db) {
  auto options = std::make_shared<PortableOptions>();

  CLI::App* export_cmd = cache.add_subcommand(
      "export-best", "Write the best configs as a portable JSON file (docs/portable-configs.md; no binaries)");
  export_cmd->add_option("--out,-o", options->output, "File to write, e.g. best.json")->required();
  export_cmd->add_option("--kernel", options->kernel, "Only this kernel (default: every kernel)");
  export_cmd->add_option("--space", options->space,
                         "Also write the code identity of each entry of this space's current version (its code "
                         "and launch, hashed; compiled with NVRTC), so that the entry carries over to later "
                         "versions whose code for it is the same");
  export_cmd->add_option("--jobs,-j", options->jobs, "compile threads for --space (default: one per core)")
      ->check(whole_number(0, 1024));
  export_cmd->callback([options, db] { export_best(*db, *options); });

  CLI::App* import_cmd = cache.add_subcommand(
      "import", "Add the best configs of a portable file to the database (created if needed); idempotent");
  import_cmd->add_option("file", options->file, "The file `cache export-best` wrote")->required();
  import_cmd->add_option("--space", options->space,
                         "The space file of the kernel to import: entries of another template or definition "
                         "version are refused, unless the file gives their code identity and it is the same under "
                         "this version (compiled here with NVRTC)")
      ->required();
  import_cmd->add_flag("--skip-other-versions", options->skip_other_versions,
                       "Import the entries of the space's current version (and those that carry over to it) and "
                       "leave the others out");
  import_cmd->add_option("--jobs,-j", options->jobs,
                         "compile threads for carrying entries over (default: one per core)")
      ->check(whole_number(0, 1024));
  import_cmd->callback([options, db] { import_file(*db, *options); });

  CLI::App* revalidate_cmd = cache.add_subcommand(
      "revalidate", "Measure on this GPU the best configs of other devices and toolchains (needs a GPU)");
  revalidate_cmd->add_option("--space", options->space, "The space file of the kernel")->required();
  revalidate_cmd->add_flag("--quiet,-q", options->quiet, "no progress lines");
  revalidate_cmd->add_option("--jobs,-j", options->jobs, "compile threads (default: one per core)")
      ->check(whole_number(0, 1024));
  revalidate_cmd->callback([options, db] { revalidate(*db, *options); });
}

}  // namespace mlatune::cli
