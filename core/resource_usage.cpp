#include "core/resource_usage.h"

#include <charconv>
#include <set>

namespace mlatune {
namespace {

// The report, as ptxas 13 prints it (one block per function):
//   ptxas info    : Compiling entry function 'k' for 'sm_90'
//   ptxas info    : Function properties for k
//   ptxas         .     2048 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
//   ptxas info    : Used 40 registers, used 1 barriers, 1024 bytes smem, 360 bytes cmem[0]
// Non-entry functions that keep a frame get only the "Function properties"
// block.  Items are comma separated and each is "<number> <what>" or
// "Used/used <number> <what>", so they are read item by item rather than by
// one fixed pattern: older and newer ptxas differ in which items they print.

struct Report {
  std::map<std::string, ResourceUsage> functions;
  std::set<std::string> entries;
};

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '.')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// "'name'" at the start of `s` → name.
std::optional<std::string> quoted(std::string_view s) {
  if (s.empty() || s.front() != '\'') return std::nullopt;
  std::size_t end = s.find('\'', 1);
  if (end == std::string_view::npos) return std::nullopt;
  return std::string(s.substr(1, end - 1));
}

bool read_number(std::string_view& s, std::int64_t& value) {
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr == s.data()) return false;
  s.remove_prefix(static_cast<std::size_t>(ptr - s.data()));
  s = trim(s);
  return true;
}

void apply_item(std::string_view item, ResourceUsage& usage) {
  item = trim(item);
  if (item.starts_with("Used ") || item.starts_with("used ")) item.remove_prefix(5);
  std::int64_t value = 0;
  if (!read_number(item, value)) return;
  if (item == "registers") usage.registers = static_cast<int>(value);
  else if (item == "barriers") usage.barriers = static_cast<int>(value);
  else if (item == "bytes smem") usage.shared_bytes = value;
  else if (item.starts_with("bytes cmem[0]")) usage.constant_bytes = value;
  else if (item == "bytes stack frame") usage.stack_frame_bytes = value;
  else if (item == "bytes spill stores") usage.spill_store_bytes = value;
  else if (item == "bytes spill loads") usage.spill_load_bytes = value;
  // Other items ("bytes cumulative stack size", other cmem banks) are not used.
}

void apply_items(std::string_view list, ResourceUsage& usage) {
  while (!list.empty()) {
    std::size_t comma = list.find(',');
    apply_item(list.substr(0, comma), usage);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

Report parse(std::string_view log) {
  Report report;
  std::string current;
  while (!log.empty()) {
    std::size_t newline = log.find('\n');
    std::string_view line = log.substr(0, newline);
    log.remove_prefix(newline == std::string_view::npos ? log.size() : newline + 1);

    if (!line.starts_with("ptxas")) continue;
    std::size_t colon = line.find(':');
    // "ptxas         .     N bytes stack frame, ..." has no colon.
    std::string_view body = trim(colon == std::string_view::npos ? line.substr(5)
                                                                 : line.substr(colon + 1));
    constexpr std::string_view kEntry = "Compiling entry function ";
    constexpr std::string_view kProperties = "Function properties for ";
    if (body.starts_with(kEntry)) {
      if (auto name = quoted(body.substr(kEntry.size()))) {
        current = *name;
        report.entries.insert(current);
        report.functions[current];
      }
    } else if (body.starts_with(kProperties)) {
      current = std::string(trim(body.substr(kProperties.size())));
      report.functions[current];
    } else if (!current.empty() &&
               (body.starts_with("Used ") || body.find("bytes stack frame") != std::string_view::npos)) {
      apply_items(body, report.functions[current]);
    }
  }
  return report;
}

}  // namespace

std::map<std::string, ResourceUsage> parse_ptxas_report(std::string_view log) {
  return parse(log).functions;
}

std::optional<ResourceUsage> find_resource_usage(std::string_view log, std::string_view entry) {
  Report report = parse(log);
  std::string name(entry);
  if (!report.entries.contains(name)) return std::nullopt;
  return report.functions.at(name);
}

}  // namespace mlatune
