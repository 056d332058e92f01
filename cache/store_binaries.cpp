// Compiled binaries by content key (cache/store.h).
//
// Cubins are stored zstd-compressed (level 9).  Over the 36 binaries a warm-up
// of one H=8,D=64,R=128 range stores (108 KB on average), zstd shrinks a
// cubin 4.37 times where zlib's default did 4.0, and unpacks it at about
// 1.5 GB/s where zlib did 0.42 GB/s: a first call that reads a 142 KB stand-in
// spent 0.34 ms in zlib here, and store reads were 1.05 ms of the H200's
// first calls (docs/performance.md).  A stored blob is one of
//   "MLS1" + the cubin's size (8 bytes, little-endian) + one zstd frame,
//   "MLZ1" + the cubin's size (8 bytes, little-endian) + a zlib stream
//     (databases written before zstd), or
//   a cubin as it is (an ELF image: databases written before compression).
// The last two are read as they are; repack_binaries (`mlatune cache
// vacuum`) rewrites them with zstd.
#include "cache/store.h"

#include <cstring>

#include <fmt/format.h>
#include <zlib.h>
#include <zstd.h>

#include "cache/store_sql.h"

namespace mlatune {

using namespace store_sql;
using sqlite::Transaction;

namespace {

constexpr char zstd_magic[4] = {'M', 'L', 'S', '1'};
constexpr char zlib_magic[4] = {'M', 'L', 'Z', '1'};
constexpr std::size_t packed_header = sizeof zstd_magic + 8;
// zstd's level 9: 4% smaller than level 3 on cubins and as fast to unpack;
// packing (about 60 MB/s) costs a cubin 2 ms against NVRTC's seconds.
constexpr int zstd_level = 9;
// A cubin larger than this is a damaged record, not a binary (the largest
// flagship cubin is under 1 MB).
constexpr std::uint64_t max_cubin_bytes = std::uint64_t{1} << 30;
constexpr std::uint64_t zlib_max_ratio = 1032;

std::vector<std::uint8_t> pack(const std::vector<std::uint8_t>& cubin) {
  std::vector<std::uint8_t> out(packed_header + ZSTD_compressBound(cubin.size()));
  std::memcpy(out.data(), zstd_magic, sizeof zstd_magic);
  const std::uint64_t size = cubin.size();
  for (int i = 0; i < 8; ++i) out[sizeof zstd_magic + i] = static_cast<std::uint8_t>(size >> (8 * i));
  const std::size_t packed = ZSTD_compress(out.data() + packed_header, out.size() - packed_header, cubin.data(),
                                           cubin.size(), zstd_level);
  if (ZSTD_isError(packed))
    throw EnvironmentError(fmt::format("zstd compress failed ({}) for a {}-byte cubin", ZSTD_getErrorName(packed), size));
  out.resize(packed_header + packed);
  return out;
}

bool has_magic(const std::vector<std::uint8_t>& blob, const char (&magic)[4]) {
  return blob.size() >= packed_header && std::memcmp(blob.data(), magic, sizeof magic) == 0;
}

std::vector<std::uint8_t> unpack(const std::vector<std::uint8_t>& blob, const std::string& key,
                                 const std::filesystem::path& database) {
  const bool zstd = has_magic(blob, zstd_magic);
  if (!zstd && !has_magic(blob, zlib_magic)) return blob;
  std::uint64_t size = 0;
  for (int i = 0; i < 8; ++i) size |= std::uint64_t{blob[sizeof zstd_magic + i]} << (8 * i);
  auto damaged = [&](const std::string& why) {
    return EnvironmentError(fmt::format("binary {} in {} is damaged ({}); delete its row (sqlite3 {} \"DELETE "
                                        "FROM binaries WHERE key = '{}'\") and it is compiled again",
                                        key, database.string(), why, database.string(), key));
  };
  if (size > max_cubin_bytes) throw damaged(fmt::format("says it holds {} bytes", size));
  const std::uint8_t* stream = blob.data() + packed_header;
  const std::size_t stream_bytes = blob.size() - packed_header;
  if (zstd) {  // the frame says its size too: a disagreement is damage, found before allocating
    const unsigned long long framed = ZSTD_getFrameContentSize(stream, stream_bytes);
    if (framed == ZSTD_CONTENTSIZE_ERROR || framed == ZSTD_CONTENTSIZE_UNKNOWN)
      throw damaged("no zstd frame with its size");
    if (framed != size) throw damaged(fmt::format("its zstd frame holds {} bytes, {} recorded", framed, size));
  } else if (size > zlib_max_ratio * stream_bytes + 64) {  // deflate expands at most 1032 times
    throw damaged(fmt::format("says it holds {} bytes, more than a {}-byte zlib stream can", size, stream_bytes));
  }
  std::vector<std::uint8_t> cubin(size);
  std::uint64_t written = 0;
  if (zstd) {
    const std::size_t got = ZSTD_decompress(cubin.data(), cubin.size(), stream, stream_bytes);
    if (ZSTD_isError(got)) throw damaged(fmt::format("zstd: {}", ZSTD_getErrorName(got)));
    written = got;
  } else {
    uLongf got = static_cast<uLongf>(size);
    const int code = uncompress(cubin.data(), &got, stream, static_cast<uLong>(stream_bytes));
    if (code != Z_OK)
      throw damaged(fmt::format("zlib uncompress: {}", code == Z_DATA_ERROR ? "corrupt stream" : std::to_string(code)));
    written = got;
  }
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

Store::Repacked Store::repack_binaries() {
  require_writable("repack binaries");
  Repacked r;
  std::vector<std::string> keys;
  {
    auto s = db_.prepare("SELECT key FROM binaries WHERE substr(cubin, 1, 4) != CAST(?1 AS BLOB) ORDER BY key");
    s.bind(1, std::string(zstd_magic, sizeof zstd_magic));
    while (s.step()) keys.push_back(s.column_text(0));
  }
  if (keys.empty()) return r;
  Transaction transaction(db_);
  auto read = db_.prepare("SELECT cubin FROM binaries WHERE key = ?1");
  auto write = db_.prepare("UPDATE binaries SET cubin = ?2 WHERE key = ?1");
  for (const std::string& key : keys) {
    read.bind(1, key);
    if (!read.step()) {
      read.reset();
      continue;
    }
    const std::vector<std::uint8_t> blob = read.column_blob(0);
    read.reset();
    std::vector<std::uint8_t> packed;
    try {
      packed = pack(unpack(blob, key, path_));
    } catch (const EnvironmentError&) {  // damaged: get_binary says so where it is read
      ++r.damaged;
      continue;
    }
    write.bind(1, key).bind_blob(2, packed).run();
    write.reset();
    ++r.binaries;
    r.bytes_before += static_cast<std::int64_t>(blob.size());
    r.bytes_after += static_cast<std::int64_t>(packed.size());
  }
  transaction.commit();
  return r;
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
