// A space's parameter by name, for tests that read one parameter of a config.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include <gtest/gtest.h>

#include "core/space.h"

namespace mlatune {

/// The index of parameter `name` in `space`; a test failure (and 0) when the
/// space has none.
inline std::size_t parameter_index(const SearchSpace& space, const std::string& name) {
  const auto& parameters = space.parameters();
  for (std::size_t i = 0; i < parameters.size(); ++i)
    if (parameters[i].name == name) return i;
  ADD_FAILURE() << "the space has no parameter " << name;
  return 0;
}

/// Parameter `name`'s value in `config`, as the compiler sees it (the
/// integer, 0/1 for booleans, the index for names).
inline std::int64_t value_of(const SearchSpace& space, const Config& config, const std::string& name) {
  const std::size_t p = parameter_index(space, name);
  return space.parameters()[p].numeric[config.choice[p]];
}

/// Parameter `name`'s value in `config` as written in the space.
inline std::string text_of(const SearchSpace& space, const Config& config, const std::string& name) {
  const std::size_t p = parameter_index(space, name);
  return space.parameters()[p].text[config.choice[p]];
}

}  // namespace mlatune
