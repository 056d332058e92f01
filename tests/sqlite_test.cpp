#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <unistd.h>

#include "cache/sqlite.h"

namespace mlatune::sqlite {
namespace {

std::int64_t count(Connection& db, const char* sql) {
  auto s = db.prepare(sql);
  EXPECT_TRUE(s.step());
  return s.column_int64(0);
}

TEST(Sqlite, BindsAndReadsEveryType) {
  auto db = Connection::open_memory();
  db.execute("CREATE TABLE t(i INTEGER, r REAL, s TEXT, b BLOB, n TEXT)");
  std::vector<std::uint8_t> bytes = {0, 1, 2, 255, 0};
  db.prepare("INSERT INTO t VALUES(?1, ?2, ?3, ?4, ?5)")
      .bind(1, std::int64_t{1} << 40)
      .bind(2, 2.5)
      .bind(3, std::string_view("a'b\0c", 5))
      .bind_blob(4, bytes)
      .bind_null(5)
      .run();
  auto s = db.prepare("SELECT i, r, s, b, n FROM t");
  ASSERT_TRUE(s.step());
  EXPECT_EQ(s.column_int64(0), std::int64_t{1} << 40);
  EXPECT_DOUBLE_EQ(s.column_double(1), 2.5);
  EXPECT_EQ(s.column_text(2), std::string("a'b\0c", 5));
  EXPECT_EQ(s.column_blob(3), bytes);
  EXPECT_TRUE(s.is_null(4));
  EXPECT_FALSE(s.column_optional_double(4).has_value());
  EXPECT_EQ(s.column_name(2), "s");
  EXPECT_FALSE(s.step());
}

TEST(Sqlite, EmptyBlobIsNotNull) {
  auto db = Connection::open_memory();
  db.execute("CREATE TABLE t(b BLOB NOT NULL)");
  db.prepare("INSERT INTO t VALUES(?1)").bind_blob(1, {}).run();
  auto s = db.prepare("SELECT length(b), b IS NULL FROM t");
  ASSERT_TRUE(s.step());
  EXPECT_EQ(s.column_int64(0), 0);
  EXPECT_EQ(s.column_int64(1), 0);
}

TEST(Sqlite, ErrorsCarryTheCodeNameAndTheSql) {
  auto db = Connection::open_memory();
  db.execute("CREATE TABLE t(x INTEGER PRIMARY KEY)");
  try {
    db.prepare("SELEKT 1");
    FAIL() << "bad SQL was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code_name(), "SQLITE_ERROR");
    EXPECT_EQ(e.sql(), "SELEKT 1");
    EXPECT_NE(std::string(e.what()).find("sqlite3_prepare_v2"), std::string::npos) << e.what();
  }
  db.prepare("INSERT INTO t VALUES(1)").run();
  try {
    db.prepare("INSERT INTO t VALUES(1)").run();
    FAIL() << "duplicate key was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code_name(), "SQLITE_CONSTRAINT_PRIMARYKEY");
    EXPECT_NE(e.sql().find("INSERT INTO t"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("UNIQUE"), std::string::npos) << e.what();
  }
  try {
    db.prepare("SELECT ?1").bind(2, 1);
    FAIL() << "out-of-range parameter was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code_name(), "SQLITE_RANGE");
  }
}

TEST(Sqlite, ErrorIsAnEnvironmentError) {
  auto db = Connection::open_memory();
  EXPECT_THROW(db.execute("DROP TABLE nothing_here"), EnvironmentError);
}

TEST(Sqlite, ResultCodeNames) {
  EXPECT_EQ(result_code_name(5), "SQLITE_BUSY");
  EXPECT_EQ(result_code_name(26), "SQLITE_NOTADB");
  // An extended code without its own entry names its primary code.
  EXPECT_EQ(result_code_name(10 | (99 << 8)), "SQLITE_IOERR/25354");
}

TEST(Sqlite, FileUrisEscapeWhatWouldEndThePath) {
  EXPECT_EQ(file_uri("/tmp/a?b#c%d e.db", "mode=ro"), "file:/tmp/a%3Fb%23c%25d%20e.db?mode=ro");
  EXPECT_EQ(file_uri("/x.db"), "file:/x.db");
  EXPECT_EQ(file_uri("rel.db").rfind("file:/", 0), 0u);  // made absolute
}

TEST(Sqlite, ANonDatabaseFileIsRecognized) {
  auto file = std::filesystem::temp_directory_path() / ("mlatune_sqlite_notadb_" + std::to_string(getpid()));
  {
    std::FILE* out = std::fopen(file.c_str(), "wb");
    ASSERT_NE(out, nullptr);
    for (int i = 0; i < 100; ++i) std::fputs("not a database, just text\n", out);
    std::fclose(out);
  }
  auto db = Connection::open(file, OpenMode::read_only);
  try {
    db.prepare("SELECT count(*) FROM sqlite_schema").step();
    FAIL() << "text file read as a database";
  } catch (const Error& e) {
    EXPECT_TRUE(e.not_a_database()) << e.code_name();
    EXPECT_EQ(e.code_name(), "SQLITE_NOTADB");
  }
  std::filesystem::remove(file);
}

TEST(Sqlite, TransactionRollsBackUnlessCommitted) {
  auto db = Connection::open_memory();
  db.execute("CREATE TABLE t(x)");
  {
    Transaction t(db);
    db.execute("INSERT INTO t VALUES(1)");
  }
  EXPECT_EQ(count(db, "SELECT count(*) FROM t"), 0);
  {
    Transaction t(db, Transaction::Kind::deferred);
    db.execute("INSERT INTO t VALUES(2)");
    t.commit();
  }
  EXPECT_EQ(count(db, "SELECT count(*) FROM t"), 1);
  try {
    Transaction t(db);
    db.execute("INSERT INTO t VALUES(3)");
    throw std::runtime_error("abandon");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(count(db, "SELECT count(*) FROM t"), 1);
}

TEST(Sqlite, StatementsAndConnectionsMove) {
  auto db = Connection::open_memory();
  db.execute("CREATE TABLE t(x); INSERT INTO t VALUES(7)");
  Connection moved = std::move(db);
  auto s = moved.prepare("SELECT x FROM t");
  Statement other = std::move(s);
  ASSERT_TRUE(other.step());
  EXPECT_EQ(other.column_int64(0), 7);
  other.reset();
  ASSERT_TRUE(other.step());
  EXPECT_EQ(moved.changes(), 1);  // the INSERT above
}

TEST(Sqlite, ReadOnlyConnectionRefusesWrites) {
  auto dir = std::filesystem::temp_directory_path() / ("mlatune_sqlite_test_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  auto file = dir / "a b?#%.db";  // characters that mean something in a URI
  {
    auto db = Connection::open(file, OpenMode::read_write_create);
    db.execute("CREATE TABLE t(x); INSERT INTO t VALUES(1)");
    EXPECT_FALSE(db.read_only());
  }
  ASSERT_TRUE(std::filesystem::exists(file));
  {
    auto db = Connection::open(file, OpenMode::read_only);
    EXPECT_TRUE(db.read_only());
    EXPECT_EQ(count(db, "SELECT count(*) FROM t"), 1);
    try {
      db.execute("INSERT INTO t VALUES(2)");
      FAIL() << "write on a read-only connection succeeded";
    } catch (const Error& e) {
      EXPECT_TRUE(e.read_only()) << e.code_name();
      EXPECT_FALSE(e.busy());
    }
  }
  {
    auto db = Connection::open(file, OpenMode::read_only_immutable);
    EXPECT_EQ(count(db, "SELECT count(*) FROM t"), 1);
  }
  EXPECT_THROW(Connection::open(dir / "missing.db", OpenMode::read_only), Error);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mlatune::sqlite
