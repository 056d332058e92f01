// Fuzzes `mlatune tune --where` (SearchSpace::restrict, which edits the
// space's YAML text and reads it again): the input is a list of constraints
// separated by NUL bytes, applied to tests/spaces/small.yaml.
//
// A restriction may be rejected (InputError) but never change anything else:
// the restricted space has the same parameters, the old constraints and then
// exactly one new constraint per --where, and no more valid configs.  A
// constraint that could break out of its YAML list (a newline, a comment, a
// quote) would show up here as a property violation.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/space.h"
#include "tests/fuzz/fuzz_common.h"

namespace {

const mlatune::SearchSpace& space() {
  static const mlatune::SearchSpace s =
      mlatune::SearchSpace::load(MLATUNE_TEST_DATA_DIR "/spaces/small.yaml");
  return s;
}

std::vector<std::string> split_at_nul(std::string_view text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  for (std::size_t end; (end = text.find('\0', start)) != std::string_view::npos; start = end + 1)
    out.emplace_back(text.substr(start, end - start));
  out.emplace_back(text.substr(start));
  return out;
}

void check_restriction(const mlatune::SearchSpace& original, const mlatune::SearchSpace& restricted,
                       std::size_t added) {
  using mlatune::fuzz::violated;
  if (restricted.parameters().size() != original.parameters().size())
    violated("--where changed the parameters");
  for (std::size_t i = 0; i < original.parameters().size(); ++i)
    if (restricted.parameters()[i].text != original.parameters()[i].text)
      violated("--where changed the values of a parameter");
  if (restricted.constraints().size() != original.constraints().size() + added)
    violated("--where added a different number of constraints than given");
  for (std::size_t i = 0; i < original.constraints().size(); ++i)
    if (restricted.constraints()[i].text() != original.constraints()[i].text())
      violated("--where changed an existing constraint");
  if (restricted.kernel().entry != original.kernel().entry ||
      restricted.arguments().size() != original.arguments().size())
    violated("--where changed the kernel");
  for (const mlatune::Shape& shape : original.default_shapes()) {
    std::uint64_t count = 0;
    restricted.for_each_valid(shape, [&](const mlatune::Config& config) {
      if (!original.check(config, shape)) violated("--where admitted a config the space rejects");
      ++count;
      return true;
    });
    if (count != restricted.count(shape)) violated("count and for_each_valid disagree");
    if (count > original.count(shape)) violated("--where added configs");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::string> where = split_at_nul(mlatune::fuzz::as_text(data, size));
  mlatune::fuzz::rejecting_cleanly([&] {
    mlatune::SearchSpace restricted = space().restrict(where);
    check_restriction(space(), restricted, where.size());
  });
  return 0;
}
