// Store::merge: another mlatune database's contents copied in by natural
// keys, so that running it twice changes nothing the second time
// (cache/store.h).  The other file is attached read-only as `other`; every
// step below reads `other.*` and writes `main.*` inside one transaction.
#include "cache/store.h"

#include <fmt/format.h>

#include <system_error>

#include "cache/store_sql.h"

namespace mlatune {

namespace {

using namespace store_sql;
using sqlite::Connection;

// The other file gets the same scrutiny as our own, and must be at our
// schema version (open it with this mlatune once to migrate it).
void check_merge_source(const std::filesystem::path& other, const std::filesystem::path& ours) {
  { Store source = Store::open(other, StoreMode::read_only); }
  std::error_code ec;
  if (std::filesystem::equivalent(other, ours, ec)) {
    throw InputError(fmt::format("merge: {} is this database itself", other.string()));
  }
}

// Attaches the other file as `other` for the lifetime of this object.
// Detaches however the merge ends; a failure to detach leaves only a
// harmless attachment on this connection.
class Attachment {
 public:
  Attachment(Connection& db, const std::filesystem::path& other) : db_(db) {
    db_.prepare("ATTACH DATABASE ?1 AS other").bind(1, sqlite::file_uri(other, "mode=ro")).run();
  }
  Attachment(const Attachment&) = delete;
  Attachment& operator=(const Attachment&) = delete;
  ~Attachment() {
    try {
      db_.execute("DETACH DATABASE other");
    } catch (const std::exception&) {
    }
  }

 private:
  Connection& db_;
};

// Joins that map an id of the other file, in column `<from>.kernel_id`
// (device_id, toolchain_id), to ours through the natural key; ours is then
// k.id (d.id, t.id).
std::string map_kernel(std::string_view from) {
  return fmt::format(
      "JOIN other.kernels ok ON ok.id = {}.kernel_id "
      "JOIN main.kernels k ON k.name = ok.name AND k.template_hash = ok.template_hash "
      "AND k.definition_hash = ok.definition_hash ",
      from);
}
std::string map_device(std::string_view from) {
  return fmt::format("JOIN other.devices od ON od.id = {}.device_id JOIN main.devices d ON {} ", from,
                     same_device("d", "od"));
}
std::string map_toolchain(std::string_view from) {
  return fmt::format(
      "JOIN other.toolchains ot ON ot.id = {}.toolchain_id "
      "JOIN main.toolchains t ON t.nvrtc_version = ot.nvrtc_version AND t.mlatune_version = ot.mlatune_version ",
      from);
}

// Devices, toolchains and kernel versions we lack.
void merge_identities(Connection& db) {
  db.execute(fmt::format(
      "INSERT OR IGNORE INTO main.devices({0}) SELECT {0} FROM other.devices;"
      "INSERT OR IGNORE INTO main.toolchains(nvrtc_version, mlatune_version) "
      "SELECT nvrtc_version, mlatune_version FROM other.toolchains;"
      "INSERT OR IGNORE INTO main.kernels(name, template_hash, definition_hash) "
      "SELECT name, template_hash, definition_hash FROM other.kernels;",
      device_columns()));
}

// Runs by uuid; returns how many are new.
std::int64_t merge_runs(Connection& db) {
  const std::int64_t before = count_rows(db, "SELECT count(*) FROM main.runs");
  db.execute(fmt::format(
      "INSERT INTO main.runs(uuid, kernel_id, device_id, toolchain_id, space_path, space_text, strategy, "
      "strategy_settings, started_at, finished_at, status) "
      "SELECT o.uuid, k.id, d.id, t.id, o.space_path, o.space_text, o.strategy, o.strategy_settings, "
      "o.started_at, o.finished_at, o.status FROM other.runs o {}{}{} WHERE true "
      // A run we saw still running may have finished in the other file.
      "ON CONFLICT(uuid) DO UPDATE SET finished_at = excluded.finished_at, status = excluded.status "
      "WHERE main.runs.finished_at IS NULL AND excluded.finished_at IS NOT NULL",
      map_kernel("o"), map_device("o"), map_toolchain("o")));
  return count_rows(db, "SELECT count(*) FROM main.runs") - before;
}

// Measurements we lack, each under its run (by uuid); returns how many are
// new, which are those with an id above `last_before`.
std::int64_t merge_measurements(Connection& db, std::int64_t last_before) {
  // A measurement's natural key: its run, shape, config, outcome, time and
  // when it was taken.
  db.execute(
      "INSERT INTO main.measurements(run_id, kernel_id, device_id, toolchain_id, shape, config, outcome, "
      "median_us, min_us, p90_us, samples, spread, timing_method, relative_l2, max_abs, registers, "
      "spill_stores, spill_loads, stack_frame, shared_bytes, message, measured_at) "
      "SELECT r.id, r.kernel_id, r.device_id, r.toolchain_id, m.shape, m.config, m.outcome, m.median_us, "
      "m.min_us, m.p90_us, m.samples, m.spread, m.timing_method, m.relative_l2, m.max_abs, m.registers, "
      "m.spill_stores, m.spill_loads, m.stack_frame, m.shared_bytes, m.message, m.measured_at "
      "FROM other.measurements m JOIN other.runs o ON o.id = m.run_id JOIN main.runs r ON r.uuid = o.uuid "
      "WHERE NOT EXISTS (SELECT 1 FROM main.measurements x WHERE x.run_id = r.id AND x.shape = m.shape "
      "  AND x.config = m.config AND x.outcome = m.outcome AND x.median_us IS m.median_us "
      "  AND x.measured_at = m.measured_at) "
      "ORDER BY m.id");
  return count_by_id(db, "SELECT count(*) FROM main.measurements WHERE id > ?1", last_before);
}

// Best entries move only for the new measurements (ids above `last_before`),
// by the rule Store::record follows (faster, or as fast with a config text
// that sorts first), so that the order in which shards are merged never
// decides; device and toolchain are part of the key, so results of other
// devices or toolchains never compete.  Returns the entries added or changed.
std::int64_t merge_best(Connection& db, std::int64_t last_before) {
  db.prepare(fmt::format(
                 "INSERT INTO main.best(kernel_id, device_id, toolchain_id, shape, config, median_us, "
                 "measurement_id) "
                 "SELECT kernel_id, device_id, toolchain_id, shape, config, median_us, id FROM ("
                 "  SELECT *, row_number() OVER (PARTITION BY kernel_id, device_id, toolchain_id, shape "
                 "                               ORDER BY median_us, config, id) AS rank "
                 "  FROM main.measurements WHERE id > ?1 AND outcome = 'ok') "
                 "WHERE rank = 1 "
                 "ON CONFLICT(kernel_id, device_id, toolchain_id, shape) DO UPDATE SET config = excluded.config, "
                 "median_us = excluded.median_us, measurement_id = excluded.measurement_id WHERE {}",
                 replaces_best("excluded", "main.best")))
      .bind(1, last_before)
      .run();
  return db.changes();
}

// Binaries by key (same key, same content); returns how many are new.
std::int64_t merge_binaries(Connection& db) {
  const std::int64_t before = count_rows(db, "SELECT count(*) FROM main.binaries");
  db.execute(
      "INSERT OR IGNORE INTO main.binaries(key, kernel_name, template_hash, nvrtc_version, arch, cubin, "
      "resources, created_at) SELECT key, kernel_name, template_hash, nvrtc_version, arch, cubin, resources, "
      "created_at FROM other.binaries");
  return count_rows(db, "SELECT count(*) FROM main.binaries") - before;
}

// Miss counts are per file; taking the larger keeps a second merge a no-op.
void merge_misses(Connection& db) {
  db.execute(fmt::format(
      "INSERT INTO main.misses(kernel_id, device_id, shape, count, first_seen, last_seen) "
      "SELECT k.id, d.id, x.shape, x.count, x.first_seen, x.last_seen FROM other.misses x {}{} WHERE true "
      "ON CONFLICT(kernel_id, device_id, shape) DO UPDATE SET count = max(count, excluded.count), "
      "first_seen = min(first_seen, excluded.first_seen), last_seen = max(last_seen, excluded.last_seen)",
      map_kernel("x"), map_device("x")));
}

}  // namespace

MergeCounts Store::merge(const std::filesystem::path& other) {
  require_writable("merge into it");
  check_merge_source(other, path_);
  Attachment attached(db_, other);
  sqlite::Transaction transaction(db_);
  const std::int64_t last_measurement = count_rows(db_, "SELECT coalesce(max(id), 0) FROM main.measurements");
  MergeCounts counts;
  merge_identities(db_);
  counts.runs = merge_runs(db_);
  counts.measurements = merge_measurements(db_, last_measurement);
  counts.best_changed = merge_best(db_, last_measurement);
  counts.binaries = merge_binaries(db_);
  merge_misses(db_);
  transaction.commit();
  return counts;
}

}  // namespace mlatune
