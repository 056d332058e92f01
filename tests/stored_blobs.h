// Rows of a store's `binaries` table written past the Store, for tests,
// benchmarks and the stored_binary fuzz target: blobs in the formats older
// databases hold ("MLZ1" zlib, a raw cubin) and damaged ones, which
// Store::put_binary never writes.
#pragma once
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include <zlib.h>

#include "cache/sqlite.h"

namespace mlatune::test_support {

/// "MLZ1" + the cubin's size (8 bytes, little-endian) + a zlib stream: what
/// put_binary wrote before zstd.  Needs zlib linked.
inline std::vector<std::uint8_t> zlib_packed(const std::vector<std::uint8_t>& cubin) {
  uLongf bound = compressBound(static_cast<uLong>(cubin.size()));
  std::vector<std::uint8_t> blob(12 + bound);
  std::memcpy(blob.data(), "MLZ1", 4);
  for (std::size_t i = 0; i < 8; ++i) blob[4 + i] = static_cast<std::uint8_t>(std::uint64_t{cubin.size()} >> (8 * i));
  if (compress2(blob.data() + 12, &bound, cubin.data(), static_cast<uLong>(cubin.size()), Z_DEFAULT_COMPRESSION) != Z_OK)
    throw std::runtime_error("zlib compress2 failed");
  blob.resize(12 + bound);
  return blob;
}

/// Stores `blob` as the cubin of binary `key` (replacing a row of that key).
inline void insert_blob(sqlite::Connection& db, const std::string& key, const std::vector<std::uint8_t>& blob) {
  db.prepare("INSERT OR REPLACE INTO binaries(key, kernel_name, template_hash, nvrtc_version, arch, cubin, "
             "resources, created_at) VALUES(?1, 'mla', 't', '13.0', 'sm_90', ?2, '{}', '2026-12-05')")
      .bind(1, key)
      .bind_blob(2, blob)
      .run();
}

inline void insert_blob(const std::filesystem::path& db, const std::string& key, const std::vector<std::uint8_t>& blob) {
  auto connection = sqlite::Connection::open(db, sqlite::OpenMode::read_write_create);
  insert_blob(connection, key, blob);
}

}  // namespace mlatune::test_support
