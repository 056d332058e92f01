// Warmed ranges, and the copies that held-out analyses change (cache/store.h).
//
// The warm_ranges table is created when the first range is recorded rather
// than by a schema migration: it is optional, nothing else refers to it, and
// a database without it (older, or never warmed) stays readable by every
// build, which a schema version bump would forbid older builds to do.
#include "cache/store.h"

#include <fmt/format.h>

#include "cache/store_sql.h"

namespace mlatune {

using namespace store_sql;
using sqlite::Transaction;

namespace {

constexpr const char* create_warm_ranges = R"sql(
CREATE TABLE IF NOT EXISTS warm_ranges(
  id              INTEGER PRIMARY KEY,
  kernel_name     TEXT NOT NULL,
  template_hash   TEXT NOT NULL,
  definition_hash TEXT NOT NULL,
  arch            TEXT NOT NULL,
  nvrtc_version   TEXT NOT NULL,
  range_text      TEXT NOT NULL,
  probe_shapes    INTEGER NOT NULL,
  binaries        INTEGER NOT NULL,
  failed          INTEGER NOT NULL,
  warmed_at       TEXT NOT NULL
))sql";

bool has_table(sqlite::Connection& db, const char* name) {
  auto s = db.prepare("SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1");
  s.bind(1, name);
  s.step();
  return s.column_int64(0) > 0;
}

}  // namespace

void Store::record_warm_range(const WarmRange& range) {
  require_writable("record a warmed range");
  Transaction transaction(db_);
  db_.execute(create_warm_ranges);
  db_.prepare(fmt::format(
                  "INSERT INTO warm_ranges(kernel_name, template_hash, definition_hash, arch, nvrtc_version, "
                  "range_text, probe_shapes, binaries, failed, warmed_at) "
                  "VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, {})",
                  now_sql))
      .bind(1, range.kernel_name)
      .bind(2, range.template_hash)
      .bind(3, range.definition_hash)
      .bind(4, range.arch)
      .bind(5, range.nvrtc_version)
      .bind(6, range.range)
      .bind(7, range.probe_shapes)
      .bind(8, range.binaries)
      .bind(9, range.failed)
      .run();
  transaction.commit();
}

std::vector<WarmRange> Store::warm_ranges() {
  std::vector<WarmRange> result;
  if (!has_table(db_, "warm_ranges")) return result;
  auto s = db_.prepare(
      "SELECT kernel_name, template_hash, definition_hash, arch, nvrtc_version, range_text, probe_shapes, "
      "binaries, failed, warmed_at FROM warm_ranges ORDER BY id DESC");
  while (s.step()) {
    result.push_back(WarmRange{s.column_text(0), s.column_text(1), s.column_text(2), s.column_text(3),
                               s.column_text(4), s.column_text(5), s.column_int64(6), s.column_int64(7),
                               s.column_int64(8), s.column_text(9)});
  }
  return result;
}

void Store::copy_to(const std::filesystem::path& target) {
  std::error_code ec;
  if (std::filesystem::exists(target, ec))
    throw InputError(fmt::format("{}: already exists; a copy is written only to a new file", target.string()));
  db_.prepare("VACUUM INTO ?1").bind(1, target.string()).run();
}

std::int64_t Store::remove_best(std::int64_t kernel_id, const std::vector<std::string>& shapes) {
  require_writable("remove best entries");
  Transaction transaction(db_);
  auto s = db_.prepare("DELETE FROM best WHERE kernel_id = ?1 AND shape = ?2");
  std::int64_t removed = 0;
  for (const std::string& shape : shapes) {
    s.reset();
    s.bind(1, kernel_id).bind(2, shape).run();
    removed += db_.changes();
  }
  transaction.commit();
  return removed;
}

}  // namespace mlatune
