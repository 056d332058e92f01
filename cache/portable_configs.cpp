#include "cache/portable_configs.h"

#include <chrono>
#include <cmath>
#include <ctime>
#include <fstream>
#include <iterator>
#include <map>
#include <tuple>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace mlatune {
namespace {

using nlohmann::json;
// Written in the order of the format's description (docs/portable-configs.md).
using nlohmann::ordered_json;

// ---- writing --------------------------------------------------------------------

ordered_json device_json(const DeviceIdentity& d) {
  return {{"name", d.name},
          {"arch", d.arch},
          {"sm_count", d.sm_count},
          {"memory_bytes", d.memory_bytes},
          {"driver_version", d.driver_version}};
}

ordered_json entry_json(const PortableEntry& e) {
  ordered_json j = {{"kernel", {{"name", e.kernel.name},
                        {"template_hash", e.kernel.template_hash},
                        {"definition_hash", e.kernel.definition_hash}}},
            {"device", device_json(e.device)},
            {"toolchain", {{"nvrtc_version", e.toolchain.nvrtc_version},
                           {"mlatune_version", e.toolchain.mlatune_version}}},
            {"shape", e.shape},
            {"config", e.config},
            {"timing", {{"median_us", e.timing.median_us},
                        {"min_us", e.timing.min_us},
                        {"p90_us", e.timing.p90_us},
                        {"samples", e.timing.samples},
                        {"spread", e.timing.spread},
                        {"method", e.timing.method}}},
            {"measured_at", e.measured_at}};
  j["error"] = e.error ? ordered_json{{"relative_l2", e.error->relative_l2}, {"max_abs", e.error->max_abs}} : ordered_json(nullptr);
  j["resources"] = e.resources ? ordered_json{{"registers", e.resources->registers},
                                      {"spill_store_bytes", e.resources->spill_store_bytes},
                                      {"spill_load_bytes", e.resources->spill_load_bytes},
                                      {"stack_frame_bytes", e.resources->stack_frame_bytes},
                                      {"shared_bytes", e.resources->shared_bytes}}
                               : ordered_json(nullptr);
  j["code"] = e.code ? ordered_json(*e.code) : ordered_json(nullptr);
  return j;
}

// ---- reading: every field checked, every error named --------------------------------

/// A field of the file, named by its path for messages ("entries[3].timing").
class Field {
 public:
  Field(const json& value, std::string path, const std::string& file) : value_(value), path_(std::move(path)), file_(file) {}

  Field at(const std::string& key) const {
    if (!value_.is_object()) fail("expected an object");
    auto found = value_.find(key);
    if (found == value_.end()) Field(value_, join(key), file_).fail("missing");
    return Field(*found, join(key), file_);
  }
  Field at(std::size_t index) const { return Field(value_.at(index), fmt::format("{}[{}]", path_, index), file_); }
  bool is_null() const { return value_.is_null(); }
  bool has(const std::string& key) const { return value_.is_object() && value_.contains(key); }
  std::size_t size() const {
    if (!value_.is_array()) fail("expected an array");
    return value_.size();
  }
  std::string text() const {
    if (!value_.is_string()) fail("expected a string");
    return value_.get<std::string>();
  }
  double number() const {
    if (!value_.is_number()) fail("expected a number");
    return value_.get<double>();
  }
  std::int64_t integer() const {
    if (!value_.is_number_integer()) fail("expected an integer");
    return value_.get<std::int64_t>();
  }
  [[noreturn]] void fail(const std::string& what) const {
    throw InputError(SourceLocation{file_}, fmt::format("{}: {}", path_.empty() ? "the file" : path_, what));
  }

 private:
  std::string join(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const json& value_;
  std::string path_;
  const std::string& file_;
};

DeviceIdentity read_device(const Field& f) {
  return {f.at("name").text(), f.at("arch").text(), static_cast<int>(f.at("sm_count").integer()),
          f.at("memory_bytes").integer(), f.at("driver_version").text()};
}

Timing read_timing(const Field& f) {
  Timing t{f.at("median_us").number(), f.at("min_us").number(), f.at("p90_us").number(),
           static_cast<int>(f.at("samples").integer()), f.at("spread").number(), f.at("method").text()};
  if (!(std::isfinite(t.median_us) && t.median_us >= 0)) f.at("median_us").fail("expected a finite time >= 0");
  return t;
}

std::optional<ResourceUsage> read_resources(const Field& f) {
  if (f.is_null()) return std::nullopt;
  ResourceUsage u;
  u.registers = static_cast<int>(f.at("registers").integer());
  u.spill_store_bytes = f.at("spill_store_bytes").integer();
  u.spill_load_bytes = f.at("spill_load_bytes").integer();
  u.stack_frame_bytes = f.at("stack_frame_bytes").integer();
  u.shared_bytes = f.at("shared_bytes").integer();
  return u;
}

PortableEntry read_entry(const Field& f) {
  PortableEntry e;
  const Field kernel = f.at("kernel");
  e.kernel = {kernel.at("name").text(), kernel.at("template_hash").text(), kernel.at("definition_hash").text()};
  e.device = read_device(f.at("device"));
  const Field toolchain = f.at("toolchain");
  e.toolchain = {toolchain.at("nvrtc_version").text(), toolchain.at("mlatune_version").text()};
  e.shape = f.at("shape").text();
  e.config = f.at("config").text();
  e.timing = read_timing(f.at("timing"));
  if (const Field error = f.at("error"); !error.is_null())
    e.error = ErrorFigures{error.at("relative_l2").number(), error.at("max_abs").number()};
  e.resources = read_resources(f.at("resources"));
  e.measured_at = f.at("measured_at").text();
  // Optional: files written before it existed have none.
  if (f.has("code")) {
    if (const Field code = f.at("code"); !code.is_null()) {
      e.code = code.text();
      if (e.code->size() != 32 || e.code->find_first_not_of("0123456789abcdef") != std::string::npos)
        code.fail("expected 32 lowercase hex digits (a code identity) or null");
    }
  }
  return e;
}

/// The format name and version come first: a file of another format or
/// version is refused before its entries are read.
void check_format(const Field& root) {
  const std::string format = root.at("format").text();
  if (format != portable_format_name)
    root.at("format").fail(fmt::format("'{}' is not a portable configs file (expected '{}')", format,
                                       portable_format_name));
  const std::int64_t version = root.at("format_version").integer();
  if (version != portable_format_version)
    root.at("format_version").fail(fmt::format(
        "format version {}; this mlatune ({}) reads version {} only{}", version, MLATUNE_VERSION,
        portable_format_version,
        version > portable_format_version ? " (export it again with this mlatune, or use a newer mlatune)" : ""));
}

std::string utc_now() {
  const std::time_t now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm utc{};
  gmtime_r(&now, &utc);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return text;
}

bool same_timing(const Timing& a, const Timing& b) {
  return std::tie(a.median_us, a.min_us, a.p90_us, a.samples, a.spread, a.method) ==
         std::tie(b.median_us, b.min_us, b.p90_us, b.samples, b.spread, b.method);
}

}  // namespace

bool PortableEntry::operator==(const PortableEntry& o) const {
  auto same_error = [](const std::optional<ErrorFigures>& a, const std::optional<ErrorFigures>& b) {
    return a.has_value() == b.has_value() && (!a || (a->relative_l2 == b->relative_l2 && a->max_abs == b->max_abs));
  };
  auto same_usage = [](const std::optional<ResourceUsage>& a, const std::optional<ResourceUsage>& b) {
    return a.has_value() == b.has_value() &&
           (!a || std::tie(a->registers, a->spill_store_bytes, a->spill_load_bytes, a->stack_frame_bytes,
                           a->shared_bytes) == std::tie(b->registers, b->spill_store_bytes, b->spill_load_bytes,
                                                        b->stack_frame_bytes, b->shared_bytes));
  };
  return kernel == o.kernel && device == o.device && toolchain == o.toolchain && shape == o.shape &&
         config == o.config && same_timing(timing, o.timing) && same_error(error, o.error) &&
         same_usage(resources, o.resources) && measured_at == o.measured_at && code == o.code;
}

std::string portable_json(const PortableConfigs& configs) {
  ordered_json entries = ordered_json::array();
  for (const PortableEntry& e : configs.entries) entries.push_back(entry_json(e));
  ordered_json root = {{"format", portable_format_name},
               {"format_version", portable_format_version},
               {"exported_by", configs.exported_by.empty() ? std::string(MLATUNE_VERSION) : configs.exported_by},
               {"exported_at", configs.exported_at.empty() ? utc_now() : configs.exported_at},
               {"entries", std::move(entries)}};
  return root.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n";
}

PortableConfigs parse_portable_json(std::string_view text, const std::string& file_name) {
  const json root = json::parse(text, nullptr, false);
  if (root.is_discarded())
    throw InputError(SourceLocation{file_name}, "not JSON; expected a portable configs file (mlatune cache export-best)");
  const Field file(root, "", file_name);
  check_format(file);
  PortableConfigs configs;
  configs.exported_by = file.at("exported_by").text();
  configs.exported_at = file.at("exported_at").text();
  const Field entries = file.at("entries");
  for (std::size_t i = 0; i < entries.size(); ++i) configs.entries.push_back(read_entry(entries.at(i)));
  return configs;
}

PortableConfigs read_portable_file(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) throw InputError(fmt::format("no file {}", file.string()));
  std::ifstream in(file, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in && !in.eof()) throw EnvironmentError(fmt::format("reading {} failed", file.string()));
  return parse_portable_json(text, file.string());
}

void write_portable_file(const std::filesystem::path& file, const PortableConfigs& configs) {
  const std::filesystem::path temporary = file.string() + ".tmp";
  {
    std::ofstream out(temporary, std::ios::binary | std::ios::trunc);
    out << portable_json(configs);
    out.flush();
    if (!out) throw EnvironmentError(fmt::format("cannot write {}", temporary.string()));
  }
  std::error_code ec;
  std::filesystem::rename(temporary, file, ec);
  if (ec) throw EnvironmentError(fmt::format("cannot rename {} to {}: {}", temporary.string(), file.string(), ec.message()));
}

VersionSplit split_by_version(const PortableConfigs& configs, const KernelInfo& current) {
  VersionSplit split;
  for (const PortableEntry& e : configs.entries) {
    if (e.kernel.name != current.name) continue;
    (e.kernel == current ? split.current : split.other).push_back(e);
  }
  return split;
}

std::vector<PortableEntry> entries_for(const PortableConfigs& configs, const KernelInfo& current,
                                       const std::string& file_name, bool skip_other_versions) {
  VersionSplit split = split_by_version(configs, current);
  std::vector<PortableEntry>& same = split.current;
  std::map<std::pair<std::string, std::string>, int> other_versions;  // (template, definition) -> entries
  for (const PortableEntry& e : split.other) ++other_versions[{e.kernel.template_hash, e.kernel.definition_hash}];
  if (!other_versions.empty() && !skip_other_versions) {
    const auto& [hashes, count] = *other_versions.begin();
    throw InputError(SourceLocation{file_name},
                     fmt::format("{} {} of {} {} tuned under template {} definitions {}, but the space now has "
                                 "template {} definitions {}: a config may not mean the same under another version, "
                                 "so no time of it is imported (--skip-other-versions imports only the entries of "
                                 "this version, {} of them; re-measure the others with `mlatune tune --configs-file`)",
                                 count, count == 1 ? "entry" : "entries", current.name, count == 1 ? "was" : "were",
                                 hashes.first, hashes.second, current.template_hash, current.definition_hash,
                                 same.size()));
  }
  if (same.empty())
    throw InputError(SourceLocation{file_name},
                     fmt::format("no entry of kernel {} at this version (template {}, definitions {})", current.name,
                                 current.template_hash, current.definition_hash));
  return same;
}

}  // namespace mlatune
