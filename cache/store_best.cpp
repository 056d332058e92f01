// The best entry per (kernel, device, toolchain, shape): lookups by ids or by
// identities, and the whole table for the dispatcher (cache/store.h).  Entries
// are written by Store::record and Store::merge.
#include "cache/store.h"

#include <fmt/format.h>

#include "cache/store_sql.h"

namespace mlatune {

namespace {

using namespace store_sql;

// Reads the seven columns of a best row, from column `first` on.
BestEntry read_best(const sqlite::Statement& s, int first) {
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

std::optional<BestEntry> Store::best(const KernelInfo& kernel, const DeviceIdentity& device,
                                     const ToolchainInfo& toolchain, const std::string& shape) {
  static const std::string sql = fmt::format(
      "SELECT b.kernel_id, b.device_id, b.toolchain_id, b.shape, b.config, b.median_us, b.measurement_id "
      "FROM kernels k JOIN devices d JOIN toolchains t "
      "JOIN best b ON b.kernel_id = k.id AND b.device_id = d.id AND b.toolchain_id = t.id AND b.shape = ?11 "
      "WHERE k.name = ?1 AND k.template_hash = ?2 AND k.definition_hash = ?3 "
      "AND {} AND t.nvrtc_version = ?9 AND t.mlatune_version = ?10",
      device_is("d", 4));
  auto s = statements_.get(db_, sql);
  s->bind(1, kernel.name).bind(2, kernel.template_hash).bind(3, kernel.definition_hash);
  bind_device(*s, 4, device);
  s->bind(9, toolchain.nvrtc_version).bind(10, toolchain.mlatune_version).bind(11, shape);
  if (!s->step()) return std::nullopt;
  return read_best(*s, 0);
}

std::vector<BestRecord> Store::all_best() {
  auto s = db_.prepare(fmt::format(
      "SELECT k.name, k.template_hash, k.definition_hash, {}, t.nvrtc_version, t.mlatune_version, "
      "b.kernel_id, b.device_id, b.toolchain_id, b.shape, b.config, b.median_us, b.measurement_id "
      "FROM best b JOIN kernels k ON k.id = b.kernel_id "
      "JOIN devices d ON d.id = b.device_id JOIN toolchains t ON t.id = b.toolchain_id "
      "ORDER BY k.name, d.name, b.shape",
      device_columns("d")));
  std::vector<BestRecord> result;
  while (s.step()) {
    BestRecord r;
    r.kernel = {s.column_text(0), s.column_text(1), s.column_text(2)};
    r.device = read_device(s, 3);
    r.toolchain = {s.column_text(8), s.column_text(9)};
    r.entry = read_best(s, 10);
    result.push_back(std::move(r));
  }
  return result;
}

}  // namespace mlatune
