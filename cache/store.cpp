#include "cache/store.h"

#include "core/compiler.h"


#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <fstream>
#include <random>
#include <set>
#include <system_error>
#include <thread>

namespace mlatune {

namespace {

using sqlite::Connection;
using sqlite::Statement;
using sqlite::Transaction;

constexpr int busy_timeout_ms = 10'000;

// Forward migrations: entry i turns schema version i into version i + 1.
// Each runs inside the migrating transaction.
constexpr std::array<const char*, Store::schema_version> migrations = {
    R"sql(
CREATE TABLE meta(
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE devices(
  id             INTEGER PRIMARY KEY,
  name           TEXT NOT NULL,
  arch           TEXT NOT NULL,
  sm_count       INTEGER NOT NULL,
  memory_bytes   INTEGER NOT NULL,
  driver_version TEXT NOT NULL,
  UNIQUE(name, arch, sm_count, memory_bytes, driver_version)
);

CREATE TABLE toolchains(
  id              INTEGER PRIMARY KEY,
  nvrtc_version   TEXT NOT NULL,
  mlatune_version TEXT NOT NULL,
  UNIQUE(nvrtc_version, mlatune_version)
);

CREATE TABLE kernels(
  id              INTEGER PRIMARY KEY,
  name            TEXT NOT NULL,
  template_hash   TEXT NOT NULL,
  definition_hash TEXT NOT NULL,
  UNIQUE(name, template_hash, definition_hash)
);

CREATE TABLE runs(
  id                INTEGER PRIMARY KEY,
  uuid              TEXT NOT NULL UNIQUE,
  kernel_id         INTEGER NOT NULL REFERENCES kernels(id),
  device_id         INTEGER NOT NULL REFERENCES devices(id),
  toolchain_id      INTEGER NOT NULL REFERENCES toolchains(id),
  space_path        TEXT NOT NULL,
  space_text        TEXT NOT NULL,
  strategy          TEXT NOT NULL,
  strategy_settings TEXT NOT NULL,
  started_at        TEXT NOT NULL,
  finished_at       TEXT,
  status            TEXT NOT NULL CHECK(status IN ('running', 'finished', 'interrupted', 'failed'))
);

CREATE TABLE measurements(
  id            INTEGER PRIMARY KEY,
  run_id        INTEGER NOT NULL REFERENCES runs(id),
  kernel_id     INTEGER NOT NULL REFERENCES kernels(id),
  device_id     INTEGER NOT NULL REFERENCES devices(id),
  toolchain_id  INTEGER NOT NULL REFERENCES toolchains(id),
  shape         TEXT NOT NULL,
  config        TEXT NOT NULL,
  outcome       TEXT NOT NULL CHECK(outcome IN ('ok', 'compile_error', 'launch_error', 'wrong_result',
                                                'crashed', 'timeout', 'skipped_by_constraint')),
  median_us     REAL,
  min_us        REAL,
  p90_us        REAL,
  samples       INTEGER,
  spread        REAL,
  timing_method TEXT,
  relative_l2   REAL,
  max_abs       REAL,
  registers     INTEGER,
  spill_stores  INTEGER,
  spill_loads   INTEGER,
  stack_frame   INTEGER,
  shared_bytes  INTEGER,
  message       TEXT NOT NULL,
  measured_at   TEXT NOT NULL,
  CHECK(outcome <> 'ok' OR median_us IS NOT NULL)
);
CREATE INDEX measurements_by_run ON measurements(run_id, shape, config);
CREATE INDEX measurements_by_key ON measurements(kernel_id, device_id, toolchain_id, shape, config);

CREATE TABLE best(
  kernel_id      INTEGER NOT NULL REFERENCES kernels(id),
  device_id      INTEGER NOT NULL REFERENCES devices(id),
  toolchain_id   INTEGER NOT NULL REFERENCES toolchains(id),
  shape          TEXT NOT NULL,
  config         TEXT NOT NULL,
  median_us      REAL NOT NULL,
  measurement_id INTEGER NOT NULL REFERENCES measurements(id),
  PRIMARY KEY(kernel_id, device_id, toolchain_id, shape)
) WITHOUT ROWID;

CREATE TABLE binaries(
  key           TEXT PRIMARY KEY,
  kernel_name   TEXT NOT NULL,
  template_hash TEXT NOT NULL,
  nvrtc_version TEXT NOT NULL,
  arch          TEXT NOT NULL,
  cubin         BLOB NOT NULL,
  resources     TEXT NOT NULL,
  created_at    TEXT NOT NULL
);

CREATE TABLE misses(
  kernel_id  INTEGER NOT NULL REFERENCES kernels(id),
  device_id  INTEGER NOT NULL REFERENCES devices(id),
  shape      TEXT NOT NULL,
  count      INTEGER NOT NULL,
  first_seen TEXT NOT NULL,
  last_seen  TEXT NOT NULL,
  PRIMARY KEY(kernel_id, device_id, shape)
) WITHOUT ROWID;
)sql",
};

constexpr const char* now_sql = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

std::string short_hash(const std::string& hash) { return hash.substr(0, 12); }

[[noreturn]] void refuse(const std::filesystem::path& path, const std::string& why) {
  throw InputError(fmt::format("{}: {}; refusing to open it (the file is left untouched)", path.string(), why));
}

std::uint32_t big_endian(const unsigned char* p, int bytes) {
  std::uint32_t value = 0;
  for (int i = 0; i < bytes; ++i) value = (value << 8) | p[i];
  return value;
}

// Looks at the file's SQLite header before SQLite does, so that a foreign or
// cut-off file is refused with a clear message and never written to.
void check_header(const std::filesystem::path& path, std::uintmax_t size) {
  constexpr std::size_t header_size = 100;
  if (size < header_size) {
    refuse(path, fmt::format("only {} bytes: truncated, or not an SQLite database", size));
  }
  std::ifstream in(path, std::ios::binary);
  std::array<unsigned char, header_size> header{};
  if (!in.read(reinterpret_cast<char*>(header.data()), header_size)) {
    throw EnvironmentError(fmt::format("{}: cannot read the file header", path.string()));
  }
  static constexpr char magic[] = "SQLite format 3";  // followed by a NUL, as in the file
  if (!std::equal(magic, magic + sizeof magic, header.begin())) {
    refuse(path, "not an SQLite database (no SQLite header)");
  }
  std::uint32_t page_size = big_endian(&header[16], 2);
  if (page_size == 1) page_size = 65536;
  if (page_size < 512 || page_size > 65536 || (page_size & (page_size - 1)) != 0) {
    refuse(path, fmt::format("corrupt SQLite header (page size {})", page_size));
  }
  // With a -wal beside it the main file may legitimately lag its header (a
  // checkpoint in progress); SQLite itself judges that case.
  std::error_code ec;
  auto wal = path;
  wal += "-wal";
  bool has_wal = std::filesystem::exists(wal, ec) && std::filesystem::file_size(wal, ec) > 0;
  if (has_wal) return;
  if (size % page_size != 0) {
    refuse(path, fmt::format("truncated: {} bytes is not a whole number of {}-byte pages", size, page_size));
  }
  std::uint32_t change_counter = big_endian(&header[24], 4);
  std::uint32_t valid_for = big_endian(&header[92], 4);
  std::uint64_t pages = big_endian(&header[28], 4);
  if (change_counter == valid_for && pages > 0 && pages * page_size > size) {
    refuse(path, fmt::format("truncated: the header says {} bytes, the file has {}", pages * page_size, size));
  }
}

struct Inspection {
  std::int32_t application_id = 0;
  bool empty = true;  // no tables at all
  int version = 0;
};

// Reads what identifies an mlatune database, without writing.
Inspection inspect(Connection& db, const std::filesystem::path& path) {
  Inspection result;
  try {
    auto tables = db.prepare("SELECT count(*) FROM sqlite_schema");
    tables.step();
    result.empty = tables.column_int64(0) == 0;
    auto app = db.prepare("PRAGMA application_id");
    app.step();
    result.application_id = static_cast<std::int32_t>(app.column_int64(0));
  } catch (const sqlite::Error& e) {
    if (e.not_a_database()) refuse(path, fmt::format("not a valid SQLite database ({})", e.code_name()));
    throw;
  }
  if (result.empty && result.application_id == 0) return result;
  if (result.application_id != Store::application_id) {
    refuse(path, fmt::format("not an mlatune database (application_id {:#x}, expected {:#x})",
                             static_cast<std::uint32_t>(result.application_id),
                             static_cast<std::uint32_t>(Store::application_id)));
  }
  try {
    auto version = db.prepare("SELECT value FROM meta WHERE key = 'schema_version'");
    if (!version.step()) refuse(path, "mlatune database without a schema version");
    std::string text = version.column_text(0);
    try {
      result.version = std::stoi(text);
    } catch (const std::exception&) {
      refuse(path, fmt::format("unreadable schema version '{}'", text));
    }
  } catch (const sqlite::Error& e) {
    refuse(path, fmt::format("damaged mlatune database ({}: {})", e.code_name(), e.what()));
  }
  if (result.version > Store::schema_version) {
    refuse(path, fmt::format("its schema version {} is newer than this mlatune's ({}); use a newer mlatune",
                             result.version, Store::schema_version));
  }
  if (result.version < 0) refuse(path, fmt::format("invalid schema version {}", result.version));
  return result;
}

// Opens read-only; where that fails (a read-only file system that cannot
// hold the -shm file), opens with immutable=1, which needs no locks.
Connection open_read_only(const std::filesystem::path& path) {
  try {
    auto db = Connection::open(path, sqlite::OpenMode::read_only);
    auto probe = db.prepare("SELECT count(*) FROM sqlite_schema");
    probe.step();
    return db;
  } catch (const sqlite::Error& e) {
    if (e.not_a_database()) refuse(path, fmt::format("not a valid SQLite database ({})", e.code_name()));
    auto db = Connection::open(path, sqlite::OpenMode::read_only_immutable);
    return db;
  }
}

void set_wal(Connection& db) {
  // Switching the journal mode needs a moment of exclusive access; another
  // process creating the same file may hold it.
  for (int attempt = 0;; ++attempt) {
    try {
      auto mode = db.prepare("PRAGMA journal_mode = WAL");
      mode.step();
      std::string result = mode.column_text(0);
      if (result != "wal") {
        throw EnvironmentError(fmt::format("{}: cannot use WAL mode (journal mode stays '{}')",
                                           db.path().string(), result));
      }
      return;
    } catch (const sqlite::Error& e) {
      if (!e.busy() || attempt >= 200) throw;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
}

void migrate(Connection& db, const std::filesystem::path& path) {
  Transaction transaction(db, Transaction::Kind::immediate);
  // Read again under the write lock: another process may have created or
  // migrated the file since it was inspected.
  Inspection now = inspect(db, path);
  if (now.version == Store::schema_version) return;  // nothing to do; the empty transaction rolls back
  for (int version = now.version; version < Store::schema_version; ++version) {
    db.execute(migrations[static_cast<std::size_t>(version)]);
  }
  db.execute(fmt::format("PRAGMA application_id = {}", Store::application_id));
  auto set_version = db.prepare(
      "INSERT INTO meta(key, value) VALUES('schema_version', ?1) "
      "ON CONFLICT(key) DO UPDATE SET value = excluded.value");
  set_version.bind(1, std::to_string(Store::schema_version)).run();
  transaction.commit();
}

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

std::optional<std::int64_t> single_id(sqlite::StatementCache::Lease& statement) {
  if (!statement->step()) return std::nullopt;
  return statement->column_int64(0);
}

std::int64_t count_rows(Connection& db, const char* sql) {
  auto statement = db.prepare(sql);
  statement.step();
  return statement.column_int64(0);
}

std::int64_t count_by_id(Connection& db, const char* sql, std::int64_t id) {
  auto statement = db.prepare(sql);
  statement.bind(1, id);
  statement.step();
  return statement.column_int64(0);
}

// Column list shared by every query that reads whole measurement records.
constexpr const char* measurement_columns =
    "m.id, r.uuid, k.name, k.template_hash, k.definition_hash, "
    "d.name, d.arch, d.sm_count, d.memory_bytes, d.driver_version, t.nvrtc_version, t.mlatune_version, "
    "m.run_id, m.shape, m.config, m.outcome, m.median_us, m.min_us, m.p90_us, m.samples, m.spread, "
    "m.timing_method, m.relative_l2, m.max_abs, m.registers, m.spill_stores, m.spill_loads, m.stack_frame, "
    "m.shared_bytes, m.message, m.measured_at";

MeasurementRecord read_measurement(const Statement& s) {
  MeasurementRecord r;
  r.id = s.column_int64(0);
  r.run_uuid = s.column_text(1);
  r.kernel = {s.column_text(2), s.column_text(3), s.column_text(4)};
  r.device.name = s.column_text(5);
  r.device.arch = s.column_text(6);
  r.device.sm_count = static_cast<int>(s.column_int64(7));
  r.device.memory_bytes = s.column_int64(8);
  r.device.driver_version = s.column_text(9);
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
  if (!s.is_null(24)) {
    ResourceUsage usage;
    usage.registers = static_cast<int>(s.column_int64(24));
    usage.spill_store_bytes = s.column_int64(25);
    usage.spill_load_bytes = s.column_int64(26);
    usage.stack_frame_bytes = s.column_int64(27);
    usage.shared_bytes = s.column_int64(28);
    m.resources = usage;
  }
  m.message = s.column_text(29);
  r.measured_at = s.column_text(30);
  return r;
}

BestEntry read_best(const Statement& s, int first) {
  BestEntry b;
  b.kernel_id = s.column_int64(first);
  b.device_id = s.column_int64(first + 1);
  b.toolchain_id = s.column_int64(first + 2);
  b.shape = s.column_text(first + 3);
  b.config = s.column_text(first + 4);
  b.median_us = s.column_double(first + 5);
  b.measurement_id = s.column_int64(first + 6);
  return b;
}

}  // namespace

// ---- small types -----------------------------------------------------------------

std::string_view to_string(RunStatus status) {
  switch (status) {
    case RunStatus::running: return "running";
    case RunStatus::finished: return "finished";
    case RunStatus::interrupted: return "interrupted";
    case RunStatus::failed: return "failed";
  }
  return "unknown";
}

std::string_view to_string(StaleEntry::Kind kind) {
  switch (kind) {
    case StaleEntry::Kind::kernel: return "kernel";
    case StaleEntry::Kind::toolchain: return "toolchain";
    case StaleEntry::Kind::binary: return "binary";
  }
  return "unknown";
}

ToolchainInfo ToolchainInfo::current() { return ToolchainInfo{mlatune::nvrtc_version(), MLATUNE_VERSION}; }

// ---- opening -----------------------------------------------------------------------

Store Store::open(const std::filesystem::path& path, StoreMode mode) {
  std::error_code ec;
  bool exists = std::filesystem::exists(path, ec);
  if (ec) throw EnvironmentError(fmt::format("{}: {}", path.string(), ec.message()));
  if (exists && !std::filesystem::is_regular_file(path, ec)) refuse(path, "not a regular file");
  std::uintmax_t size = exists ? std::filesystem::file_size(path, ec) : 0;
  if (ec) throw EnvironmentError(fmt::format("{}: {}", path.string(), ec.message()));

  if (mode == StoreMode::read_only) {
    if (!exists) throw InputError(fmt::format("{}: no such database", path.string()));
    if (size == 0) throw InputError(fmt::format("{}: empty file, not yet an mlatune database", path.string()));
    check_header(path, size);
    Connection db = open_read_only(path);
    Inspection found = inspect(db, path);
    if (found.version < schema_version) {
      refuse(path, fmt::format("schema version {} is older than this mlatune's ({}); open it once for "
                               "writing to migrate it",
                               found.version, schema_version));
    }
    db.set_busy_timeout(busy_timeout_ms);
    return Store(std::move(db), path, true);
  }

  // A 0-byte or missing file is a new database.  Anything else is checked
  // through a read-only connection first: a refused file is never written.
  if (exists && size > 0) {
    check_header(path, size);
    Connection probe = open_read_only(path);
    inspect(probe, path);
  }
  Connection db = Connection::open(path, sqlite::OpenMode::read_write_create);
  db.set_busy_timeout(busy_timeout_ms);
  if (db.read_only()) {
    throw EnvironmentError(fmt::format("{}: cannot be opened for writing (open it read-only for lookups)",
                                       path.string()));
  }
  db.execute("PRAGMA foreign_keys = ON");
  set_wal(db);
  // In WAL mode NORMAL loses no committed transaction when the process is
  // killed (only on power loss), at a fraction of FULL's fsync cost.
  db.execute("PRAGMA synchronous = NORMAL");
  migrate(db, path);
  return Store(std::move(db), path, false);
}

void Store::require_writable(const char* what) const {
  if (read_only_) {
    throw EnvironmentError(fmt::format("{}: opened read-only, cannot {}", path_.string(), what));
  }
}

// ---- identities ----------------------------------------------------------------------

std::optional<std::int64_t> Store::find_device(const DeviceInfo& d) {
  auto s = statements_.get(
      db_,
      "SELECT id FROM devices WHERE name = ?1 AND arch = ?2 AND sm_count = ?3 AND memory_bytes = ?4 "
      "AND driver_version = ?5");
  s->bind(1, d.name).bind(2, d.arch).bind(3, d.sm_count).bind(4, d.memory_bytes).bind(5, d.driver_version);
  return single_id(s);
}

std::optional<std::int64_t> Store::find_toolchain(const ToolchainInfo& t) {
  auto s = statements_.get(db_, "SELECT id FROM toolchains WHERE nvrtc_version = ?1 AND mlatune_version = ?2");
  s->bind(1, t.nvrtc_version).bind(2, t.mlatune_version);
  return single_id(s);
}

std::optional<std::int64_t> Store::find_kernel(const KernelInfo& k) {
  auto s = statements_.get(db_,
                           "SELECT id FROM kernels WHERE name = ?1 AND template_hash = ?2 AND definition_hash = ?3");
  s->bind(1, k.name).bind(2, k.template_hash).bind(3, k.definition_hash);
  return single_id(s);
}

std::int64_t Store::ensure_device(const DeviceInfo& d) {
  if (auto id = find_device(d)) return *id;
  require_writable("add a device");
  Transaction transaction(db_);
  db_.prepare(
         "INSERT OR IGNORE INTO devices(name, arch, sm_count, memory_bytes, driver_version) "
         "VALUES(?1, ?2, ?3, ?4, ?5)")
      .bind(1, d.name)
      .bind(2, d.arch)
      .bind(3, d.sm_count)
      .bind(4, d.memory_bytes)
      .bind(5, d.driver_version)
      .run();
  auto id = find_device(d);
  transaction.commit();
  return *id;
}

std::int64_t Store::ensure_toolchain(const ToolchainInfo& t) {
  if (auto id = find_toolchain(t)) return *id;
  require_writable("add a toolchain");
  Transaction transaction(db_);
  db_.prepare("INSERT OR IGNORE INTO toolchains(nvrtc_version, mlatune_version) VALUES(?1, ?2)")
      .bind(1, t.nvrtc_version)
      .bind(2, t.mlatune_version)
      .run();
  auto id = find_toolchain(t);
  transaction.commit();
  return *id;
}

std::int64_t Store::ensure_kernel(const KernelInfo& k) {
  if (auto id = find_kernel(k)) return *id;
  require_writable("add a kernel");
  Transaction transaction(db_);
  db_.prepare("INSERT OR IGNORE INTO kernels(name, template_hash, definition_hash) VALUES(?1, ?2, ?3)")
      .bind(1, k.name)
      .bind(2, k.template_hash)
      .bind(3, k.definition_hash)
      .run();
  auto id = find_kernel(k);
  transaction.commit();
  return *id;
}

// ---- runs and measurements ---------------------------------------------------------------

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
  if (m.outcome == Outcome::ok && !m.timing) {
    throw InputError(fmt::format("record: an ok measurement of {} at {} has no timing", m.config, m.shape));
  }
  // SQLite would store a NaN as NULL; a best entry must compare as a number.
  if (m.timing && !(std::isfinite(m.timing->median_us) && m.timing->median_us >= 0)) {
    throw InputError(fmt::format("record: {} at {} has median {} us", m.config, m.shape, m.timing->median_us));
  }
  Transaction transaction(db_);
  static const std::string insert_sql = fmt::format(
      "INSERT INTO measurements(run_id, kernel_id, device_id, toolchain_id, shape, config, outcome, "
      "median_us, min_us, p90_us, samples, spread, timing_method, relative_l2, max_abs, registers, "
      "spill_stores, spill_loads, stack_frame, shared_bytes, message, measured_at) "
      "SELECT id, kernel_id, device_id, toolchain_id, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, "
      "?14, ?15, ?16, ?17, ?18, {} FROM runs WHERE id = ?1",
      now_sql);
  auto insert = statements_.get(db_, insert_sql);
  insert->bind(1, m.run_id).bind(2, m.shape).bind(3, m.config).bind(4, std::string(to_string(m.outcome)));
  if (m.timing) {
    insert->bind(5, m.timing->median_us)
        .bind(6, m.timing->min_us)
        .bind(7, m.timing->p90_us)
        .bind(8, m.timing->samples)
        .bind(9, m.timing->spread)
        .bind(10, m.timing->method);
  } else {
    for (int i = 5; i <= 10; ++i) insert->bind_null(i);
  }
  if (m.error) {
    insert->bind(11, m.error->relative_l2).bind(12, m.error->max_abs);
  } else {
    insert->bind_null(11).bind_null(12);
  }
  if (m.resources) {
    insert->bind(13, m.resources->registers)
        .bind(14, m.resources->spill_store_bytes)
        .bind(15, m.resources->spill_load_bytes)
        .bind(16, m.resources->stack_frame_bytes)
        .bind(17, m.resources->shared_bytes);
  } else {
    insert->bind_null(13).bind_null(14).bind_null(15).bind_null(16).bind_null(17);
  }
  insert->bind(18, m.message);
  insert->run();
  if (db_.changes() != 1) throw InputError(fmt::format("record: no run with id {}", m.run_id));
  std::int64_t id = db_.last_insert_rowid();
  if (m.outcome == Outcome::ok) {
    // Strictly faster only: on a tie the earlier measurement stays best.
    auto update = statements_.get(
        db_,
        "INSERT INTO best(kernel_id, device_id, toolchain_id, shape, config, median_us, measurement_id) "
        "SELECT kernel_id, device_id, toolchain_id, shape, config, median_us, id FROM measurements "
        "WHERE id = ?1 "
        "ON CONFLICT(kernel_id, device_id, toolchain_id, shape) DO UPDATE SET config = excluded.config, "
        "median_us = excluded.median_us, measurement_id = excluded.measurement_id "
        "WHERE excluded.median_us < best.median_us");
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
      measurement_columns));
  s.bind(1, filter.kernel_name).bind(2, filter.shape);
  std::vector<MeasurementRecord> result;
  while (s.step()) result.push_back(read_measurement(s));
  return result;
}

std::int64_t Store::measurement_count() { return count_rows(db_, "SELECT count(*) FROM measurements"); }

// ---- best ------------------------------------------------------------------------------------

std::optional<BestEntry> Store::best(std::int64_t kernel_id, std::int64_t device_id, std::int64_t toolchain_id,
                                     const std::string& shape) {
  auto s = statements_.get(
      db_,
      "SELECT kernel_id, device_id, toolchain_id, shape, config, median_us, measurement_id FROM best "
      "WHERE kernel_id = ?1 AND device_id = ?2 AND toolchain_id = ?3 AND shape = ?4");
  s->bind(1, kernel_id).bind(2, device_id).bind(3, toolchain_id).bind(4, shape);
  if (!s->step()) return std::nullopt;
  return read_best(*s, 0);
}

std::optional<BestEntry> Store::best(const KernelInfo& kernel, const DeviceInfo& device,
                                     const ToolchainInfo& toolchain, const std::string& shape) {
  auto s = statements_.get(
      db_,
      "SELECT b.kernel_id, b.device_id, b.toolchain_id, b.shape, b.config, b.median_us, b.measurement_id "
      "FROM kernels k JOIN devices d JOIN toolchains t "
      "JOIN best b ON b.kernel_id = k.id AND b.device_id = d.id AND b.toolchain_id = t.id AND b.shape = ?11 "
      "WHERE k.name = ?1 AND k.template_hash = ?2 AND k.definition_hash = ?3 "
      "AND d.name = ?4 AND d.arch = ?5 AND d.sm_count = ?6 AND d.memory_bytes = ?7 AND d.driver_version = ?8 "
      "AND t.nvrtc_version = ?9 AND t.mlatune_version = ?10");
  s->bind(1, kernel.name)
      .bind(2, kernel.template_hash)
      .bind(3, kernel.definition_hash)
      .bind(4, device.name)
      .bind(5, device.arch)
      .bind(6, device.sm_count)
      .bind(7, device.memory_bytes)
      .bind(8, device.driver_version)
      .bind(9, toolchain.nvrtc_version)
      .bind(10, toolchain.mlatune_version)
      .bind(11, shape);
  if (!s->step()) return std::nullopt;
  return read_best(*s, 0);
}

std::vector<BestRecord> Store::all_best() {
  auto s = db_.prepare(
      "SELECT k.name, k.template_hash, k.definition_hash, d.name, d.arch, d.sm_count, d.memory_bytes, "
      "d.driver_version, t.nvrtc_version, t.mlatune_version, b.kernel_id, b.device_id, b.toolchain_id, "
      "b.shape, b.config, b.median_us, b.measurement_id FROM best b JOIN kernels k ON k.id = b.kernel_id "
      "JOIN devices d ON d.id = b.device_id JOIN toolchains t ON t.id = b.toolchain_id "
      "ORDER BY k.name, d.name, b.shape");
  std::vector<BestRecord> result;
  while (s.step()) {
    BestRecord r;
    r.kernel = {s.column_text(0), s.column_text(1), s.column_text(2)};
    r.device = {s.column_text(3), s.column_text(4), static_cast<int>(s.column_int64(5)), s.column_int64(6),
                s.column_text(7)};
    r.toolchain = {s.column_text(8), s.column_text(9)};
    r.entry = read_best(s, 10);
    result.push_back(std::move(r));
  }
  return result;
}

// ---- binaries ----------------------------------------------------------------------------------

void Store::put_binary(const BinaryRecord& b) {
  require_writable("store a binary");
  Transaction transaction(db_);
  db_.prepare(fmt::format(
                  "INSERT OR IGNORE INTO binaries(key, kernel_name, template_hash, nvrtc_version, arch, cubin, "
                  "resources, created_at) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, {})",
                  now_sql))
      .bind(1, b.key)
      .bind(2, b.kernel_name)
      .bind(3, b.template_hash)
      .bind(4, b.nvrtc_version)
      .bind(5, b.arch)
      .bind_blob(6, b.cubin)
      .bind(7, b.resources_json)
      .run();
  transaction.commit();
}

std::optional<BinaryRecord> Store::get_binary(const std::string& key) {
  auto s = statements_.get(db_,
                           "SELECT key, kernel_name, template_hash, nvrtc_version, arch, cubin, resources "
                           "FROM binaries WHERE key = ?1");
  s->bind(1, key);
  if (!s->step()) return std::nullopt;
  return BinaryRecord{s->column_text(0), s->column_text(1), s->column_text(2), s->column_text(3),
                      s->column_text(4), s->column_blob(5), s->column_text(6)};
}

// ---- misses ------------------------------------------------------------------------------------

bool Store::record_miss(std::int64_t kernel_id, std::int64_t device_id, const std::string& shape) {
  if (read_only_) return false;
  Transaction transaction(db_);
  db_.prepare(fmt::format(
                  "INSERT INTO misses(kernel_id, device_id, shape, count, first_seen, last_seen) "
                  "VALUES(?1, ?2, ?3, 1, {0}, {0}) ON CONFLICT(kernel_id, device_id, shape) "
                  "DO UPDATE SET count = count + 1, last_seen = excluded.last_seen",
                  now_sql))
      .bind(1, kernel_id)
      .bind(2, device_id)
      .bind(3, shape)
      .run();
  transaction.commit();
  return true;
}

std::vector<MissRecord> Store::misses() {
  auto s = db_.prepare(
      "SELECT k.name, d.name, x.shape, x.count, x.last_seen FROM misses x JOIN kernels k ON k.id = x.kernel_id "
      "JOIN devices d ON d.id = x.device_id ORDER BY x.count DESC, k.name, x.shape");
  std::vector<MissRecord> result;
  while (s.step()) {
    result.push_back(MissRecord{s.column_text(0), s.column_text(1), s.column_text(2), s.column_int64(3),
                                s.column_text(4)});
  }
  return result;
}

// ---- stale and prune ---------------------------------------------------------------------------

struct Store::StaleIds {
  std::vector<std::pair<std::int64_t, StaleEntry>> kernels;
  std::vector<std::pair<std::int64_t, StaleEntry>> toolchains;
  std::vector<std::pair<std::string, StaleEntry>> binaries;
};

Store::StaleIds Store::find_stale(const CurrentVersions& current) {
  StaleIds found;
  auto kernels = db_.prepare("SELECT id, name, template_hash, definition_hash FROM kernels ORDER BY id");
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
    found.kernels.emplace_back(kernels.column_int64(0), std::move(entry));
  }
  if (!current.nvrtc_version.empty()) {
    auto toolchains = db_.prepare("SELECT id, nvrtc_version, mlatune_version FROM toolchains ORDER BY id");
    while (toolchains.step()) {
      std::string nvrtc = toolchains.column_text(1);
      if (nvrtc == current.nvrtc_version) continue;
      StaleEntry entry;
      entry.kind = StaleEntry::Kind::toolchain;
      entry.description = fmt::format("toolchain NVRTC {} mlatune {}", nvrtc, toolchains.column_text(2));
      entry.reason = fmt::format("NVRTC is now {}", current.nvrtc_version);
      found.toolchains.emplace_back(toolchains.column_int64(0), std::move(entry));
    }
  }
  auto binaries = db_.prepare("SELECT key, kernel_name, template_hash, nvrtc_version, arch FROM binaries ORDER BY key");
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
    found.binaries.emplace_back(binaries.column_text(0), std::move(entry));
  }
  for (auto& [id, entry] : found.kernels) {
    entry.runs = count_by_id(db_, "SELECT count(*) FROM runs WHERE kernel_id = ?1", id);
    entry.measurements = count_by_id(db_, "SELECT count(*) FROM measurements WHERE kernel_id = ?1", id);
    entry.best = count_by_id(db_, "SELECT count(*) FROM best WHERE kernel_id = ?1", id);
  }
  for (auto& [id, entry] : found.toolchains) {
    entry.runs = count_by_id(db_, "SELECT count(*) FROM runs WHERE toolchain_id = ?1", id);
    entry.measurements = count_by_id(db_, "SELECT count(*) FROM measurements WHERE toolchain_id = ?1", id);
    entry.best = count_by_id(db_, "SELECT count(*) FROM best WHERE toolchain_id = ?1", id);
  }
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

// ---- merge ---------------------------------------------------------------------------------------

MergeCounts Store::merge(const std::filesystem::path& other) {
  require_writable("merge into it");
  {
    // The other file gets the same scrutiny as our own, and must be at our
    // schema version (open it with this mlatune once to migrate it).
    Store source = Store::open(other, StoreMode::read_only);
  }
  std::error_code ec;
  if (std::filesystem::equivalent(other, path_, ec)) {
    throw InputError(fmt::format("merge: {} is this database itself", other.string()));
  }
  db_.prepare("ATTACH DATABASE ?1 AS other").bind(1, sqlite::file_uri(other, "mode=ro")).run();
  // Detach however the merge ends; a failure to detach leaves only a
  // harmless attachment on this connection.
  struct Detach {
    Connection& db;
    ~Detach() {
      try {
        db.execute("DETACH DATABASE other");
      } catch (const std::exception&) {
      }
    }
  } detach{db_};

  MergeCounts counts;
  Transaction transaction(db_);
  std::int64_t last_measurement = count_rows(db_, "SELECT coalesce(max(id), 0) FROM main.measurements");
  db_.execute(
      "INSERT OR IGNORE INTO main.devices(name, arch, sm_count, memory_bytes, driver_version) "
      "SELECT name, arch, sm_count, memory_bytes, driver_version FROM other.devices;"
      "INSERT OR IGNORE INTO main.toolchains(nvrtc_version, mlatune_version) "
      "SELECT nvrtc_version, mlatune_version FROM other.toolchains;"
      "INSERT OR IGNORE INTO main.kernels(name, template_hash, definition_hash) "
      "SELECT name, template_hash, definition_hash FROM other.kernels;");

  // Other ids mapped to ours through the natural keys.
  constexpr const char* mapped_run =
      "FROM other.runs o "
      "JOIN other.kernels ok ON ok.id = o.kernel_id "
      "JOIN main.kernels k ON k.name = ok.name AND k.template_hash = ok.template_hash "
      "  AND k.definition_hash = ok.definition_hash "
      "JOIN other.devices od ON od.id = o.device_id "
      "JOIN main.devices d ON d.name = od.name AND d.arch = od.arch AND d.sm_count = od.sm_count "
      "  AND d.memory_bytes = od.memory_bytes AND d.driver_version = od.driver_version "
      "JOIN other.toolchains ot ON ot.id = o.toolchain_id "
      "JOIN main.toolchains t ON t.nvrtc_version = ot.nvrtc_version AND t.mlatune_version = ot.mlatune_version ";
  std::int64_t runs_before = count_rows(db_, "SELECT count(*) FROM main.runs");
  db_.execute(fmt::format(
      "INSERT INTO main.runs(uuid, kernel_id, device_id, toolchain_id, space_path, space_text, strategy, "
      "strategy_settings, started_at, finished_at, status) "
      "SELECT o.uuid, k.id, d.id, t.id, o.space_path, o.space_text, o.strategy, o.strategy_settings, "
      "o.started_at, o.finished_at, o.status {} WHERE true "
      // A run we saw still running may have finished in the other file.
      "ON CONFLICT(uuid) DO UPDATE SET finished_at = excluded.finished_at, status = excluded.status "
      "WHERE main.runs.finished_at IS NULL AND excluded.finished_at IS NOT NULL",
      mapped_run));
  counts.runs = count_rows(db_, "SELECT count(*) FROM main.runs") - runs_before;

  // A measurement's natural key: its run (by uuid), shape, config, outcome,
  // time and when it was taken.
  db_.execute(
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
  counts.measurements = count_by_id(db_, "SELECT count(*) FROM main.measurements WHERE id > ?1", last_measurement);

  // Best entries move only for new measurements, and only where strictly
  // faster; device and toolchain are part of the key, so results of other
  // devices or toolchains never compete.
  db_.prepare(
         "INSERT INTO main.best(kernel_id, device_id, toolchain_id, shape, config, median_us, measurement_id) "
         "SELECT kernel_id, device_id, toolchain_id, shape, config, median_us, id FROM ("
         "  SELECT *, row_number() OVER (PARTITION BY kernel_id, device_id, toolchain_id, shape "
         "                               ORDER BY median_us, id) AS rank "
         "  FROM main.measurements WHERE id > ?1 AND outcome = 'ok') "
         "WHERE rank = 1 "
         "ON CONFLICT(kernel_id, device_id, toolchain_id, shape) DO UPDATE SET config = excluded.config, "
         "median_us = excluded.median_us, measurement_id = excluded.measurement_id "
         "WHERE excluded.median_us < main.best.median_us")
      .bind(1, last_measurement)
      .run();
  counts.best_changed = db_.changes();

  std::int64_t binaries_before = count_rows(db_, "SELECT count(*) FROM main.binaries");
  db_.execute(
      "INSERT OR IGNORE INTO main.binaries(key, kernel_name, template_hash, nvrtc_version, arch, cubin, "
      "resources, created_at) SELECT key, kernel_name, template_hash, nvrtc_version, arch, cubin, resources, "
      "created_at FROM other.binaries");
  counts.binaries = count_rows(db_, "SELECT count(*) FROM main.binaries") - binaries_before;

  // Counts are per file; taking the larger keeps a second merge a no-op.
  db_.execute(
      "INSERT INTO main.misses(kernel_id, device_id, shape, count, first_seen, last_seen) "
      "SELECT k.id, d.id, x.shape, x.count, x.first_seen, x.last_seen FROM other.misses x "
      "JOIN other.kernels ok ON ok.id = x.kernel_id "
      "JOIN main.kernels k ON k.name = ok.name AND k.template_hash = ok.template_hash "
      "  AND k.definition_hash = ok.definition_hash "
      "JOIN other.devices od ON od.id = x.device_id "
      "JOIN main.devices d ON d.name = od.name AND d.arch = od.arch AND d.sm_count = od.sm_count "
      "  AND d.memory_bytes = od.memory_bytes AND d.driver_version = od.driver_version WHERE true "
      "ON CONFLICT(kernel_id, device_id, shape) DO UPDATE SET count = max(count, excluded.count), "
      "first_seen = min(first_seen, excluded.first_seen), last_seen = max(last_seen, excluded.last_seen)");
  transaction.commit();
  return counts;
}

// ---- maintenance -----------------------------------------------------------------------------------

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
