// Compiled binaries by content key (cache/store.h).
//
// Cubins are stored zlib-compressed: they shrink about 3.6 to 4.2 times
// (20.8 KB to 4.9 KB for the flagship's default at S0, 54.1 KB to 15.1 KB on
// average over 40 configs at S2).  Reading one back, inflate included, costs
// about what loading it into a context does (phase medians of first calls on
// the H200: store read 0.68-0.85 ms, module load 0.66-0.84 ms).  A stored
// blob is either
//   "MLZ1" + the cubin's size (8 bytes, little-endian) + a zlib stream, or
//   a cubin as it is (an ELF image: databases written before compression,
//   which stay readable and are never rewritten).
#include "cache/store.h"

#include <cstring>

#include <fmt/format.h>
#include <zlib.h>

#include "cache/store_sql.h"

namespace mlatune {

using namespace store_sql;
using sqlite::Transaction;

namespace {

constexpr char packed_magic[4] = {'M', 'L', 'Z', '1'};
constexpr std::size_t packed_header = sizeof packed_magic + 8;
// A cubin larger than this is a damaged record, not a binary (the largest
// flagship cubin is under 1 MB).
constexpr std::uint64_t max_cubin_bytes = std::uint64_t{1} << 30;

std::vector<std::uint8_t> pack(const std::vector<std::uint8_t>& cubin) {
  uLongf bound = compressBound(static_cast<uLong>(cubin.size()));
  std::vector<std::uint8_t> out(packed_header + bound);
  std::memcpy(out.data(), packed_magic, sizeof packed_magic);
  const std::uint64_t size = cubin.size();
  for (int i = 0; i < 8; ++i) out[sizeof packed_magic + i] = static_cast<std::uint8_t>(size >> (8 * i));
  int code = compress2(out.data() + packed_header, &bound, cubin.data(), static_cast<uLong>(cubin.size()),
                       Z_DEFAULT_COMPRESSION);
  if (code != Z_OK) throw EnvironmentError(fmt::format("zlib compress2 failed ({}) for a {}-byte cubin", code, size));
  out.resize(packed_header + bound);
  return out;
}

bool is_packed(const std::vector<std::uint8_t>& blob) {
  return blob.size() >= packed_header && std::memcmp(blob.data(), packed_magic, sizeof packed_magic) == 0;
}

std::vector<std::uint8_t> unpack(const std::vector<std::uint8_t>& blob, const std::string& key,
                                 const std::filesystem::path& database) {
  if (!is_packed(blob)) return blob;
  std::uint64_t size = 0;
  for (int i = 0; i < 8; ++i) size |= std::uint64_t{blob[sizeof packed_magic + i]} << (8 * i);
  auto damaged = [&](const std::string& why) {
    return EnvironmentError(fmt::format("binary {} in {} is damaged ({}); delete its row (sqlite3 {} \"DELETE "
                                        "FROM binaries WHERE key = '{}'\") and it is compiled again",
                                        key, database.string(), why, database.string(), key));
  };
  if (size > max_cubin_bytes) throw damaged(fmt::format("says it holds {} bytes", size));
  std::vector<std::uint8_t> cubin(size);
  uLongf written = static_cast<uLongf>(size);
  int code = uncompress(cubin.data(), &written, blob.data() + packed_header,
                        static_cast<uLong>(blob.size() - packed_header));
  if (code != Z_OK) throw damaged(fmt::format("zlib uncompress: {}", code == Z_DATA_ERROR ? "corrupt stream" : std::to_string(code)));
  if (written != size) throw damaged(fmt::format("{} bytes unpacked, {} recorded", written, size));
  return cubin;
}

}  // namespace

void Store::put_binary(const BinaryRecord& b) {
  require_writable("store a binary");
  const std::vector<std::uint8_t> packed = pack(b.cubin);
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
      .bind_blob(6, packed)
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
                      s->column_text(4), unpack(s->column_blob(5), key, path_), s->column_text(6)};
}

std::vector<Store::StoredBinary> Store::binaries_of(const std::string& kernel_name) {
  auto s = db_.prepare("SELECT key, template_hash, nvrtc_version, arch, length(cubin) FROM binaries "
                       "WHERE kernel_name = ?1 ORDER BY key");
  s.bind(1, kernel_name);
  std::vector<StoredBinary> found;
  while (s.step())
    found.push_back(StoredBinary{s.column_text(0), s.column_text(1), s.column_text(2), s.column_text(3),
                                 s.column_int64(4)});
  return found;
}

std::int64_t Store::delete_binaries(const std::vector<std::string>& keys) {
  require_writable("delete binaries");
  Transaction transaction(db_);
  auto s = db_.prepare("DELETE FROM binaries WHERE key = ?1");
  std::int64_t deleted = 0;
  for (const std::string& key : keys) {
    s.bind(1, key).run();
    deleted += db_.changes();
    s.reset();
  }
  transaction.commit();
  return deleted;
}

}  // namespace mlatune
