// Fuzzes the text forms a user types: `--shape B=2,T=32,...` (parse_shape)
// and `--config ALGORITHM=absorbed,...` (parse_config), both against the
// shipped flagship space.  Whatever parses must print back to text that
// parses to the same value.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/space.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

const mlatune::SearchSpace& space() {
  static const mlatune::SearchSpace s = mlatune::SearchSpace::load(
      MLATUNE_TEST_DATA_DIR "/../search_spaces/fused_mla_attention.yaml");
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using mlatune::fuzz::violated;
  const std::string_view text = mlatune::fuzz::as_text(data, size);
  const mlatune::SearchSpace& s = space();
  mlatune::fuzz::rejecting_cleanly([&] {
    mlatune::Shape shape = s.parse_shape(text);
    if (s.parse_shape(s.shape_string(shape)) != shape) violated("shape text round trip");
  });
  mlatune::fuzz::rejecting_cleanly([&] {
    mlatune::Config config = s.parse_config(text);
    if (s.parse_config(s.config_string(config)) != config) violated("config text round trip");
  });
  return 0;
}
