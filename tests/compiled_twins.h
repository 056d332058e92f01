// A sample of configs compiled beside their twins (the same config with one
// parameter at another value), with PTX kept: for the template tests that
// compare what two values of a parameter compile to, without a GPU.
#pragma once
#include <cstddef>
#include <cstdint>
#include <future>
#include <random>
#include <string>
#include <vector>

#include "core/compiler.h"
#include "core/space.h"
#include "tests/covering_sample.h"
#include "tests/named_shape.h"
#include "tuner/compile_pool.h"

namespace mlatune {

struct CompiledTwins {
  std::string shape_name;  // the NamedShape's name
  Config config;
  std::string text;        // the config's string
  std::shared_future<CompileResult> compiled, twin;
};

/// For every shape, covering_sample(sample, shape, per_shape, rng): each
/// config (drawn from `sample`, a restriction of `space`) and its twin with
/// parameter `parameter` at value index `twin_value`, submitted to `pool`
/// for sm_90 with PTX kept.
inline std::vector<CompiledTwins> compile_twins(CompilePool& pool, const SearchSpace& space,
                                                const SearchSpace& sample, const std::vector<NamedShape>& shapes,
                                                std::size_t per_shape, std::size_t parameter,
                                                std::uint32_t twin_value, std::mt19937_64& rng) {
  std::vector<CompiledTwins> twins;
  for (const NamedShape& named : shapes) {
    const Shape shape = space.parse_shape(named.text);
    for (const Config& config : covering_sample(sample, shape, per_shape, rng)) {
      CompileRequest request = compile_request(space, config, shape, "sm_90");
      request.keep_ptx = true;
      Config other = config;
      other.choice[parameter] = twin_value;
      CompileRequest twin = compile_request(space, other, shape, "sm_90");
      twin.keep_ptx = true;
      twins.push_back({named.name, config, space.config_string(config), pool.submit(std::move(request)),
                       pool.submit(std::move(twin))});
    }
  }
  return twins;
}

}  // namespace mlatune
