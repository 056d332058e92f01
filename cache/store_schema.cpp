// The store's file: its schema and forward migrations, the checks a file
// passes before SQLite may write to it, and opening it (cache/store.h).
#include "cache/store.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <fstream>
#include <system_error>
#include <thread>

#include "core/compiler.h"

namespace mlatune {

namespace {

using sqlite::Connection;
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

// A read-only connection to an existing database at this build's schema.
Connection open_for_lookups(const std::filesystem::path& path, bool exists, std::uintmax_t size) {
  if (!exists) throw InputError(fmt::format("{}: no such database", path.string()));
  if (size == 0) throw InputError(fmt::format("{}: empty file, not yet an mlatune database", path.string()));
  check_header(path, size);
  Connection db = open_read_only(path);
  Inspection found = inspect(db, path);
  if (found.version < Store::schema_version) {
    refuse(path, fmt::format("schema version {} is older than this mlatune's ({}); open it once for "
                             "writing to migrate it",
                             found.version, Store::schema_version));
  }
  db.set_busy_timeout(busy_timeout_ms);
  return db;
}

// A read-write connection, the file created or migrated to this build's
// schema.  A 0-byte or missing file is a new database.  Anything else is
// checked through a read-only connection first: a refused file is never
// written.
Connection open_for_writing(const std::filesystem::path& path, bool exists, std::uintmax_t size) {
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
  return db;
}

}  // namespace

ToolchainInfo ToolchainInfo::current() { return ToolchainInfo{mlatune::nvrtc_version(), MLATUNE_VERSION}; }

Store Store::open(const std::filesystem::path& path, StoreMode mode) {
  std::error_code ec;
  bool exists = std::filesystem::exists(path, ec);
  if (ec) throw EnvironmentError(fmt::format("{}: {}", path.string(), ec.message()));
  if (exists && !std::filesystem::is_regular_file(path, ec)) refuse(path, "not a regular file");
  std::uintmax_t size = exists ? std::filesystem::file_size(path, ec) : 0;
  if (ec) throw EnvironmentError(fmt::format("{}: {}", path.string(), ec.message()));
  if (mode == StoreMode::read_only) return Store(open_for_lookups(path, exists, size), path, true);
  return Store(open_for_writing(path, exists, size), path, false);
}

void Store::require_writable(const char* what) const {
  if (read_only_) {
    throw EnvironmentError(fmt::format("{}: opened read-only, cannot {}", path_.string(), what));
  }
}

}  // namespace mlatune
