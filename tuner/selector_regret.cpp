#include "tuner/selector_regret.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "core/error.h"

namespace mlatune {

namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

/// A copy of the database in the temporary directory, removed (with its
/// write-ahead files) when this goes out of scope.
class TemporaryCopy {
 public:
  explicit TemporaryCopy(Store& original) {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::temp_directory_path() /
            fmt::format("mlatune_regret_{}_{}.db", getpid(), counter.fetch_add(1));
    remove();
    original.copy_to(path_);
  }
  ~TemporaryCopy() { remove(); }
  TemporaryCopy(const TemporaryCopy&) = delete;
  TemporaryCopy& operator=(const TemporaryCopy&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  void remove() noexcept {
    std::error_code ec;
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path_.string() + suffix, ec);
  }
  std::filesystem::path path_;
};

/// The device's best entries of this kernel version and toolchain, by shape.
std::map<Shape, BestRecord> tuned_on(Store& store, const SearchSpace& space, const DeviceIdentity& device,
                                     const ToolchainInfo& toolchain) {
  const KernelInfo kernel{space.kernel_name(), space.template_hash(), space.definition_hash()};
  std::map<Shape, BestRecord> tuned;
  for (BestRecord& record : store.all_best()) {
    if (!(record.kernel == kernel) || !(record.device == device) || !(record.toolchain == toolchain)) continue;
    try {
      Shape shape = space.parse_shape(record.entry.shape);
      tuned.emplace(std::move(shape), std::move(record));
    } catch (const InputError&) {
      continue;  // the index ignores it too
    }
  }
  return tuned;
}

std::vector<Shape> held_out_shapes(const std::map<Shape, BestRecord>& tuned, const Holdout& holdout,
                                   const SearchSpace& space) {
  std::vector<Shape> held;
  if (holdout.every) {
    std::uint64_t position = 0;
    for (const auto& [shape, record] : tuned)
      if (++position % holdout.every == 0) held.push_back(shape);
    return held;
  }
  for (const Shape& shape : holdout.shapes) {
    if (!tuned.count(shape))
      throw InputError(fmt::format("held-out shape {} has no tuned entry on this device", space.shape_string(shape)));
    held.push_back(shape);
  }
  std::sort(held.begin(), held.end());
  held.erase(std::unique(held.begin(), held.end()), held.end());
  return held;
}

/// The fastest ok measurement of `config` at `shape` for this kernel
/// version, device and toolchain.
std::optional<double> fastest_measurement(Store& store, const SearchSpace& space, const DeviceIdentity& device,
                                          const ToolchainInfo& toolchain, const std::string& shape,
                                          const std::string& config) {
  const KernelInfo kernel{space.kernel_name(), space.template_hash(), space.definition_hash()};
  std::optional<double> fastest;
  for (const MeasurementRecord& r : store.measurements(MeasurementFilter{space.kernel_name(), shape})) {
    const Measurement& m = r.measurement;
    if (!(r.kernel == kernel) || !(r.device == device) || !(r.toolchain == toolchain)) continue;
    if (m.outcome != Outcome::ok || !m.timing || m.config != config) continue;
    if (!fastest || m.timing->median_us < *fastest) fastest = m.timing->median_us;
  }
  return fastest;
}

}  // namespace

Holdout parse_holdout_every(std::string_view text) {
  text = trim(text);
  constexpr std::string_view prefix = "every:";
  std::uint64_t every = 0;
  if (text.substr(0, prefix.size()) == prefix) {
    std::string_view digits = text.substr(prefix.size());
    auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), every);
    if (digits.empty() || error != std::errc() || end != digits.data() + digits.size()) every = 0;
  }
  if (every == 0) throw InputError(fmt::format("--holdout '{}': expected every:N with N a positive integer", text));
  return Holdout{every, {}};
}

std::vector<Shape> read_shape_file(const SearchSpace& space, const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) throw InputError(fmt::format("{}: cannot read the shape file", file.string()));
  std::vector<Shape> shapes;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    std::string_view text = trim(std::string_view(line).substr(0, line.find('#')));
    if (text.empty()) continue;
    try {
      shapes.push_back(space.parse_shape(text));
    } catch (const InputError& e) {
      throw InputError(fmt::format("{}:{}: {}", file.string(), number, e.what()));
    }
  }
  if (shapes.empty()) throw InputError(fmt::format("{}: no shape in the file", file.string()));
  return shapes;
}

RegretSummary summarize(const std::vector<const RegretRow*>& rows) {
  RegretSummary summary;
  summary.rows = rows.size();
  double log_sum = 0;
  for (const RegretRow* row : rows) {
    std::optional<double> regret = row->regret();
    if (!regret) continue;
    ++summary.measured;
    log_sum += std::log(*regret);
    if (*regret > summary.worst) {
      summary.worst = *regret;
      summary.worst_shape = row->shape;
    }
  }
  if (summary.measured) summary.geomean = std::exp(log_sum / static_cast<double>(summary.measured));
  return summary;
}

RegretReport selector_regret(const std::filesystem::path& database, const SearchSpace& space,
                             const DeviceInfo& device, const Holdout& holdout) {
  const ToolchainInfo toolchain = ToolchainInfo::current();
  Store original = Store::open(database, StoreMode::read_only);
  const std::map<Shape, BestRecord> tuned = tuned_on(original, space, device.identity(), toolchain);
  if (tuned.empty())
    throw InputError(fmt::format("{} has no tuned entry of {} (this template and definitions) on {} with NVRTC {}",
                                 database.string(), space.kernel_name(), device.name, toolchain.nvrtc_version));
  RegretReport report;
  report.device = device.identity();
  report.tuned = tuned.size();
  const std::vector<Shape> held = held_out_shapes(tuned, holdout, space);
  report.kept = tuned.size() - held.size();

  TemporaryCopy copy(original);
  Store without = Store::open(copy.path(), StoreMode::read_write);
  std::vector<std::string> held_text;
  for (const Shape& shape : held) held_text.push_back(space.shape_string(shape));
  const std::optional<std::int64_t> kernel_id =
      without.find_kernel(KernelInfo{space.kernel_name(), space.template_hash(), space.definition_hash()});
  if (!kernel_id) throw InternalError("the copy of the database lacks the kernel its original has");
  without.remove_best(*kernel_id, held_text);
  const DispatchIndex index = DispatchIndex::build(without, space, DispatchTarget{device, toolchain});

  for (const Shape& shape : held) {
    const BestRecord& best = tuned.at(shape);
    RegretRow row{shape, index.choose(shape), best.entry.config, best.entry.median_us, std::nullopt};
    if (row.choice.ok())
      row.chosen_us = fastest_measurement(original, space, device.identity(), toolchain, best.entry.shape,
                                          row.choice.config_text);
    report.rows.push_back(std::move(row));
  }
  std::vector<const RegretRow*> all;
  std::map<ChoiceReason, std::vector<const RegretRow*>> grouped;
  for (const RegretRow& row : report.rows) {
    all.push_back(&row);
    grouped[row.choice.reason].push_back(&row);
  }
  report.overall = summarize(all);
  for (const auto& [reason, rows] : grouped) report.by_reason[reason] = summarize(rows);
  return report;
}

}  // namespace mlatune
