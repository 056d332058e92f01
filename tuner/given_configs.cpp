#include "tuner/given_configs.h"

#include <cctype>
#include <fstream>
#include <iterator>
#include <set>

#include <fmt/format.h>

#include "core/error.h"

namespace mlatune {
namespace {

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  return text;
}

/// Proposes a fixed list; the sweep stops asking at its end.
class GivenList final : public Strategy {
 public:
  explicit GivenList(std::vector<Config> configs) : configs_(std::move(configs)) {}
  std::optional<Config> next() override {
    if (next_ >= configs_.size()) return std::nullopt;
    return configs_[next_++];
  }
  void observe(const Config&, std::optional<double>) override {}

 private:
  std::vector<Config> configs_;
  std::size_t next_ = 0;
};

}  // namespace

std::vector<Config> GivenConfigs::at(const Shape& shape) const {
  std::vector<Config> configs;
  std::set<Config> seen;
  for (const Config& c : everywhere)
    if (seen.insert(c).second) configs.push_back(c);
  if (auto found = at_shape.find(shape); found != at_shape.end())
    for (const Config& c : found->second)
      if (seen.insert(c).second) configs.push_back(c);
  return configs;
}

ConfigsFile parse_configs_text(const SearchSpace& space, std::string_view text, const std::string& file_name) {
  ConfigsFile file;
  std::set<Config> seen;
  int line_number = 0;
  std::size_t start = 0;
  while (start < text.size()) {
    std::size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    ++line_number;
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    line = trimmed(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    try {
      Config config = space.parse_config(line);
      if (seen.insert(config).second) file.configs.push_back(std::move(config));
    } catch (const InputError& error) {
      file.rejected.push_back(fmt::format("{}:{}: {}", file_name, line_number, error.message()));
    }
  }
  return file;
}

ConfigsFile read_configs_file(const SearchSpace& space, const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::exists(file, ec)) throw InputError(fmt::format("no configs file {}", file.string()));
  std::ifstream in(file, std::ios::binary);
  if (!in) throw EnvironmentError(fmt::format("cannot read the configs file {}", file.string()));
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw EnvironmentError(fmt::format("reading the configs file {} failed", file.string()));
  return parse_configs_text(space, text, file.string());
}

std::unique_ptr<Strategy> given_configs_strategy(const SearchSpace& space, const SearchSpace& candidates,
                                                 const Shape& shape, const std::vector<Config>& configs,
                                                 std::vector<SkippedConfig>& skipped) {
  std::vector<Config> valid;
  for (const Config& config : configs) {
    const Validity validity = candidates.check(config, shape);
    if (validity)
      valid.push_back(config);
    else
      skipped.push_back({space.config_string(config), "violates " + validity.failed_constraint});
  }
  return std::make_unique<GivenList>(std::move(valid));
}

}  // namespace mlatune
