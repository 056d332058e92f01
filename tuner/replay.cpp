#include "tuner/replay.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <deque>
#include <fstream>
#include <limits>
#include <memory>
#include <sstream>

#include <zlib.h>

#include "core/error.h"

namespace mlatune {
namespace {

/// Owns a gzFile; closing is the only way to learn that a read ended in a
/// corrupt stream, so the reader closes explicitly and this only cleans up.
struct GzCloser {
  void operator()(gzFile file) const noexcept { (void)gzclose(file); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

/// The whole of a gzip-compressed file, decompressed.
std::string read_gzip(const std::filesystem::path& file) {
  GzFile in(gzopen(file.c_str(), "rb"));
  if (!in)
    throw EnvironmentError(
        fmt::format("cannot open replay data '{}': {}", file.string(), std::strerror(errno)));
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const int n = gzread(in.get(), buffer, sizeof buffer);
    if (n < 0) {
      int code = 0;
      const char* message = gzerror(in.get(), &code);
      throw InputError({file.string(), 0, 0}, fmt::format("not a readable gzip file: {}", message));
    }
    if (n == 0) break;
    text.append(buffer, static_cast<std::size_t>(n));
  }
  const int closed = gzclose(in.release());
  if (closed != Z_OK)
    throw InputError({file.string(), 0, 0}, fmt::format("gzip stream ends badly (zlib error {})", closed));
  return text;
}

/// The restriction of a "# where: EXPR" comment line, if `line` is one.
std::optional<std::string> where_directive(std::string_view line) {
  static constexpr std::string_view kDirective = "# where:";
  if (line.substr(0, kDirective.size()) != kDirective) return std::nullopt;
  std::string_view rest = line.substr(kDirective.size());
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
  while (!rest.empty() && (rest.back() == ' ' || rest.back() == '\r' || rest.back() == '\t')) rest.remove_suffix(1);
  return std::string(rest);
}

std::optional<double> parse_number(const std::string& text) {
  double value = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc() || ptr != end || text.empty()) return std::nullopt;
  return value;
}

}  // namespace

std::vector<CsvRow> parse_csv(std::string_view text, const std::string& file_name) {
  std::vector<CsvRow> rows;
  std::size_t i = 0;
  int line = 1;
  int column = 1;
  auto advance = [&]() {
    if (text[i] == '\n')
      ++line, column = 1;
    else
      ++column;
    ++i;
  };
  while (i < text.size()) {
    // At the start of a record: skip comments and empty lines.
    if (text[i] == '#') {
      while (i < text.size() && text[i] != '\n') advance();
      if (i < text.size()) advance();
      continue;
    }
    if (text[i] == '\n' || (text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n')) {
      while (text[i] != '\n') advance();
      advance();
      continue;
    }
    CsvRow row;
    row.line = line;
    bool end_of_record = false;
    while (!end_of_record) {
      std::string field;
      if (i < text.size() && text[i] == '"') {
        const int open_line = line, open_column = column;
        advance();
        for (;;) {
          if (i >= text.size())
            throw InputError({file_name, open_line, open_column}, "unterminated quoted field");
          if (text[i] == '"') {
            if (i + 1 < text.size() && text[i + 1] == '"') {
              field += '"';
              advance();
              advance();
              continue;
            }
            advance();
            break;
          }
          field += text[i];
          advance();
        }
        if (i < text.size() && text[i] != ',' && text[i] != '\n' &&
            !(text[i] == '\r' && i + 1 < text.size() && text[i + 1] == '\n'))
          throw InputError({file_name, line, column}, "text after a closing quote");
      } else {
        while (i < text.size() && text[i] != ',' && text[i] != '\n') {
          if (text[i] == '"')
            throw InputError({file_name, line, column}, "quote inside an unquoted field");
          field += text[i];
          advance();
        }
        if (!field.empty() && field.back() == '\r' && (i >= text.size() || text[i] == '\n'))
          field.pop_back();
      }
      row.fields.push_back(std::move(field));
      if (i < text.size() && text[i] == '\r') advance();
      if (i >= text.size() || text[i] == '\n') {
        end_of_record = true;
        if (i < text.size()) advance();
      } else {
        advance();  // the comma
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

ReplayData ReplayData::load(const std::filesystem::path& file, const SearchSpace& space) {
  if (file.extension() == ".gz") return parse(read_gzip(file), file.string(), space);
  std::ifstream in(file, std::ios::binary);
  if (!in)
    throw EnvironmentError(
        fmt::format("cannot open replay data '{}': {}", file.string(), std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw EnvironmentError(fmt::format("cannot read replay data '{}'", file.string()));
  return parse(text.str(), file.string(), space);
}

ReplayData ReplayData::parse(std::string_view text, const std::string& file_name,
                             const SearchSpace& space) {
  auto rows = parse_csv(text, file_name);
  if (rows.empty())
    throw InputError({file_name, 0, 0}, "no header line (shape,config,outcome,median_us,...)");
  const CsvRow& header = rows.front();
  auto column = [&](const char* name) {
    auto at = std::find(header.fields.begin(), header.fields.end(), name);
    if (at == header.fields.end())
      throw InputError({file_name, header.line, 0}, fmt::format("header lacks column '{}'", name));
    return static_cast<std::size_t>(at - header.fields.begin());
  };
  const std::size_t shape_col = column("shape"), config_col = column("config"),
                    outcome_col = column("outcome"), median_col = column("median_us");

  ReplayData data(space);
  // Directives live in the comment lines before the header, which
  // parse_csv skips: read them from the text (before the header no quoted
  // field can span lines, so a line is a line).
  int line_number = 0;
  for (std::size_t at = 0; at < text.size() && line_number + 1 < header.line;) {
    const std::size_t end = std::min(text.find('\n', at), text.size());
    ++line_number;
    if (auto where = where_directive(text.substr(at, end - at))) {
      if (where->empty()) throw InputError({file_name, line_number, 1}, "'# where:' without a constraint");
      try {
        space.check_constraint(*where);
      } catch (const InputError& e) {
        throw InputError({file_name, line_number, 1}, "# where: " + e.message());
      }
      data.restriction_.push_back(std::move(*where));
    }
    at = end + 1;
  }
  for (std::size_t r = 1; r < rows.size(); ++r) {
    const CsvRow& row = rows[r];
    const SourceLocation where{file_name, row.line, 0};
    if (row.fields.size() != header.fields.size())
      throw InputError(where, fmt::format("{} fields, the header has {}", row.fields.size(),
                                          header.fields.size()));
    Shape shape;
    Config config;
    try {
      shape = space.parse_shape(row.fields[shape_col]);
      config = space.parse_config(row.fields[config_col]);
    } catch (const InputError& e) {
      throw InputError(where, e.message());
    }
    auto outcome = parse_outcome(row.fields[outcome_col]);
    if (!outcome)
      throw InputError(where, fmt::format("unknown outcome '{}'", row.fields[outcome_col]));
    std::optional<double> time;
    if (*outcome == Outcome::ok) {
      time = parse_number(row.fields[median_col]);
      if (!time || !std::isfinite(*time) || *time <= 0)
        throw InputError(
            where, fmt::format("median_us '{}' is not a positive number", row.fields[median_col]));
    }
    data.outcomes_[shape][config] = *outcome;
    auto [at, inserted] = data.measurements_[shape].emplace(std::move(config), time);
    if (!inserted)
      throw InputError(where, fmt::format("shape {} config {} recorded twice",
                                          row.fields[shape_col], row.fields[config_col]));
  }
  return data;
}

std::vector<Shape> ReplayData::shapes() const {
  std::vector<Shape> out;
  for (const auto& [shape, configs] : measurements_) out.push_back(shape);
  return out;
}

std::size_t ReplayData::size(const Shape& shape) const {
  auto at = measurements_.find(shape);
  return at == measurements_.end() ? 0 : at->second.size();
}

bool ReplayData::contains(const Shape& shape, const Config& config) const {
  auto at = measurements_.find(shape);
  return at != measurements_.end() && at->second.count(config) != 0;
}

std::optional<double> ReplayData::time(const Shape& shape, const Config& config) const {
  auto at = measurements_.find(shape);
  if (at == measurements_.end())
    throw InputError(fmt::format("replay data has no shape {}", space_->shape_string(shape)));
  auto found = at->second.find(config);
  if (found == at->second.end())
    throw InputError(fmt::format("replay data has no measurement of {} at shape {}",
                                 space_->config_string(config), space_->shape_string(shape)));
  return found->second;
}

Outcome ReplayData::outcome(const Shape& shape, const Config& config) const {
  (void)time(shape, config);  // the same errors for an unknown shape or config
  return outcomes_.at(shape).at(config);
}

double ReplayData::optimum(const Shape& shape) const {
  auto at = measurements_.find(shape);
  if (at == measurements_.end())
    throw InputError(fmt::format("replay data has no shape {}", space_->shape_string(shape)));
  std::optional<double> best;
  for (const auto& [config, time] : at->second)
    if (time && (!best || *time < *best)) best = time;
  if (!best)
    throw InputError(fmt::format("replay data has no successful measurement at shape {}",
                                 space_->shape_string(shape)));
  return *best;
}

const std::map<Config, std::optional<double>>& ReplayData::measured(const Shape& shape) const {
  static const std::map<Config, std::optional<double>> none;
  auto it = measurements_.find(shape);
  return it == measurements_.end() ? none : it->second;
}

Config ReplayData::best_config(const Shape& shape) const {
  const double best = optimum(shape);
  for (const auto& [config, time] : measurements_.at(shape))
    if (time && *time == best) return config;
  throw InternalError("replay: the optimum's config is missing");
}

std::optional<std::size_t> ReplayTrace::evaluations_to_within(double optimum,
                                                              double fraction) const {
  const double target = optimum * (1.0 + fraction);
  for (std::size_t i = 0; i < best_after.size(); ++i)
    if (best_after[i] <= target) return i + 1;
  return std::nullopt;
}

double ReplayTrace::best_after_evaluations(std::size_t evaluations) const {
  if (best_after.empty() || evaluations == 0) return std::numeric_limits<double>::infinity();
  return best_after[std::min(evaluations, best_after.size()) - 1];
}

ReplayTrace replay(Strategy& strategy, const ReplayData& data, const Shape& shape,
                   std::size_t budget, std::optional<double> stop_at, Unrecorded unrecorded,
                   std::size_t lookahead) {
  ReplayTrace trace;
  double best = std::numeric_limits<double>::infinity();
  std::deque<Config> in_flight;
  bool exhausted = false;
  while (trace.best_after.size() < budget) {
    while (!exhausted && in_flight.size() < std::max<std::size_t>(1, lookahead)) {
      auto config = strategy.next();
      if (!config) {
        exhausted = true;
        break;
      }
      in_flight.push_back(std::move(*config));
    }
    if (in_flight.empty()) break;
    const Config config = std::move(in_flight.front());
    in_flight.pop_front();
    // Skipped as it comes up, not as it is proposed: it held its place
    // among the proposals in flight, as it would in a sweep of the space.
    if (unrecorded == Unrecorded::skip && !data.contains(shape, config)) continue;
    auto time = data.time(shape, config);
    strategy.observe(config, time);
    if (time) best = std::min(best, *time);
    trace.best_after.push_back(best);
    if (stop_at && best <= *stop_at) break;
  }
  return trace;
}

}  // namespace mlatune
