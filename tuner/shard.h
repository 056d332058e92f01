// A shard of a sweep: one of N processes (job-array tasks, hosts) that each
// tune a deterministic share of the same sweep into their own database, to be
// combined afterwards with `mlatune cache merge`.
//
// What a share is depends on the strategy.  A strategy that ignores the
// measurements (brute force, random) proposes the same sequence of configs at
// a shape in every shard (given the same seed), so the shards split that
// sequence: shard I evaluates the candidates at positions p with
// (p + shape index) mod N == I.  The union over the shards is then exactly
// what one unsharded sweep evaluates, with no overlap, budget included.
// A strategy that adapts to the measurements (annealing, model) cannot be
// split that way (each shard would see only its own measurements and search
// differently), so the shards split whole shapes instead: shard I takes the
// shapes at indices i with i mod N == I and runs the unsharded search there.
// Shards are numbered from 0, as `sbatch --array=0-(N-1)` numbers its tasks.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "tuner/strategy.h"

namespace mlatune {

/// Shard `index` of `count` (0 <= index < count).
struct Shard {
  std::uint64_t index = 0;
  std::uint64_t count = 1;
  bool operator==(const Shard&) const = default;
};

/// "I/N": digits only, N >= 1, I < N; an InputError that says which part is
/// wrong otherwise.
Shard parse_shard(std::string_view text);

/// A shard and where it came from ("--shard", or the Slurm variables).
struct ShardChoice {
  Shard shard;
  std::string source;
};

/// Reads an environment variable; nullptr when unset.
using Environment = std::function<const char*(const char* name)>;

/// The shard of a Slurm job-array task, from SLURM_ARRAY_TASK_ID,
/// SLURM_ARRAY_TASK_COUNT, SLURM_ARRAY_TASK_MIN and SLURM_ARRAY_TASK_STEP
/// (index = (ID - MIN) / STEP, so --array=1-8 and --array=0-14:2 work too);
/// nullopt when ID or COUNT is unset.  InputError for values that do not
/// make one shard of COUNT evenly spaced tasks (e.g. --array=1,4,9).
std::optional<ShardChoice> shard_from_slurm(const Environment& environment);

/// How shards split a sweep with this strategy.
enum class ShardSplit {
  configs,  // the candidate sequence at every shape
  shapes,   // whole shapes
};
ShardSplit shard_split(StrategyKind strategy);

/// Whether the strategy's proposals depend on the seed, so that every shard
/// must be given the same --seed to propose the same sequence.
bool shard_needs_seed(StrategyKind strategy);

/// Whether `shard` evaluates the candidate at `position` (0-based, in the
/// sweep's candidate sequence) of the shape at `shape_index`.
bool shard_owns_candidate(const Shard& shard, std::size_t shape_index, std::uint64_t position);

/// How many of the positions 0 .. positions-1 at `shape_index` it evaluates.
std::uint64_t shard_candidate_count(const Shard& shard, std::size_t shape_index, std::uint64_t positions);

/// Whether `shard` takes the shape at `shape_index` (ShardSplit::shapes).
bool shard_owns_shape(const Shard& shard, std::size_t shape_index);

/// "3/8".
std::string to_string(const Shard& shard);

}  // namespace mlatune
