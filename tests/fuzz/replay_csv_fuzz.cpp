// Fuzzes the replay data reader (tuner/replay.cpp): parse_csv on arbitrary
// text and, when it splits, ReplayData::parse of the same text against the
// shipped flagship space (the space tests/data/h200_sweeps.csv was recorded
// with).  Rows must keep the line they start on within the text.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/space.h"
#include "tests/fuzz/fuzz_common.h"
#include "tuner/replay.h"

namespace {

const mlatune::SearchSpace& space() {
  static const mlatune::SearchSpace s = mlatune::SearchSpace::load(
      MLATUNE_TEST_DATA_DIR "/../search_spaces/fused_mla_attention.yaml");
  return s;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text = mlatune::fuzz::as_text(data, size);
  const auto lines = 1 + std::count(text.begin(), text.end(), '\n');
  mlatune::fuzz::rejecting_cleanly([&] {
    for (const mlatune::CsvRow& row : mlatune::parse_csv(text, "fuzz.csv"))
      if (row.line < 1 || row.line > lines || row.fields.empty())
        mlatune::fuzz::violated("a CSV row with an impossible line or no field");
    mlatune::ReplayData data = mlatune::ReplayData::parse(text, "fuzz.csv", space());
    for (const mlatune::Shape& shape : data.shapes()) (void)data.size(shape);
  });
  return 0;
}
