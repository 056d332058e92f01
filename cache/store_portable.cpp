// Store::export_best and Store::import_best: best configs out of and into a
// database as portable entries (cache/portable_configs.h).  An import is one
// transaction; its rows are found by natural keys, so importing twice changes
// nothing the second time, and an entry never overrides a faster best entry.
#include "cache/store.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <map>
#include <tuple>

#include "cache/portable_configs.h"
#include "cache/store_sql.h"
#include "core/hash.h"

namespace mlatune {

namespace {

using namespace store_sql;
using sqlite::Connection;
using sqlite::Statement;

PortableEntry read_portable(const Statement& s) {
  PortableEntry e;
  e.kernel = {s.column_text(0), s.column_text(1), s.column_text(2)};
  e.device = read_device(s, 3);
  e.toolchain = {s.column_text(8), s.column_text(9)};
  e.shape = s.column_text(10);
  e.config = s.column_text(11);
  e.timing = Timing{s.column_double(12), s.column_double(13), s.column_double(14),
                    static_cast<int>(s.column_int64(15)), s.column_double(16), s.column_text(17)};
  if (!s.is_null(18)) e.error = ErrorFigures{s.column_double(18), s.column_double(19)};
  e.resources = read_resources(s, 20);
  e.measured_at = s.column_text(25);
  return e;
}

/// The kernel version, device and toolchain an entry belongs to: entries of
/// one group go into one imported run.
using GroupKey = std::tuple<std::string, std::string, std::string,                    // kernel
                            std::string, std::string, int, std::int64_t, std::string,  // device
                            std::string, std::string>;                                // toolchain
GroupKey group_of(const PortableEntry& e) {
  return {e.kernel.name,    e.kernel.template_hash,   e.kernel.definition_hash,  e.device.name,
          e.device.arch,    e.device.sm_count,        e.device.memory_bytes,     e.device.driver_version,
          e.toolchain.nvrtc_version, e.toolchain.mlatune_version};
}

// Identities inside the caller's transaction (ensure_* would open their own).
void insert_identities(Connection& db, const PortableEntry& e) {
  Statement device =
      db.prepare(fmt::format("INSERT OR IGNORE INTO devices({}) VALUES(?1, ?2, ?3, ?4, ?5)", device_columns()));
  bind_device(device, 1, e.device).run();
  db.prepare("INSERT OR IGNORE INTO toolchains(nvrtc_version, mlatune_version) VALUES(?1, ?2)")
      .bind(1, e.toolchain.nvrtc_version)
      .bind(2, e.toolchain.mlatune_version)
      .run();
  db.prepare("INSERT OR IGNORE INTO kernels(name, template_hash, definition_hash) VALUES(?1, ?2, ?3)")
      .bind(1, e.kernel.name)
      .bind(2, e.kernel.template_hash)
      .bind(3, e.kernel.definition_hash)
      .run();
}

/// The ids one group's rows are stored under, and its run once one is needed.
struct GroupIds {
  std::int64_t kernel = 0, device = 0, toolchain = 0;
  std::int64_t run = 0;  // 0 until the group's first new measurement
};

// An imported entry's natural key: its kernel version, device, toolchain,
// shape, config, median and the time it was measured.
bool already_imported(Connection& db, const GroupIds& ids, const PortableEntry& e) {
  return db
      .prepare(
          "SELECT 1 FROM measurements WHERE kernel_id = ?1 AND device_id = ?2 AND toolchain_id = ?3 AND shape = ?4 "
          "AND config = ?5 AND outcome = 'ok' AND median_us IS ?6 AND measured_at = ?7 LIMIT 1")
      .bind(1, ids.kernel)
      .bind(2, ids.device)
      .bind(3, ids.toolchain)
      .bind(4, e.shape)
      .bind(5, e.config)
      .bind(6, e.timing.median_us)
      .bind(7, e.measured_at)
      .step();
}

// The run the group's new measurements belong to; finished at once (an
// import is not a sweep in progress).
std::int64_t insert_run(Connection& db, const GroupIds& ids, const std::string& source) {
  const std::string uuid = content_hash(
      {"import", source, std::to_string(ids.kernel), std::to_string(ids.device), std::to_string(ids.toolchain),
       std::to_string(std::chrono::system_clock::now().time_since_epoch().count())});
  db.prepare(fmt::format(
                 "INSERT INTO runs(uuid, kernel_id, device_id, toolchain_id, space_path, space_text, strategy, "
                 "strategy_settings, started_at, finished_at, status) "
                 "VALUES(?1, ?2, ?3, ?4, '', '', 'import', ?5, {0}, {0}, 'finished')",
                 now_sql))
      .bind(1, uuid)
      .bind(2, ids.kernel)
      .bind(3, ids.device)
      .bind(4, ids.toolchain)
      .bind(5, nlohmann::json{{"imported_from", source}}.dump())
      .run();
  return db.last_insert_rowid();
}

std::int64_t insert_measurement(Connection& db, const GroupIds& ids, const PortableEntry& e) {
  Statement insert = db.prepare(
      "INSERT INTO measurements(run_id, kernel_id, device_id, toolchain_id, shape, config, outcome, median_us, "
      "min_us, p90_us, samples, spread, timing_method, relative_l2, max_abs, registers, spill_stores, spill_loads, "
      "stack_frame, shared_bytes, message, measured_at) "
      "VALUES(?1, ?2, ?3, ?4, ?5, ?6, 'ok', ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20, ?21)");
  insert.bind(1, ids.run).bind(2, ids.kernel).bind(3, ids.device).bind(4, ids.toolchain);
  insert.bind(5, e.shape).bind(6, e.config);
  insert.bind(7, e.timing.median_us).bind(8, e.timing.min_us).bind(9, e.timing.p90_us);
  insert.bind(10, e.timing.samples).bind(11, e.timing.spread).bind(12, e.timing.method);
  if (e.error)
    insert.bind(13, e.error->relative_l2).bind(14, e.error->max_abs);
  else
    insert.bind_null(13).bind_null(14);
  if (e.resources)
    insert.bind(15, e.resources->registers)
        .bind(16, e.resources->spill_store_bytes)
        .bind(17, e.resources->spill_load_bytes)
        .bind(18, e.resources->stack_frame_bytes)
        .bind(19, e.resources->shared_bytes);
  else
    insert.bind_null(15).bind_null(16).bind_null(17).bind_null(18).bind_null(19);
  insert.bind(20, std::string("imported")).bind(21, e.measured_at);
  insert.run();
  return db.last_insert_rowid();
}

// As Store::record: strictly faster only, so an existing better (or equal)
// best entry of the same device and toolchain stays.
std::int64_t update_best(Connection& db, std::int64_t measurement_id) {
  db.prepare(
        "INSERT INTO best(kernel_id, device_id, toolchain_id, shape, config, median_us, measurement_id) "
        "SELECT kernel_id, device_id, toolchain_id, shape, config, median_us, id FROM measurements WHERE id = ?1 "
        "ON CONFLICT(kernel_id, device_id, toolchain_id, shape) DO UPDATE SET config = excluded.config, "
        "median_us = excluded.median_us, measurement_id = excluded.measurement_id "
        "WHERE excluded.median_us < best.median_us")
      .bind(1, measurement_id)
      .run();
  return db.changes();
}

}  // namespace

std::vector<PortableEntry> Store::export_best(const std::string& kernel_name) {
  auto s = db_.prepare(fmt::format(
      "SELECT k.name, k.template_hash, k.definition_hash, {}, t.nvrtc_version, t.mlatune_version, b.shape, "
      "b.config, b.median_us, m.min_us, m.p90_us, m.samples, m.spread, m.timing_method, m.relative_l2, m.max_abs, "
      "m.registers, m.spill_stores, m.spill_loads, m.stack_frame, m.shared_bytes, m.measured_at "
      "FROM best b JOIN measurements m ON m.id = b.measurement_id JOIN kernels k ON k.id = b.kernel_id "
      "JOIN devices d ON d.id = b.device_id JOIN toolchains t ON t.id = b.toolchain_id "
      "WHERE ?1 = '' OR k.name = ?1 ORDER BY k.name, d.name, d.id, t.id, b.shape",
      device_columns("d")));
  s.bind(1, kernel_name);
  std::vector<PortableEntry> entries;
  while (s.step()) entries.push_back(read_portable(s));
  return entries;
}

ImportCounts Store::import_best(const std::vector<PortableEntry>& entries, const std::string& source) {
  require_writable("import into it");
  for (const PortableEntry& e : entries) {
    if (!(std::isfinite(e.timing.median_us) && e.timing.median_us >= 0))
      throw InputError(fmt::format("import: {} at {} has median {} us", e.config, e.shape, e.timing.median_us));
  }
  sqlite::Transaction transaction(db_);
  ImportCounts counts;
  std::map<GroupKey, GroupIds> groups;
  for (const PortableEntry& e : entries) {
    auto [at, added] = groups.try_emplace(group_of(e));
    GroupIds& ids = at->second;
    if (added) {
      insert_identities(db_, e);
      ids = {*find_kernel(e.kernel), *find_device(e.device), *find_toolchain(e.toolchain), 0};
    }
    if (already_imported(db_, ids, e)) {
      ++counts.present;
      continue;
    }
    if (ids.run == 0) ids.run = insert_run(db_, ids, source);
    counts.best_changed += update_best(db_, insert_measurement(db_, ids, e));
    ++counts.added;
  }
  transaction.commit();
  return counts;
}

}  // namespace mlatune
