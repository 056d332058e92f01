#include "cache/sqlite.h"

#include <sqlite3.h>

#include <fmt/format.h>

#include <utility>

namespace mlatune::sqlite {

namespace {

std::string describe(const std::string& call, int code, const std::string& detail, const std::string& sql) {
  std::string text = fmt::format("SQLite {} failed: {} ({})", call, result_code_name(code), detail);
  if (!sql.empty()) text += fmt::format(" in SQL: {}", sql);
  return text;
}

std::string message_of(sqlite3* db, int code) {
  if (db != nullptr) return sqlite3_errmsg(db);
  return sqlite3_errstr(code);
}

}  // namespace

Error::Error(std::string call, int code, std::string detail, std::string sql)
    : EnvironmentError(describe(call, code, detail, sql)),
      code_(code),
      code_name_(result_code_name(code)),
      sql_(std::move(sql)) {}

bool Error::busy() const { return primary_code() == SQLITE_BUSY || primary_code() == SQLITE_LOCKED; }

bool Error::not_a_database() const { return primary_code() == SQLITE_NOTADB || primary_code() == SQLITE_CORRUPT; }

bool Error::read_only() const { return primary_code() == SQLITE_READONLY; }

std::string file_uri(const std::filesystem::path& path, std::string_view query) {
  // '?' and '#' would end the path part; '%' starts an escape.
  std::string uri = "file:";
  for (unsigned char c : std::filesystem::absolute(path).string()) {
    if (c == '%' || c == '?' || c == '#' || c <= ' ' || c >= 0x7f) {
      uri += fmt::format("%{:02X}", c);
    } else {
      uri += static_cast<char>(c);
    }
  }
  if (!query.empty()) {
    uri += '?';
    uri += query;
  }
  return uri;
}

std::string result_code_name(int code) {
  switch (code) {
    case SQLITE_OK: return "SQLITE_OK";
    case SQLITE_ERROR: return "SQLITE_ERROR";
    case SQLITE_INTERNAL: return "SQLITE_INTERNAL";
    case SQLITE_PERM: return "SQLITE_PERM";
    case SQLITE_ABORT: return "SQLITE_ABORT";
    case SQLITE_BUSY: return "SQLITE_BUSY";
    case SQLITE_BUSY_SNAPSHOT: return "SQLITE_BUSY_SNAPSHOT";
    case SQLITE_BUSY_RECOVERY: return "SQLITE_BUSY_RECOVERY";
    case SQLITE_LOCKED: return "SQLITE_LOCKED";
    case SQLITE_NOMEM: return "SQLITE_NOMEM";
    case SQLITE_READONLY: return "SQLITE_READONLY";
    case SQLITE_READONLY_RECOVERY: return "SQLITE_READONLY_RECOVERY";
    case SQLITE_READONLY_CANTINIT: return "SQLITE_READONLY_CANTINIT";
    case SQLITE_READONLY_DIRECTORY: return "SQLITE_READONLY_DIRECTORY";
    case SQLITE_INTERRUPT: return "SQLITE_INTERRUPT";
    case SQLITE_IOERR: return "SQLITE_IOERR";
    case SQLITE_IOERR_READ: return "SQLITE_IOERR_READ";
    case SQLITE_IOERR_SHORT_READ: return "SQLITE_IOERR_SHORT_READ";
    case SQLITE_IOERR_WRITE: return "SQLITE_IOERR_WRITE";
    case SQLITE_IOERR_FSYNC: return "SQLITE_IOERR_FSYNC";
    case SQLITE_IOERR_SHMOPEN: return "SQLITE_IOERR_SHMOPEN";
    case SQLITE_CORRUPT: return "SQLITE_CORRUPT";
    case SQLITE_NOTFOUND: return "SQLITE_NOTFOUND";
    case SQLITE_FULL: return "SQLITE_FULL";
    case SQLITE_CANTOPEN: return "SQLITE_CANTOPEN";
    case SQLITE_PROTOCOL: return "SQLITE_PROTOCOL";
    case SQLITE_SCHEMA: return "SQLITE_SCHEMA";
    case SQLITE_TOOBIG: return "SQLITE_TOOBIG";
    case SQLITE_CONSTRAINT: return "SQLITE_CONSTRAINT";
    case SQLITE_CONSTRAINT_UNIQUE: return "SQLITE_CONSTRAINT_UNIQUE";
    case SQLITE_CONSTRAINT_PRIMARYKEY: return "SQLITE_CONSTRAINT_PRIMARYKEY";
    case SQLITE_CONSTRAINT_FOREIGNKEY: return "SQLITE_CONSTRAINT_FOREIGNKEY";
    case SQLITE_CONSTRAINT_NOTNULL: return "SQLITE_CONSTRAINT_NOTNULL";
    case SQLITE_CONSTRAINT_CHECK: return "SQLITE_CONSTRAINT_CHECK";
    case SQLITE_MISMATCH: return "SQLITE_MISMATCH";
    case SQLITE_MISUSE: return "SQLITE_MISUSE";
    case SQLITE_NOLFS: return "SQLITE_NOLFS";
    case SQLITE_AUTH: return "SQLITE_AUTH";
    case SQLITE_RANGE: return "SQLITE_RANGE";
    case SQLITE_NOTADB: return "SQLITE_NOTADB";
    case SQLITE_ROW: return "SQLITE_ROW";
    case SQLITE_DONE: return "SQLITE_DONE";
    default: break;
  }
  // An extended code without its own entry: name the primary code.
  if ((code & 0xff) != code) return fmt::format("{}/{}", result_code_name(code & 0xff), code);
  return fmt::format("SQLITE_UNKNOWN_{}", code);
}

// ---- Connection --------------------------------------------------------------

Connection Connection::open(const std::filesystem::path& path, OpenMode mode) {
  int flags = SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX;
  std::string name = path.string();
  switch (mode) {
    case OpenMode::read_write_create: flags |= SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE; break;
    case OpenMode::read_only: flags |= SQLITE_OPEN_READONLY; break;
    case OpenMode::read_only_immutable: flags |= SQLITE_OPEN_READONLY; break;
  }
  // Open through a file: URI so that the immutable flag can be passed.
  std::string uri = file_uri(path, mode == OpenMode::read_only_immutable ? "immutable=1" : "");
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(uri.c_str(), &db, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string detail = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    throw Error("sqlite3_open_v2", rc, fmt::format("{}: {}", name, detail), "");
  }
  sqlite3_extended_result_codes(db, 1);
  return Connection(db, path);
}

Connection Connection::open_memory() {
  sqlite3* db = nullptr;
  int rc = sqlite3_open_v2(":memory:", &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    std::string detail = db ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    throw Error("sqlite3_open_v2", rc, detail, "");
  }
  sqlite3_extended_result_codes(db, 1);
  return Connection(db, ":memory:");
}

Connection::Connection(Connection&& other) noexcept
    : db_(std::exchange(other.db_, nullptr)), path_(std::move(other.path_)) {}

Connection& Connection::operator=(Connection&& other) noexcept {
  if (this != &other) {
    if (db_ != nullptr) sqlite3_close_v2(db_);
    db_ = std::exchange(other.db_, nullptr);
    path_ = std::move(other.path_);
  }
  return *this;
}

Connection::~Connection() {
  // close_v2 defers the close until outstanding statements are finalized; its
  // result cannot be reported from a destructor.
  if (db_ != nullptr) sqlite3_close_v2(db_);
}

void Connection::execute(std::string_view sql) {
  std::string text(sql);
  char* message = nullptr;
  int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &message);
  if (rc != SQLITE_OK) {
    std::string detail = message ? message : sqlite3_errstr(rc);
    sqlite3_free(message);
    throw Error("sqlite3_exec", sqlite3_extended_errcode(db_), detail, text);
  }
}

Statement Connection::prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v2(db_, sql.data(), static_cast<int>(sql.size()), &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    throw Error("sqlite3_prepare_v2", sqlite3_extended_errcode(db_), message_of(db_, rc), std::string(sql));
  }
  return Statement(stmt, db_);
}

void Connection::set_busy_timeout(int milliseconds) {
  int rc = sqlite3_busy_timeout(db_, milliseconds);
  if (rc != SQLITE_OK) throw Error("sqlite3_busy_timeout", rc, message_of(db_, rc), "");
}

std::int64_t Connection::last_insert_rowid() const { return sqlite3_last_insert_rowid(db_); }

std::int64_t Connection::changes() const { return sqlite3_changes64(db_); }

bool Connection::read_only() const { return sqlite3_db_readonly(db_, "main") == 1; }

// ---- Statement ---------------------------------------------------------------

Statement::Statement(Statement&& other) noexcept
    : stmt_(std::exchange(other.stmt_, nullptr)), db_(other.db_) {}

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    if (stmt_ != nullptr) sqlite3_finalize(stmt_);
    stmt_ = std::exchange(other.stmt_, nullptr);
    db_ = other.db_;
  }
  return *this;
}

Statement::~Statement() {
  // finalize repeats the last step's error, which was already reported.
  if (stmt_ != nullptr) sqlite3_finalize(stmt_);
}

void Statement::check_bind(int rc, int index) {
  if (rc != SQLITE_OK) {
    throw Error(fmt::format("sqlite3_bind (parameter {})", index), rc, message_of(db_, rc),
                sqlite3_sql(stmt_));
  }
}

Statement& Statement::bind(int index, std::int64_t value) {
  check_bind(sqlite3_bind_int64(stmt_, index, value), index);
  return *this;
}

Statement& Statement::bind(int index, double value) {
  check_bind(sqlite3_bind_double(stmt_, index, value), index);
  return *this;
}

Statement& Statement::bind(int index, std::string_view text) {
  check_bind(sqlite3_bind_text64(stmt_, index, text.data(), text.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
             index);
  return *this;
}

Statement& Statement::bind_blob(int index, const std::vector<std::uint8_t>& bytes) {
  // A zero-length blob is still a blob, not NULL.
  if (bytes.empty()) {
    check_bind(sqlite3_bind_zeroblob(stmt_, index, 0), index);
  } else {
    check_bind(sqlite3_bind_blob64(stmt_, index, bytes.data(), bytes.size(), SQLITE_TRANSIENT), index);
  }
  return *this;
}

Statement& Statement::bind_null(int index) {
  check_bind(sqlite3_bind_null(stmt_, index), index);
  return *this;
}

bool Statement::step() {
  int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  int code = sqlite3_extended_errcode(db_);
  std::string detail = sqlite3_errmsg(db_);
  std::string sql = sqlite3_sql(stmt_);
  sqlite3_reset(stmt_);
  throw Error("sqlite3_step", code, detail, sql);
}

void Statement::run() {
  if (step()) {
    std::string sql = sqlite3_sql(stmt_);
    sqlite3_reset(stmt_);
    throw Error("sqlite3_step", SQLITE_MISUSE, "statement returned a row where none was expected", sql);
  }
}

void Statement::reset() {
  // The result of reset repeats the last step's error, already thrown there.
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

bool Statement::is_null(int column) const { return sqlite3_column_type(stmt_, column) == SQLITE_NULL; }

std::int64_t Statement::column_int64(int column) const { return sqlite3_column_int64(stmt_, column); }

double Statement::column_double(int column) const { return sqlite3_column_double(stmt_, column); }

std::string Statement::column_text(int column) const {
  const unsigned char* text = sqlite3_column_text(stmt_, column);
  int size = sqlite3_column_bytes(stmt_, column);
  if (text == nullptr) return {};
  return std::string(reinterpret_cast<const char*>(text), static_cast<std::size_t>(size));
}

std::vector<std::uint8_t> Statement::column_blob(int column) const {
  const void* data = sqlite3_column_blob(stmt_, column);
  int size = sqlite3_column_bytes(stmt_, column);
  if (data == nullptr || size <= 0) return {};
  const auto* bytes = static_cast<const std::uint8_t*>(data);
  return std::vector<std::uint8_t>(bytes, bytes + size);
}

std::optional<std::int64_t> Statement::column_optional_int64(int column) const {
  if (is_null(column)) return std::nullopt;
  return column_int64(column);
}

std::optional<double> Statement::column_optional_double(int column) const {
  if (is_null(column)) return std::nullopt;
  return column_double(column);
}

int Statement::column_count() const { return sqlite3_column_count(stmt_); }

std::string Statement::column_name(int column) const {
  const char* name = sqlite3_column_name(stmt_, column);
  return name ? name : "";
}

// ---- StatementCache ------------------------------------------------------------

StatementCache::Lease StatementCache::get(Connection& connection, const std::string& sql) {
  auto found = statements_.find(sql);
  if (found == statements_.end()) {
    found = statements_.emplace(sql, connection.prepare(sql)).first;
  }
  return Lease(found->second);
}

// ---- Transaction -------------------------------------------------------------

Transaction::Transaction(Connection& connection, Kind kind) : connection_(&connection) {
  connection_->execute(kind == Kind::immediate ? "BEGIN IMMEDIATE" : "BEGIN");
}

Transaction::~Transaction() {
  if (!open_) return;
  // Rollback fails only when SQLite already rolled back on its own (e.g. after
  // SQLITE_FULL); either way the transaction is gone, and a destructor must
  // not throw.
  sqlite3_exec(connection_->handle(), "ROLLBACK", nullptr, nullptr, nullptr);
}

void Transaction::commit() {
  connection_->execute("COMMIT");
  open_ = false;
}

}  // namespace mlatune::sqlite
