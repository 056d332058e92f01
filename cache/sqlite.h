// Thin RAII owners over the SQLite C API: a connection, a prepared statement
// and a transaction that rolls back unless committed.  sqlite3.h stays in
// sqlite.cpp; callers see only these types.  Every SQLite return code is
// checked; a failure throws sqlite::Error, which keeps the result code, its
// name ("SQLITE_BUSY") and the SQL that failed.
//
// SQL text is always a constant written in the code; values travel only as
// bound parameters.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"

struct sqlite3;
struct sqlite3_stmt;

namespace mlatune::sqlite {

/// A failed SQLite call: the call, the result code and its name, the
/// database's message and the SQL (when a statement was involved).
class Error : public EnvironmentError {
 public:
  Error(std::string call, int code, std::string detail, std::string sql);
  int code() const { return code_; }
  /// Primary result code (code() & 0xff).
  int primary_code() const { return code_ & 0xff; }
  /// "SQLITE_BUSY", "SQLITE_IOERR_WRITE", ...
  const std::string& code_name() const { return code_name_; }
  const std::string& sql() const { return sql_; }
  /// Another connection holds the lock (SQLITE_BUSY or SQLITE_LOCKED).
  bool busy() const;
  /// The file is not a database or is damaged (SQLITE_NOTADB, SQLITE_CORRUPT).
  bool not_a_database() const;
  /// A write on a read-only connection or file (SQLITE_READONLY*).
  bool read_only() const;

 private:
  int code_;
  std::string code_name_;
  std::string sql_;
};

/// Name of an SQLite result code, e.g. "SQLITE_CORRUPT".
std::string result_code_name(int code);

/// A "file:" URI for `path` (made absolute, with URI-special characters
/// escaped) and an optional query such as "mode=ro".
std::string file_uri(const std::filesystem::path& path, std::string_view query = {});

enum class OpenMode {
  read_write_create,  // create the file if it is missing
  read_only,
  /// Read-only and `immutable=1`: no locks and no -shm, so it works on a
  /// read-only file system; only safe when nobody writes the file meanwhile.
  read_only_immutable,
};

class Statement;

/// An open database connection (move-only owner of sqlite3*).
class Connection {
 public:
  static Connection open(const std::filesystem::path& path, OpenMode mode);
  /// A private in-memory database.
  static Connection open_memory();

  Connection(Connection&&) noexcept;
  Connection& operator=(Connection&&) noexcept;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;
  ~Connection();

  /// Runs constant SQL text (one or more statements, no parameters).
  void execute(std::string_view sql);
  Statement prepare(std::string_view sql);
  void set_busy_timeout(int milliseconds);
  std::int64_t last_insert_rowid() const;
  /// Rows changed by the last INSERT/UPDATE/DELETE.
  std::int64_t changes() const;
  bool read_only() const;
  const std::filesystem::path& path() const { return path_; }
  sqlite3* handle() const { return db_; }

 private:
  Connection(sqlite3* db, std::filesystem::path path) : db_(db), path_(std::move(path)) {}
  sqlite3* db_ = nullptr;
  std::filesystem::path path_;
};

/// A prepared statement (move-only owner of sqlite3_stmt*).  Parameters are
/// 1-based, columns 0-based, as in the C API.
class Statement {
 public:
  Statement(Statement&&) noexcept;
  Statement& operator=(Statement&&) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;
  ~Statement();

  Statement& bind(int index, std::int64_t value);
  Statement& bind(int index, int value) { return bind(index, static_cast<std::int64_t>(value)); }
  Statement& bind(int index, double value);
  Statement& bind(int index, std::string_view text);
  Statement& bind(int index, const char* text) { return bind(index, std::string_view(text)); }
  Statement& bind(int index, const std::string& text) { return bind(index, std::string_view(text)); }
  Statement& bind_blob(int index, const std::vector<std::uint8_t>& bytes);
  Statement& bind_null(int index);
  template <class T>
  Statement& bind(int index, const std::optional<T>& value) {
    return value ? bind(index, *value) : bind_null(index);
  }

  /// Advances; true while a row is available.
  bool step();
  /// Steps once and expects no row (INSERT/UPDATE/DELETE).
  void run();
  /// Makes the statement ready to run again; bindings are cleared.
  void reset();

  bool is_null(int column) const;
  std::int64_t column_int64(int column) const;
  double column_double(int column) const;
  std::string column_text(int column) const;
  std::vector<std::uint8_t> column_blob(int column) const;
  std::optional<std::int64_t> column_optional_int64(int column) const;
  std::optional<double> column_optional_double(int column) const;
  int column_count() const;
  std::string column_name(int column) const;

 private:
  friend class Connection;
  Statement(sqlite3_stmt* stmt, sqlite3* db) : stmt_(stmt), db_(db) {}
  void check_bind(int rc, int index);
  sqlite3_stmt* stmt_ = nullptr;
  sqlite3* db_ = nullptr;
};

/// Prepared statements kept for reuse, by SQL text, for one connection.
/// A statement is lent out reset and taken back reset, so that no statement
/// left mid-result keeps a read transaction (an old WAL snapshot) open.
class StatementCache {
 public:
  /// A borrowed statement; resets it when it goes out of scope.
  class Lease {
   public:
    explicit Lease(Statement& statement) : statement_(&statement) {}
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { statement_->reset(); }
    Statement& operator*() const { return *statement_; }
    Statement* operator->() const { return statement_; }

   private:
    Statement* statement_;
  };

  /// The statement for `sql` on `connection`, prepared on first use.  One
  /// lease per SQL text at a time.
  Lease get(Connection& connection, const std::string& sql);
  void clear() { statements_.clear(); }

 private:
  std::unordered_map<std::string, Statement> statements_;
};

/// A transaction that rolls back on destruction unless commit() was called.
/// Writers use `immediate`: the write lock is taken at BEGIN, where the busy
/// timeout applies, so SQLITE_BUSY cannot arise later from a lock upgrade.
class Transaction {
 public:
  enum class Kind { deferred, immediate };
  explicit Transaction(Connection& connection, Kind kind = Kind::immediate);
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;
  ~Transaction();
  void commit();

 private:
  Connection* connection_;
  bool open_ = true;
};

}  // namespace mlatune::sqlite
