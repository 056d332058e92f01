// Maintenance: what is stored under versions that no longer hold (stale),
// removing it (prune), compacting the file (vacuum) and describing it (info).
#include "cache/store.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <system_error>

#include "cache/store_sql.h"

namespace mlatune {

namespace {

using namespace store_sql;
using sqlite::Connection;
using sqlite::Transaction;

using StaleById = std::vector<std::pair<std::int64_t, StaleEntry>>;

std::string short_hash(const std::string& hash) { return hash.substr(0, 12); }

// Kernel versions whose template or parameter definitions changed since.
StaleById stale_kernels(Connection& db, const CurrentVersions& current) {
  StaleById found;
  auto kernels = db.prepare("SELECT id, name, template_hash, definition_hash FROM kernels ORDER BY id");
  while (kernels.step()) {
    std::string name = kernels.column_text(1);
    auto now = current.kernels.find(name);
    if (now == current.kernels.end()) continue;
    std::string template_hash = kernels.column_text(2);
    std::string definition_hash = kernels.column_text(3);
    std::vector<std::string> reasons;
    if (template_hash != now->second.template_hash) {
      reasons.push_back(fmt::format("template changed (now {})", short_hash(now->second.template_hash)));
    }
    if (definition_hash != now->second.definition_hash) {
      reasons.push_back(fmt::format("parameter definitions changed (now {})",
                                    short_hash(now->second.definition_hash)));
    }
    if (reasons.empty()) continue;
    StaleEntry entry;
    entry.kind = StaleEntry::Kind::kernel;
    entry.description = fmt::format("kernel {} template {} definitions {}", name, short_hash(template_hash),
                                    short_hash(definition_hash));
    entry.reason = fmt::format("{}", fmt::join(reasons, "; "));
    found.emplace_back(kernels.column_int64(0), std::move(entry));
  }
  return found;
}

// Toolchains of another NVRTC (none when the current NVRTC is not given).
StaleById stale_toolchains(Connection& db, const CurrentVersions& current) {
  StaleById found;
  if (current.nvrtc_version.empty()) return found;
  auto toolchains = db.prepare("SELECT id, nvrtc_version, mlatune_version FROM toolchains ORDER BY id");
  while (toolchains.step()) {
    std::string nvrtc = toolchains.column_text(1);
    if (nvrtc == current.nvrtc_version) continue;
    StaleEntry entry;
    entry.kind = StaleEntry::Kind::toolchain;
    entry.description = fmt::format("toolchain NVRTC {} mlatune {}", nvrtc, toolchains.column_text(2));
    entry.reason = fmt::format("NVRTC is now {}", current.nvrtc_version);
    found.emplace_back(toolchains.column_int64(0), std::move(entry));
  }
  return found;
}

// Binaries of a changed template or made by another NVRTC, by key.
std::vector<std::pair<std::string, StaleEntry>> stale_binaries(Connection& db, const CurrentVersions& current) {
  std::vector<std::pair<std::string, StaleEntry>> found;
  auto binaries = db.prepare("SELECT key, kernel_name, template_hash, nvrtc_version, arch FROM binaries ORDER BY key");
  while (binaries.step()) {
    std::string name = binaries.column_text(1);
    std::string template_hash = binaries.column_text(2);
    std::string nvrtc = binaries.column_text(3);
    std::vector<std::string> reasons;
    auto now = current.kernels.find(name);
    if (now != current.kernels.end() && template_hash != now->second.template_hash) {
      reasons.push_back("template changed");
    }
    if (!current.nvrtc_version.empty() && nvrtc != current.nvrtc_version) {
      reasons.push_back(fmt::format("NVRTC is now {}", current.nvrtc_version));
    }
    if (reasons.empty()) continue;
    StaleEntry entry;
    entry.kind = StaleEntry::Kind::binary;
    entry.description = fmt::format("binary {} of {} for {} (NVRTC {})", short_hash(binaries.column_text(0)), name,
                                    binaries.column_text(4), nvrtc);
    entry.reason = fmt::format("{}", fmt::join(reasons, "; "));
    found.emplace_back(binaries.column_text(0), std::move(entry));
  }
  return found;
}

// Fills in how many runs, measurements and best entries refer to each stale
// id through `id_column` ("kernel_id" or "toolchain_id").
void count_uses(Connection& db, StaleById& found, std::string_view id_column) {
  const std::string runs = fmt::format("SELECT count(*) FROM runs WHERE {} = ?1", id_column);
  const std::string measurements = fmt::format("SELECT count(*) FROM measurements WHERE {} = ?1", id_column);
  const std::string best = fmt::format("SELECT count(*) FROM best WHERE {} = ?1", id_column);
  for (auto& [id, entry] : found) {
    entry.runs = count_by_id(db, runs.c_str(), id);
    entry.measurements = count_by_id(db, measurements.c_str(), id);
    entry.best = count_by_id(db, best.c_str(), id);
  }
}

}  // namespace

std::string_view to_string(StaleEntry::Kind kind) {
  switch (kind) {
    case StaleEntry::Kind::kernel: return "kernel";
    case StaleEntry::Kind::toolchain: return "toolchain";
    case StaleEntry::Kind::binary: return "binary";
  }
  return "unknown";
}

struct Store::StaleIds {
  std::vector<std::pair<std::int64_t, StaleEntry>> kernels;
  std::vector<std::pair<std::int64_t, StaleEntry>> toolchains;
  std::vector<std::pair<std::string, StaleEntry>> binaries;
};

Store::StaleIds Store::find_stale(const CurrentVersions& current) {
  StaleIds found{stale_kernels(db_, current), stale_toolchains(db_, current), stale_binaries(db_, current)};
  count_uses(db_, found.kernels, "kernel_id");
  count_uses(db_, found.toolchains, "toolchain_id");
  return found;
}

std::vector<StaleEntry> Store::stale(const CurrentVersions& current) {
  StaleIds found = find_stale(current);
  std::vector<StaleEntry> result;
  for (auto& [id, entry] : found.kernels) result.push_back(std::move(entry));
  for (auto& [id, entry] : found.toolchains) result.push_back(std::move(entry));
  for (auto& [key, entry] : found.binaries) result.push_back(std::move(entry));
  return result;
}

PruneCounts Store::prune(const CurrentVersions& current) {
  require_writable("prune");
  Transaction transaction(db_);
  StaleIds found = find_stale(current);
  PruneCounts counts;
  auto remove = [&](const char* sql, std::int64_t id) {
    db_.prepare(sql).bind(1, id).run();
    return db_.changes();
  };
  for (const auto& [id, entry] : found.kernels) {
    counts.best += remove("DELETE FROM best WHERE kernel_id = ?1", id);
    counts.misses += remove("DELETE FROM misses WHERE kernel_id = ?1", id);
    counts.measurements += remove("DELETE FROM measurements WHERE kernel_id = ?1", id);
    counts.runs += remove("DELETE FROM runs WHERE kernel_id = ?1", id);
    counts.kernels += remove("DELETE FROM kernels WHERE id = ?1", id);
  }
  for (const auto& [id, entry] : found.toolchains) {
    counts.best += remove("DELETE FROM best WHERE toolchain_id = ?1", id);
    counts.measurements += remove("DELETE FROM measurements WHERE toolchain_id = ?1", id);
    counts.runs += remove("DELETE FROM runs WHERE toolchain_id = ?1", id);
    counts.toolchains += remove("DELETE FROM toolchains WHERE id = ?1", id);
  }
  for (const auto& [key, entry] : found.binaries) {
    db_.prepare("DELETE FROM binaries WHERE key = ?1").bind(1, key).run();
    counts.binaries += db_.changes();
  }
  transaction.commit();
  return counts;
}

void Store::vacuum() {
  require_writable("vacuum");
  db_.execute("VACUUM");
  db_.execute("PRAGMA wal_checkpoint(TRUNCATE)");
}

StoreInfo Store::info() {
  StoreInfo info;
  info.path = path_;
  info.read_only = read_only_;
  {
    auto s = db_.prepare("SELECT value FROM meta WHERE key = 'schema_version'");
    if (s.step()) info.schema_version = std::stoi(s.column_text(0));
  }
  {
    auto s = db_.prepare("PRAGMA journal_mode");
    if (s.step()) info.journal_mode = s.column_text(0);
  }
  std::error_code ec;
  info.file_bytes = std::filesystem::file_size(path_, ec);
  if (ec) info.file_bytes = 0;
  auto wal = path_;
  wal += "-wal";
  info.wal_bytes = std::filesystem::exists(wal, ec) ? std::filesystem::file_size(wal, ec) : 0;
  if (ec) info.wal_bytes = 0;
  info.devices = count_rows(db_, "SELECT count(*) FROM devices");
  info.toolchains = count_rows(db_, "SELECT count(*) FROM toolchains");
  info.kernels = count_rows(db_, "SELECT count(*) FROM kernels");
  info.runs = count_rows(db_, "SELECT count(*) FROM runs");
  info.measurements = count_rows(db_, "SELECT count(*) FROM measurements");
  info.binaries = count_rows(db_, "SELECT count(*) FROM binaries");
  info.best = count_rows(db_, "SELECT count(*) FROM best");
  info.misses = count_rows(db_, "SELECT count(*) FROM misses");
  return info;
}

}  // namespace mlatune
