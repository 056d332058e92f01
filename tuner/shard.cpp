#include "tuner/shard.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include <fmt/format.h>

#include "core/error.h"
#include "tuner/strategies/registry.h"

namespace mlatune {
namespace {

// More shards than this is a typo, not a cluster.
constexpr std::uint64_t max_shards = 1'000'000;

/// A whole number written with digits only; nullopt for anything else
/// (signs, spaces, overflow), so that "-1" is never read as 2^64 - 1.
std::optional<std::uint64_t> whole_number(std::string_view text) {
  if (text.empty() || !std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c); }))
    return std::nullopt;
  std::uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

void check_shard(const Shard& shard, const std::string& what) {
  if (shard.count == 0) throw InputError(fmt::format("{}: the shard count must be at least 1", what));
  if (shard.count > max_shards)
    throw InputError(fmt::format("{}: {} shards is more than the {} allowed", what, shard.count, max_shards));
  if (shard.index >= shard.count)
    throw InputError(fmt::format("{}: shard {} is not below the shard count {} (shards are numbered from 0: "
                                 "0/{} .. {}/{})",
                                 what, shard.index, shard.count, shard.count, shard.count - 1, shard.count));
}

/// A Slurm variable that must be a whole number when set.
std::optional<std::uint64_t> slurm_number(const Environment& environment, const char* name) {
  const char* value = environment(name);
  if (!value) return std::nullopt;
  std::optional<std::uint64_t> number = whole_number(value);
  if (!number) throw InputError(fmt::format("{}='{}' is not a whole number", name, value));
  return number;
}

}  // namespace

Shard parse_shard(std::string_view text) {
  const std::string what = fmt::format("--shard '{}'", text);
  const std::size_t slash = text.find('/');
  if (slash == std::string_view::npos)
    throw InputError(fmt::format("{}: expected I/N, e.g. 0/4 (shard I of N, numbered from 0)", what));
  std::optional<std::uint64_t> index = whole_number(text.substr(0, slash));
  std::optional<std::uint64_t> count = whole_number(text.substr(slash + 1));
  if (!index)
    throw InputError(fmt::format("{}: the shard index '{}' is not a whole number", what, text.substr(0, slash)));
  if (!count)
    throw InputError(fmt::format("{}: the shard count '{}' is not a whole number", what, text.substr(slash + 1)));
  Shard shard{*index, *count};
  check_shard(shard, what);
  return shard;
}

std::optional<ShardChoice> shard_from_slurm(const Environment& environment) {
  std::optional<std::uint64_t> id = slurm_number(environment, "SLURM_ARRAY_TASK_ID");
  std::optional<std::uint64_t> count = slurm_number(environment, "SLURM_ARRAY_TASK_COUNT");
  if (!id || !count) return std::nullopt;
  const std::uint64_t min = slurm_number(environment, "SLURM_ARRAY_TASK_MIN").value_or(0);
  const std::uint64_t step = slurm_number(environment, "SLURM_ARRAY_TASK_STEP").value_or(1);
  const std::string what = fmt::format("SLURM_ARRAY_TASK_ID={}, SLURM_ARRAY_TASK_COUNT={}, SLURM_ARRAY_TASK_MIN={}",
                                       *id, *count, min);
  if (*id < min || step == 0 || (*id - min) % step != 0)
    throw InputError(fmt::format("{}: the task id is not one of the array's evenly spaced ids; use an array "
                                 "such as --array=0-{}, or give --shard I/N",
                                 what, *count == 0 ? 0 : *count - 1));
  Shard shard{(*id - min) / step, *count};
  check_shard(shard, fmt::format("{} (use an array such as --array=0-{}, or give --shard I/N)", what,
                                 *count == 0 ? 0 : *count - 1));
  return ShardChoice{shard, fmt::format("from {}", what)};
}

ShardSplit shard_split(StrategyKind strategy) {
  return strategy.entry().adapts ? ShardSplit::shapes : ShardSplit::configs;
}

bool shard_needs_seed(StrategyKind strategy) { return strategy.entry().seeded; }

// Offset by the shape index, so that shapes with fewer candidates than
// shards do not all land on shard 0.
bool shard_owns_candidate(const Shard& shard, std::size_t shape_index, std::uint64_t position) {
  return (position % shard.count + shape_index % shard.count) % shard.count == shard.index;
}

std::uint64_t shard_candidate_count(const Shard& shard, std::size_t shape_index, std::uint64_t positions) {
  // The first position this shard owns, then every count-th.
  const std::uint64_t offset = shape_index % shard.count;
  const std::uint64_t first = (shard.index + shard.count - offset) % shard.count;
  return positions > first ? (positions - first + shard.count - 1) / shard.count : 0;
}

bool shard_owns_shape(const Shard& shard, std::size_t shape_index) {
  return shape_index % shard.count == shard.index;
}

std::string to_string(const Shard& shard) { return fmt::format("{}/{}", shard.index, shard.count); }

}  // namespace mlatune
