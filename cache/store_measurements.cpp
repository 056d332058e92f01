// Runs and their measurements (cache/store.h).  Recording a measurement also
// moves the best entry, in the same transaction.
#include "cache/store.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <random>

#include "cache/store_sql.h"

namespace mlatune {

namespace {

using namespace store_sql;
using sqlite::Statement;
using sqlite::Transaction;

std::string random_uuid() {
  std::random_device device;
  std::mt19937_64 rng((static_cast<std::uint64_t>(device()) << 32) ^ device() ^
                      static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  std::uint64_t hi = rng();
  std::uint64_t lo = rng();
  hi = (hi & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;  // version 4
  lo = (lo & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;  // variant 1
  return fmt::format("{:08x}-{:04x}-{:04x}-{:04x}-{:012x}", hi >> 32, (hi >> 16) & 0xffff, hi & 0xffff,
                     lo >> 48, lo & 0xffffffffffffULL);
}

// Column list shared by every query that reads whole measurement records.
const std::string& measurement_columns() {
  static const std::string columns = fmt::format(
      "m.id, r.uuid, k.name, k.template_hash, k.definition_hash, {}, t.nvrtc_version, t.mlatune_version, "
      "m.run_id, m.shape, m.config, m.outcome, m.median_us, m.min_us, m.p90_us, m.samples, m.spread, "
      "m.timing_method, m.relative_l2, m.max_abs, m.registers, m.spill_stores, m.spill_loads, m.stack_frame, "
      "m.shared_bytes, m.message, m.measured_at",
      device_columns("d"));
  return columns;
}

MeasurementRecord read_measurement(const Statement& s) {
  MeasurementRecord r;
  r.id = s.column_int64(0);
  r.run_uuid = s.column_text(1);
  r.kernel = {s.column_text(2), s.column_text(3), s.column_text(4)};
  r.device = read_device(s, 5);
  r.toolchain = {s.column_text(10), s.column_text(11)};
  Measurement& m = r.measurement;
  m.run_id = s.column_int64(12);
  m.shape = s.column_text(13);
  m.config = s.column_text(14);
  std::string outcome = s.column_text(15);
  auto parsed = parse_outcome(outcome);
  if (!parsed) throw EnvironmentError(fmt::format("database holds an unknown outcome '{}'", outcome));
  m.outcome = *parsed;
  if (!s.is_null(16)) {
    m.timing = Timing{s.column_double(16), s.column_double(17), s.column_double(18),
                      static_cast<int>(s.column_int64(19)), s.column_double(20), s.column_text(21)};
  }
  if (!s.is_null(22)) m.error = ErrorFigures{s.column_double(22), s.column_double(23)};
  m.resources = read_resources(s, 24);
  m.message = s.column_text(29);
  r.measured_at = s.column_text(30);
  return r;
}

// A measurement the store must refuse before it opens a transaction.
void check_recordable(const Measurement& m) {
  if (m.outcome == Outcome::ok && !m.timing) {
    throw InputError(fmt::format("record: an ok measurement of {} at {} has no timing", m.config, m.shape));
  }
  // SQLite would store a NaN as NULL; a best entry must compare as a number.
  if (m.timing && !(std::isfinite(m.timing->median_us) && m.timing->median_us >= 0)) {
    throw InputError(fmt::format("record: {} at {} has median {} us", m.config, m.shape, m.timing->median_us));
  }
}

// Binds ?2 .. ?18 of the measurement insert (?1 is the run).
void bind_measurement(Statement& insert, const Measurement& m) {
  insert.bind(2, m.shape).bind(3, m.config).bind(4, std::string(to_string(m.outcome)));
  if (m.timing) {
    insert.bind(5, m.timing->median_us)
        .bind(6, m.timing->min_us)
        .bind(7, m.timing->p90_us)
        .bind(8, m.timing->samples)
        .bind(9, m.timing->spread)
        .bind(10, m.timing->method);
  } else {
    for (int i = 5; i <= 10; ++i) insert.bind_null(i);
  }
  if (m.error) {
    insert.bind(11, m.error->relative_l2).bind(12, m.error->max_abs);
  } else {
    insert.bind_null(11).bind_null(12);
  }
  if (m.resources) {
    insert.bind(13, m.resources->registers)
        .bind(14, m.resources->spill_store_bytes)
        .bind(15, m.resources->spill_load_bytes)
        .bind(16, m.resources->stack_frame_bytes)
        .bind(17, m.resources->shared_bytes);
  } else {
    insert.bind_null(13).bind_null(14).bind_null(15).bind_null(16).bind_null(17);
  }
  insert.bind(18, m.message);
}

}  // namespace

std::string_view to_string(RunStatus status) {
  switch (status) {
    case RunStatus::running: return "running";
    case RunStatus::finished: return "finished";
    case RunStatus::interrupted: return "interrupted";
    case RunStatus::failed: return "failed";
  }
  return "unknown";
}

std::int64_t Store::begin_run(const RunInfo& run) {
  require_writable("start a run");
  Transaction transaction(db_);
  auto s = db_.prepare(fmt::format(
      "INSERT INTO runs(uuid, kernel_id, device_id, toolchain_id, space_path, space_text, strategy, "
      "strategy_settings, started_at, status) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, {}, 'running')",
      now_sql));
  s.bind(1, random_uuid())
      .bind(2, run.kernel_id)
      .bind(3, run.device_id)
      .bind(4, run.toolchain_id)
      .bind(5, run.space_path)
      .bind(6, run.space_text)
      .bind(7, run.strategy)
      .bind(8, run.strategy_settings.empty() ? std::string("{}") : run.strategy_settings);
  try {
    s.run();
  } catch (const sqlite::Error& e) {
    if (e.code_name() == "SQLITE_CONSTRAINT_FOREIGNKEY") {
      throw InputError(fmt::format("begin_run: unknown kernel {}, device {} or toolchain {}", run.kernel_id,
                                   run.device_id, run.toolchain_id));
    }
    throw;
  }
  std::int64_t id = db_.last_insert_rowid();
  transaction.commit();
  return id;
}

void Store::finish_run(std::int64_t run_id, RunStatus status) {
  require_writable("finish a run");
  Transaction transaction(db_);
  db_.prepare(fmt::format("UPDATE runs SET status = ?1, finished_at = {} WHERE id = ?2", now_sql))
      .bind(1, std::string(to_string(status)))
      .bind(2, run_id)
      .run();
  if (db_.changes() != 1) throw InputError(fmt::format("finish_run: no run with id {}", run_id));
  transaction.commit();
}

std::vector<RunRecord> Store::runs() {
  auto s = db_.prepare(
      "SELECT r.id, r.uuid, k.name, r.space_path, r.strategy, r.strategy_settings, r.started_at, "
      "coalesce(r.finished_at, ''), r.status FROM runs r JOIN kernels k ON k.id = r.kernel_id ORDER BY r.id");
  std::vector<RunRecord> result;
  while (s.step()) {
    result.push_back(RunRecord{s.column_int64(0), s.column_text(1), s.column_text(2), s.column_text(3),
                               s.column_text(4), s.column_text(5), s.column_text(6), s.column_text(7),
                               s.column_text(8)});
  }
  return result;
}

std::int64_t Store::record(const Measurement& m) {
  require_writable("record a measurement");
  check_recordable(m);
  Transaction transaction(db_);
  static const std::string insert_sql = fmt::format(
      "INSERT INTO measurements(run_id, kernel_id, device_id, toolchain_id, shape, config, outcome, "
      "median_us, min_us, p90_us, samples, spread, timing_method, relative_l2, max_abs, registers, "
      "spill_stores, spill_loads, stack_frame, shared_bytes, message, measured_at) "
      "SELECT id, kernel_id, device_id, toolchain_id, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
      "?14, ?15, ?16, ?17, ?18, {} FROM runs WHERE id = ?1",
      now_sql);
  auto insert = statements_.get(db_, insert_sql);
  insert->bind(1, m.run_id);
  bind_measurement(*insert, m);
  insert->run();
  if (db_.changes() != 1) throw InputError(fmt::format("record: no run with id {}", m.run_id));
  std::int64_t id = db_.last_insert_rowid();
  if (m.outcome == Outcome::ok) {
    // Faster, or as fast with a config text that sorts first: the order of
    // the measurements never decides, so shards merged in any order
    // (Store::merge) agree with one sweep even where timings tie, as
    // quantized event times often do.
    static const std::string update_sql = fmt::format(
        "INSERT INTO best(kernel_id, device_id, toolchain_id, shape, config, median_us, measurement_id) "
        "SELECT kernel_id, device_id, toolchain_id, shape, config, median_us, id FROM measurements "
        "WHERE id = ?1 "
        "ON CONFLICT(kernel_id, device_id, toolchain_id, shape) DO UPDATE SET config = excluded.config, "
        "median_us = excluded.median_us, measurement_id = excluded.measurement_id WHERE {}",
        replaces_best("excluded", "best"));
    auto update = statements_.get(db_, update_sql);
    update->bind(1, id).run();
  }
  transaction.commit();
  return id;
}

bool Store::measured(std::int64_t run_id, const std::string& shape, const std::string& config) {
  auto s = statements_.get(db_, "SELECT 1 FROM measurements WHERE run_id = ?1 AND shape = ?2 AND config = ?3 LIMIT 1");
  s->bind(1, run_id).bind(2, shape).bind(3, config);
  return s->step();
}

bool Store::measured(std::int64_t kernel_id, std::int64_t device_id, std::int64_t toolchain_id,
                     const std::string& shape, const std::string& config) {
  auto s = statements_.get(db_,
                           "SELECT 1 FROM measurements WHERE kernel_id = ?1 AND device_id = ?2 AND toolchain_id = ?3 "
                           "AND shape = ?4 AND config = ?5 LIMIT 1");
  s->bind(1, kernel_id).bind(2, device_id).bind(3, toolchain_id).bind(4, shape).bind(5, config);
  return s->step();
}

std::vector<MeasurementRecord> Store::measurements(const MeasurementFilter& filter) {
  auto s = db_.prepare(fmt::format(
      "SELECT {} FROM measurements m JOIN runs r ON r.id = m.run_id JOIN kernels k ON k.id = m.kernel_id "
      "JOIN devices d ON d.id = m.device_id JOIN toolchains t ON t.id = m.toolchain_id "
      "WHERE (?1 = '' OR k.name = ?1) AND (?2 = '' OR m.shape = ?2) ORDER BY m.id",
      measurement_columns()));
  s.bind(1, filter.kernel_name).bind(2, filter.shape);
  std::vector<MeasurementRecord> result;
  while (s.step()) result.push_back(read_measurement(s));
  return result;
}

std::int64_t Store::measurement_count() { return count_rows(db_, "SELECT count(*) FROM measurements"); }

}  // namespace mlatune
