// Compiled binaries by content key (cache/store.h).
#include "cache/store.h"

#include <fmt/format.h>

#include "cache/store_sql.h"

namespace mlatune {

using namespace store_sql;
using sqlite::Transaction;

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

}  // namespace mlatune
