// Where a tuning sweep's results go, and what a resumed sweep need not
// measure again: one run in the store (every measurement committed as it
// comes), or nothing at all (a compile-only sweep, whose binaries reach the
// database through the compile pool).  The search loop (tuner/sweep.cpp)
// speaks only this interface.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cache/store.h"
#include "tuner/strategies/warm_start.h"
#include "tuner/sweep.h"

namespace mlatune {

/// Config text -> its best median at one shape (nullopt: it did not run
/// correctly), from earlier runs: what a resumed sweep need not measure again.
using EarlierResults = std::map<std::string, std::optional<double>>;

/// Where a sweep's results go, and what it resumes from.
class Journal {
 public:
  virtual ~Journal() = default;
  virtual std::int64_t run_id() const = 0;
  virtual EarlierResults earlier(const std::string& shape) = 0;
  /// The fastest ok median at `shape` from earlier runs (same kernel
  /// version, device and toolchain) timed with cache method `cache`: where a
  /// resumed sweep's early cut starts.  nullopt: none.
  virtual std::optional<double> earlier_best_us(const std::string& shape, CacheMode cache) = 0;
  /// The best configs held for shapes of this kernel other than `shape`, on
  /// this device, of any kernel version and toolchain (a warm start only
  /// proposes them first: tuner/strategies/warm_start.h).
  virtual std::vector<strategies::TunedText> tuned_elsewhere(const std::string& shape) = 0;
  virtual void record(const std::string& shape, const CandidateReport& candidate) = 0;
  /// Fills the best config in the record after this sweep (best_config, best_us).
  virtual void look_up_best(ShapeReport& report) = 0;
  virtual void finish(RunStatus status) = 0;
};

/// A new run in the store at `database`, for `space` on `device`, with the
/// sweep's settings (and `seed`, `source`'s origin) in its record.
std::unique_ptr<Journal> store_journal(const std::filesystem::path& database, const SearchSpace& space,
                                       const std::filesystem::path& space_file, const DeviceInfo& device,
                                       const SweepOptions& options, const MeasurementSource& source,
                                       std::uint64_t seed);

/// Records nothing and resumes from nothing.
std::unique_ptr<Journal> no_journal();

}  // namespace mlatune
