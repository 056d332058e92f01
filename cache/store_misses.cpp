// Shapes asked for at run time that had no best entry (cache/store.h).
#include "cache/store.h"

#include <fmt/format.h>

#include "cache/store_sql.h"

namespace mlatune {

using namespace store_sql;
using sqlite::Transaction;

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

}  // namespace mlatune
