#include "cache/store_sql.h"

#include <fmt/format.h>

#include <array>

namespace mlatune::store_sql {
namespace {

// DeviceIdentity's fields as columns, in declaration order.
constexpr std::array<const char*, 5> device_key = {"name", "arch", "sm_count", "memory_bytes",
                                                   "driver_version"};

std::string qualified(std::string_view alias, const char* column) {
  return alias.empty() ? std::string(column) : fmt::format("{}.{}", alias, column);
}

}  // namespace

std::string device_columns(std::string_view alias) {
  std::string out;
  for (const char* column : device_key) {
    if (!out.empty()) out += ", ";
    out += qualified(alias, column);
  }
  return out;
}

std::string same_device(std::string_view a, std::string_view b) {
  std::string out;
  for (const char* column : device_key) {
    if (!out.empty()) out += " AND ";
    out += fmt::format("{} = {}", qualified(a, column), qualified(b, column));
  }
  return out;
}

std::string replaces_best(std::string_view candidate, std::string_view current) {
  return fmt::format("({0}.median_us < {1}.median_us OR ({0}.median_us = {1}.median_us AND {0}.config < {1}.config))",
                     candidate, current);
}

std::string device_is(std::string_view alias, int first) {
  std::string out;
  int parameter = first;
  for (const char* column : device_key) {
    if (!out.empty()) out += " AND ";
    out += fmt::format("{} = ?{}", qualified(alias, column), parameter++);
  }
  return out;
}

sqlite::Statement& bind_device(sqlite::Statement& statement, int first, const DeviceIdentity& device) {
  return statement.bind(first, device.name)
      .bind(first + 1, device.arch)
      .bind(first + 2, device.sm_count)
      .bind(first + 3, device.memory_bytes)
      .bind(first + 4, device.driver_version);
}

DeviceIdentity read_device(const sqlite::Statement& statement, int first) {
  return DeviceIdentity{statement.column_text(first), statement.column_text(first + 1),
                        static_cast<int>(statement.column_int64(first + 2)), statement.column_int64(first + 3),
                        statement.column_text(first + 4)};
}

std::optional<ResourceUsage> read_resources(const sqlite::Statement& statement, int first) {
  if (statement.is_null(first)) return std::nullopt;
  ResourceUsage usage;
  usage.registers = static_cast<int>(statement.column_int64(first));
  usage.spill_store_bytes = statement.column_int64(first + 1);
  usage.spill_load_bytes = statement.column_int64(first + 2);
  usage.stack_frame_bytes = statement.column_int64(first + 3);
  usage.shared_bytes = statement.column_int64(first + 4);
  return usage;
}

std::optional<std::int64_t> single_id(sqlite::StatementCache::Lease& statement) {
  if (!statement->step()) return std::nullopt;
  return statement->column_int64(0);
}

std::int64_t count_rows(sqlite::Connection& db, const char* sql) {
  auto statement = db.prepare(sql);
  statement.step();
  return statement.column_int64(0);
}

std::int64_t count_by_id(sqlite::Connection& db, const char* sql, std::int64_t id) {
  auto statement = db.prepare(sql);
  statement.bind(1, id);
  statement.step();
  return statement.column_int64(0);
}

}  // namespace mlatune::store_sql
