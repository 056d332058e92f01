// Devices, toolchains and kernel versions: found or inserted by their natural
// keys (cache/store.h).
#include "cache/store.h"

#include <fmt/format.h>

#include "cache/store_sql.h"

namespace mlatune {

using namespace store_sql;
using sqlite::Transaction;

std::optional<std::int64_t> Store::find_device(const DeviceIdentity& d) {
  static const std::string sql = "SELECT id FROM devices WHERE " + device_is("", 1);
  auto s = statements_.get(db_, sql);
  bind_device(*s, 1, d);
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

std::int64_t Store::ensure_row(const char* what, const std::function<std::optional<std::int64_t>()>& find,
                              const std::function<void()>& insert) {
  if (auto id = find()) return *id;
  require_writable(what);
  Transaction transaction(db_);
  insert();
  auto id = find();
  transaction.commit();
  return *id;
}

std::int64_t Store::ensure_device(const DeviceIdentity& d) {
  return ensure_row("add a device", [&] { return find_device(d); }, [&] {
    auto insert =
        db_.prepare(fmt::format("INSERT OR IGNORE INTO devices({}) VALUES(?1, ?2, ?3, ?4, ?5)", device_columns()));
    bind_device(insert, 1, d).run();
  });
}

std::int64_t Store::ensure_toolchain(const ToolchainInfo& t) {
  return ensure_row("add a toolchain", [&] { return find_toolchain(t); }, [&] {
    db_.prepare("INSERT OR IGNORE INTO toolchains(nvrtc_version, mlatune_version) VALUES(?1, ?2)")
        .bind(1, t.nvrtc_version)
        .bind(2, t.mlatune_version)
        .run();
  });
}

std::int64_t Store::ensure_kernel(const KernelInfo& k) {
  return ensure_row("add a kernel", [&] { return find_kernel(k); }, [&] {
    db_.prepare("INSERT OR IGNORE INTO kernels(name, template_hash, definition_hash) VALUES(?1, ?2, ?3)")
        .bind(1, k.name)
        .bind(2, k.template_hash)
        .bind(3, k.definition_hash)
        .run();
  });
}

}  // namespace mlatune
