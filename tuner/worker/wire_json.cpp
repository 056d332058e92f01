#include "tuner/worker/wire_json.h"

#include <fmt/format.h>

#include "tuner/input_kinds.h"
#include "tuner/worker/codec.h"

namespace mlatune::wire {

void malformed(std::string_view what) {
  throw MalformedMessage(fmt::format("malformed message: {}", what));
}

double number(const json& object, const char* key) {
  const json& value = object.at(key);
  if (!value.is_number()) malformed(fmt::format("{} is not a number", key));
  return value.get<double>();
}

std::string text(const json& object, const char* key) {
  const json& value = object.at(key);
  if (!value.is_string()) malformed(fmt::format("{} is not a string", key));
  return value.get<std::string>();
}

bool flag(const json& object, const char* key) {
  const json& value = object.at(key);
  if (!value.is_boolean()) malformed(fmt::format("{} is not a boolean", key));
  return value.get<bool>();
}

const json& array(const json& object, const char* key) {
  const json& value = object.at(key);
  if (!value.is_array()) malformed(fmt::format("{} is not an array", key));
  return value;
}

CacheMode cache_mode(const json& object, const char* key) {
  auto mode = parse_cache_mode(text(object, key));
  if (!mode) malformed("unknown cache mode");
  return *mode;
}

namespace {

/// Bytes (a cubin) as a CBOR byte string, and back.
json bytes_of(const std::string& text) {
  const auto* bytes = reinterpret_cast<const std::uint8_t*>(text.data());
  return json::binary(std::vector<std::uint8_t>(bytes, bytes + text.size()));
}

std::string text_of_bytes(const json& object, const char* key) {
  const json& value = object.at(key);
  if (!value.is_binary()) malformed(fmt::format("{} is not a byte string", key));
  const auto& binary = value.get_binary();
  return std::string(reinterpret_cast<const char*>(binary.data()), binary.size());
}

void encode_geometry(json& j, const LaunchGeometry& g) {
  j["grid"] = {g.grid[0], g.grid[1], g.grid[2]};
  j["block"] = {g.block[0], g.block[1], g.block[2]};
  j["shared_bytes"] = g.shared_bytes;
}

LaunchGeometry decode_geometry(const json& j) {
  LaunchGeometry g;
  const json& grid = array(j, "grid");
  const json& block = array(j, "block");
  for (std::size_t i = 0; i < 3; ++i) {
    g.grid[i] = to_integer<std::int64_t>(grid.at(i), "grid");
    g.block[i] = to_integer<std::int64_t>(block.at(i), "block");
  }
  g.shared_bytes = integer<std::int64_t>(j, "shared_bytes");
  return g;
}

json encode_validation(const ValidationStats& v) {
  json j = {{"relative_l2", v.relative_l2}, {"max_abs", v.max_abs}, {"nonfinite", v.nonfinite},
            {"elements", v.elements},       {"input_sets", v.input_sets}, {"passed", v.passed}};
  if (!v.per_kind.empty()) {
    json kinds = json::array();
    for (const KindErrors& k : v.per_kind)
      kinds.push_back({{"kind", std::string(to_string(k.kind))}, {"relative_l2", k.relative_l2}, {"max_abs", k.max_abs}});
    j["per_kind"] = std::move(kinds);
  }
  return j;
}

/// An input kind's name, or a malformed message.
InputKind input_kind(const json& object, const char* key) {
  const std::string name = text(object, key);
  const std::optional<InputKind> kind = input_kind_named(name);
  if (!kind) malformed(fmt::format("unknown input kind '{}'", name));
  return *kind;
}

ValidationStats decode_validation(const json& v) {
  ValidationStats s;
  s.relative_l2 = number(v, "relative_l2");
  s.max_abs = number(v, "max_abs");
  s.nonfinite = integer<std::uint64_t>(v, "nonfinite");
  s.elements = integer<std::uint64_t>(v, "elements");
  s.input_sets = integer<int>(v, "input_sets");
  s.passed = flag(v, "passed");
  if (v.contains("per_kind"))  // absent when empty
    for (const json& k : array(v, "per_kind")) {
      if (!k.is_object()) malformed("a per_kind entry is not an object");
      s.per_kind.push_back({input_kind(k, "kind"), number(k, "relative_l2"), number(k, "max_abs")});
    }
  return s;
}

}  // namespace


json encode(const TimingStats& t) {
  return {{"median_us", t.median_us}, {"min_us", t.min_us}, {"p90_us", t.p90_us},
          {"spread", t.spread},       {"count", t.count},   {"cache", to_string(t.cache)},
          {"stable", t.stable},       {"cut", t.cut},       {"method", t.method}};
}

TimingStats decode_timing(const json& j) {
  TimingStats t;
  t.median_us = number(j, "median_us");
  t.min_us = number(j, "min_us");
  t.p90_us = number(j, "p90_us");
  t.spread = number(j, "spread");
  t.count = integer<int>(j, "count");
  t.cache = cache_mode(j, "cache");
  t.stable = flag(j, "stable");
  t.cut = flag(j, "cut");
  t.method = text(j, "method");
  return t;
}

json encode(const Cutoff& c) { return {{"best_us", c.best_us}, {"factor", c.factor}}; }

Cutoff decode_cutoff(const json& j) {
  Cutoff c;
  c.best_us = number(j, "best_us");
  c.factor = number(j, "factor");
  return c;
}

json encode(const EvaluationResult& r) {
  json j = {{"outcome", to_string(r.outcome)}, {"reason", r.reason},
            {"registers", r.registers},        {"local_bytes", r.local_bytes},
            {"context_lost", r.context_lost}};
  if (r.validation) j["validation"] = encode_validation(*r.validation);
  if (r.timing) j["timing"] = encode(*r.timing);
  return j;
}

EvaluationResult decode_result(const json& j) {
  EvaluationResult r;
  auto outcome = parse_outcome(text(j, "outcome"));
  if (!outcome) malformed("unknown outcome");
  r.outcome = *outcome;
  r.reason = text(j, "reason");
  r.registers = integer<int>(j, "registers");
  r.local_bytes = integer<std::int64_t>(j, "local_bytes");
  r.context_lost = flag(j, "context_lost");
  if (j.contains("validation")) r.validation = decode_validation(j.at("validation"));
  if (j.contains("timing")) r.timing = decode_timing(j.at("timing"));
  return r;
}

json encode(const Candidate& c) {
  json j = {{"label", c.label}, {"cubin", bytes_of(c.cubin)}, {"entry", c.entry}};
  encode_geometry(j, c.geometry);
  // Absent for a config without a prologue: such candidates travel as before.
  if (c.prologue) {
    json p = {{"entry", c.prologue->entry}};
    encode_geometry(p, c.prologue->geometry);
    j["prologue"] = std::move(p);
  }
  if (!c.workspace_bytes.empty()) j["workspace_bytes"] = c.workspace_bytes;
  return j;
}

Candidate decode_candidate(const json& j) {
  Candidate c;
  c.label = text(j, "label");
  c.cubin = text_of_bytes(j, "cubin");
  c.entry = text(j, "entry");
  c.geometry = decode_geometry(j);
  if (j.contains("prologue")) {
    const json& p = j.at("prologue");
    c.prologue = PrologueLaunch{text(p, "entry"), decode_geometry(p)};
  }
  if (j.contains("workspace_bytes"))
    for (const json& bytes : array(j, "workspace_bytes"))
      c.workspace_bytes.push_back(to_integer<std::int64_t>(bytes, "workspace_bytes"));
  return c;
}

json encode(const DeviceProperties& d) {
  return {{"ordinal", d.ordinal},
          {"name", d.name},
          {"cc", {d.cc_major, d.cc_minor}},
          {"multiprocessors", d.multiprocessors},
          {"l2_bytes", d.l2_bytes},
          {"total_memory", d.total_memory},
          {"shared_per_block_optin", d.shared_per_block_optin},
          {"shared_per_block", d.shared_per_block},
          {"max_threads_per_block", d.max_threads_per_block},
          {"driver_version", d.driver_version},
          {"max_grid", {d.max_grid[0], d.max_grid[1], d.max_grid[2]}},
          {"max_block", {d.max_block[0], d.max_block[1], d.max_block[2]}}};
}

DeviceProperties decode_device(const json& j) {
  DeviceProperties d;
  d.ordinal = integer<int>(j, "ordinal");
  d.name = text(j, "name");
  const json& cc = array(j, "cc");
  d.cc_major = to_integer<int>(cc.at(0), "cc");
  d.cc_minor = to_integer<int>(cc.at(1), "cc");
  d.multiprocessors = integer<int>(j, "multiprocessors");
  d.l2_bytes = integer<std::int64_t>(j, "l2_bytes");
  d.total_memory = integer<std::int64_t>(j, "total_memory");
  d.shared_per_block_optin = integer<std::int64_t>(j, "shared_per_block_optin");
  d.shared_per_block = integer<std::int64_t>(j, "shared_per_block");
  d.max_threads_per_block = integer<int>(j, "max_threads_per_block");
  d.driver_version = text(j, "driver_version");
  const json& grid = array(j, "max_grid");
  const json& block = array(j, "max_block");
  for (std::size_t i = 0; i < 3; ++i) {
    d.max_grid[i] = to_integer<std::int64_t>(grid.at(i), "max_grid");
    d.max_block[i] = to_integer<std::int64_t>(block.at(i), "max_block");
  }
  return d;
}

// ---- compilation ------------------------------------------------------------------

namespace {

std::vector<std::string> texts(const json& object, const char* key) {
  std::vector<std::string> out;
  for (const json& item : array(object, key)) {
    if (!item.is_string()) malformed(fmt::format("an entry of {} is not a string", key));
    out.push_back(item.get<std::string>());
  }
  return out;
}

json encode(const ResourceUsage& u) {
  return {{"registers", u.registers},           {"barriers", u.barriers},
          {"shared_bytes", u.shared_bytes},     {"constant_bytes", u.constant_bytes},
          {"stack_frame_bytes", u.stack_frame_bytes}, {"spill_store_bytes", u.spill_store_bytes},
          {"spill_load_bytes", u.spill_load_bytes}};
}

ResourceUsage decode_usage(const json& j) {
  ResourceUsage u;
  u.registers = integer<int>(j, "registers");
  u.barriers = integer<int>(j, "barriers");
  u.shared_bytes = integer<std::int64_t>(j, "shared_bytes");
  u.constant_bytes = integer<std::int64_t>(j, "constant_bytes");
  u.stack_frame_bytes = integer<std::int64_t>(j, "stack_frame_bytes");
  u.spill_store_bytes = integer<std::int64_t>(j, "spill_store_bytes");
  u.spill_load_bytes = integer<std::int64_t>(j, "spill_load_bytes");
  return u;
}

}  // namespace

namespace {

json encode_definitions(const std::vector<std::pair<std::string, std::string>>& definitions) {
  json out = json::array();
  for (const auto& [name, value] : definitions) out.push_back({name, value});
  return out;
}

std::vector<std::pair<std::string, std::string>> decode_definitions(const json& j) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const json& d : array(j, "definitions")) {
    if (!d.is_array() || d.size() != 2 || !d[0].is_string() || !d[1].is_string())
      malformed("a definition is not a pair of strings");
    out.emplace_back(d[0].get<std::string>(), d[1].get<std::string>());
  }
  return out;
}

}  // namespace

json encode(const CompileRequest& r) {
  json j = {{"source", r.source},   {"source_name", r.source_name},       {"entry", r.entry},
            {"arch", r.arch},       {"definitions", encode_definitions(r.definitions)}, {"extra_options", r.extra_options},
            {"config", r.config},   {"require_resource_report", r.require_resource_report},
            {"keep_ptx", r.keep_ptx}};
  if (r.prologue_part)
    j["prologue_part"] = {{"entry", r.prologue_part->entry},
                          {"definitions", encode_definitions(r.prologue_part->definitions)}};
  return j;
}

CompileRequest decode_compile_request(const json& j) {
  CompileRequest r;
  r.source = text(j, "source");
  r.source_name = text(j, "source_name");
  r.entry = text(j, "entry");
  r.arch = text(j, "arch");
  r.definitions = decode_definitions(j);
  r.extra_options = texts(j, "extra_options");
  r.config = text(j, "config");
  r.require_resource_report = flag(j, "require_resource_report");
  r.keep_ptx = flag(j, "keep_ptx");
  if (auto it = j.find("prologue_part"); it != j.end()) {
    if (!it->is_object()) malformed("prologue_part is not an object");
    r.prologue_part = CompileRequest::ProloguePart{text(*it, "entry"), decode_definitions(*it)};
  }
  return r;
}

json encode(const CompileResult& r) {
  json j = {{"ok", r.ok()},
            {"key", r.key().hash},
            {"options", r.options()},
            {"log", r.log()},
            {"compile_seconds", r.compile_seconds()},
            {"cpu_seconds", r.cpu_seconds()}};
  if (r.ok()) {
    const CompiledBinary& b = r.binary();
    j["cubin"] = bytes_of(b.cubin);
    j["usage"] = encode(b.usage);
    j["ptxas_seconds"] = b.ptxas_seconds;
    j["arch"] = b.arch;
    j["entry"] = b.entry;
    j["ptx"] = b.ptx;
    if (!b.prologue_ptx.empty()) j["prologue_ptx"] = b.prologue_ptx;
  } else {
    j["message"] = r.failure().message;
  }
  return j;
}

CompileResult decode_compile_result(const json& j) {
  const BinaryKey key{text(j, "key")};
  if (flag(j, "ok")) {
    CompiledBinary b;
    b.key = key;
    b.cubin = text_of_bytes(j, "cubin");
    b.usage = decode_usage(j.at("usage"));
    b.options = texts(j, "options");
    b.log = text(j, "log");
    b.compile_seconds = number(j, "compile_seconds");
    b.cpu_seconds = number(j, "cpu_seconds");
    b.ptxas_seconds = number(j, "ptxas_seconds");
    b.arch = text(j, "arch");
    b.entry = text(j, "entry");
    b.ptx = text(j, "ptx");
    if (j.contains("prologue_ptx")) b.prologue_ptx = text(j, "prologue_ptx");
    return CompileResult(std::move(b));
  }
  CompileFailure f;
  f.key = key;
  f.log = text(j, "log");
  f.options = texts(j, "options");
  f.message = text(j, "message");
  f.compile_seconds = number(j, "compile_seconds");
  f.cpu_seconds = number(j, "cpu_seconds");
  return CompileResult(std::move(f));
}

}  // namespace mlatune::wire
