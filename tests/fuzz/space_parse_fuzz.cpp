// Fuzzes the search-space reader: YAML text -> SearchSpace (core/space_parse.cpp).
//
// Template paths resolve against tests/spaces, so seeds taken from there load
// their templates and reach the deeper checks.  A space that loads is then
// used the way the tuner uses it at its first default shape (count, geometry,
// bound arguments, definitions) and its text forms must read back: a space
// the reader accepts must not crash what comes after.  Reading a space must
// not take time or memory proportional to its raw size (enumeration is lazy).
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/space.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

void use(const mlatune::SearchSpace& space) {
  using mlatune::fuzz::violated;
  (void)space.definition_hash();
  (void)space.raw_count();
  const mlatune::Shape& shape = space.default_shapes().front();
  if (space.parse_shape(space.shape_string(shape)) != shape) violated("shape text round trip");
  const mlatune::Config& config = space.default_config();
  if (space.parse_config(space.config_string(config)) != config) violated("config text round trip");
  // Counting takes time proportional to the space (by design: it is exact);
  // what must stay cheap is reading the space, checked above.
  if (space.raw_count() <= 65536) {
    (void)space.count(shape);
    (void)space.most_restrictive_constraint(shape);
  }
  (void)space.check(config, shape);
  (void)space.geometry(config, shape);
  (void)space.prologue_geometry(config, shape);
  (void)space.reference_geometry(shape);
  (void)space.definitions(config, shape);
  (void)space.bind_arguments(shape);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  mlatune::fuzz::rejecting_cleanly([&] {
    mlatune::SearchSpace space = mlatune::SearchSpace::parse(
        mlatune::fuzz::as_text(data, size), "fuzz.yaml", MLATUNE_TEST_DATA_DIR "/spaces");
    use(space);
  });
  return 0;
}
