// Configs to evaluate instead of a search: the lines of `tune --configs-file`
// (every shape), or the foreign configs `cache revalidate` measures (each at
// its own shape).  The sweep (tuner/sweep.h) offers them in order through a
// Strategy that proposes exactly those valid at the shape; the others are
// reported as skipped, with the constraint that rejects them.
#pragma once
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/space.h"
#include "tuner/strategy.h"

namespace mlatune {

/// What a sweep evaluates at each shape when it does not search.
struct GivenConfigs {
  std::vector<Config> everywhere;                 // at every shape
  std::map<Shape, std::vector<Config>> at_shape;  // at one shape only, after those
  /// The configs for `shape`, each once, in order.
  std::vector<Config> at(const Shape& shape) const;
};

/// A given config that cannot run at a shape, and why.
struct SkippedConfig {
  std::string config;
  std::string reason;
};

/// A configs file as read: the configs of the space, and the lines that are
/// not (reported and skipped: a file imported from another version of the
/// space may name parameters or values this one lacks).
struct ConfigsFile {
  std::vector<Config> configs;          // each once, in file order
  std::vector<std::string> rejected;    // "file:line: why", one per bad line
};

/// One config per line in the space's config syntax ("A=1,B=x,..."); blank
/// lines and '#' comments are skipped.
ConfigsFile parse_configs_text(const SearchSpace& space, std::string_view text, const std::string& file_name);
/// The same from a file: InputError when it is missing, EnvironmentError when
/// it cannot be read.
ConfigsFile read_configs_file(const SearchSpace& space, const std::filesystem::path& file);

/// A strategy proposing `configs` in order, those `candidates` accepts at
/// `shape` (the others go to `skipped`, with the rejecting constraint; `space`
/// names them).  It learns nothing: the list is the plan.
std::unique_ptr<Strategy> given_configs_strategy(const SearchSpace& space, const SearchSpace& candidates,
                                                 const Shape& shape, const std::vector<Config>& configs,
                                                 std::vector<SkippedConfig>& skipped);

}  // namespace mlatune
