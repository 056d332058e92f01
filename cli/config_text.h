// A config as the store and reports keep it, "A=1,B=x,...", read without its
// space (report pages and tune summaries have only the text).
#pragma once
#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace mlatune::cli {

/// "A=1,B=x" as (name, value) pairs; pieces without '=' are left out.
inline std::vector<std::pair<std::string, std::string>> config_pairs(const std::string& config) {
  std::vector<std::pair<std::string, std::string>> pairs;
  std::size_t start = 0;
  while (start <= config.size()) {
    const std::size_t end = std::min(config.find(',', start), config.size());
    const std::string piece = config.substr(start, end - start);
    const std::size_t eq = piece.find('=');
    if (eq != std::string::npos) pairs.emplace_back(piece.substr(0, eq), piece.substr(eq + 1));
    start = end + 1;
  }
  return pairs;
}

}  // namespace mlatune::cli
