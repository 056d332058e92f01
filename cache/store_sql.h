// What the store's source files share and nothing else sees: the device
// identity as columns and parameters, the time stamp expression, and small
// statement helpers.  Not part of the store's public face (cache/store.h).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "cache/sqlite.h"
#include "core/device.h"
#include "core/resource_usage.h"

namespace mlatune::store_sql {

/// The current time as the store writes it into its *_at columns.
inline constexpr const char* now_sql = "strftime('%Y-%m-%dT%H:%M:%fZ', 'now')";

// ---- the device identity: one spelling of its five columns --------------------------
// The devices table's natural key is DeviceIdentity, field for field and in
// its order; every statement that stores, finds, joins or reads a device goes
// through these, so a new identity field is one edit here (and a migration).

/// "name, arch, sm_count, memory_bytes, driver_version" with each column
/// prefixed by `alias.` (no prefix for an empty alias).
std::string device_columns(std::string_view alias = {});
/// "a.name = b.name AND ...": the same device in two tables.
std::string same_device(std::string_view a, std::string_view b);
/// "alias.name = ?first AND alias.arch = ?first+1 AND ...".
std::string device_is(std::string_view alias, int first);
/// Binds an identity to parameters first .. first + 4, in device_columns() order.
sqlite::Statement& bind_device(sqlite::Statement& statement, int first, const DeviceIdentity& device);
/// Reads an identity from columns first .. first + 4, in device_columns() order.
DeviceIdentity read_device(const sqlite::Statement& statement, int first);
/// Reads a resource report from columns first .. first + 4 (registers, spill
/// stores, spill loads, stack frame, shared bytes); nullopt when registers
/// is NULL (no report was stored).
std::optional<ResourceUsage> read_resources(const sqlite::Statement& statement, int first);

// ---- the best entry ---------------------------------------------------------------------

/// The condition under which the row `candidate` (columns median_us and
/// config) replaces the best entry `current`: faster, or as fast with a config
/// text that sorts first.  An order-free rule, so that record() and merge()
/// agree whatever order the measurements come in.
std::string replaces_best(std::string_view candidate, std::string_view current);

// ---- small statement helpers --------------------------------------------------------

/// The first column of the first row, or nullopt when there is no row.
std::optional<std::int64_t> single_id(sqlite::StatementCache::Lease& statement);
/// The single number `sql` selects.
std::int64_t count_rows(sqlite::Connection& db, const char* sql);
/// The single number `sql` selects with ?1 bound to `id`.
std::int64_t count_by_id(sqlite::Connection& db, const char* sql, std::int64_t id);

}  // namespace mlatune::store_sql
