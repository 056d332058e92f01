// Fuzzes the reading of stored cubins (cache/store_binaries.cpp): whatever
// bytes a row of `binaries` holds, Store::get_binary gives them back
// unpacked or throws EnvironmentError that names the row; a blob in a packed
// format ("MLS1" zstd, "MLZ1" zlib) that comes back has the size its header
// records, and any other blob comes back as it is.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <unistd.h>
#include <vector>

#include "cache/sqlite.h"
#include "cache/store.h"
#include "tests/fuzz/fuzz_common.h"
#include "tests/stored_blobs.h"

namespace {

namespace fs = std::filesystem;

struct Fixture {
  fs::path dir = fs::temp_directory_path() / ("mlatune_stored_binary_fuzz_" + std::to_string(getpid()));
  std::optional<mlatune::Store> store;
  std::optional<mlatune::sqlite::Connection> raw;
  Fixture() {
    fs::create_directories(dir);
    store.emplace(mlatune::Store::open(dir / "fuzz.db"));
    raw.emplace(mlatune::sqlite::Connection::open(dir / "fuzz.db", mlatune::sqlite::OpenMode::read_write_create));
  }
  ~Fixture() {
    store.reset();
    raw.reset();
    std::error_code ignored;
    fs::remove_all(dir, ignored);
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Fixture& f = fixture();
  const std::vector<std::uint8_t> blob(data, data + size);
  mlatune::test_support::insert_blob(*f.raw, "fuzz", blob);
  mlatune::fuzz::rejecting_cleanly([&] {
    std::optional<mlatune::BinaryRecord> record = f.store->get_binary("fuzz");
    if (!record) mlatune::fuzz::violated("a stored row was not found");
    const bool packed = size >= 12 && (std::memcmp(data, "MLS1", 4) == 0 || std::memcmp(data, "MLZ1", 4) == 0);
    if (!packed) {
      if (record->cubin != blob) mlatune::fuzz::violated("a blob in no packed format did not come back as it is");
      return;
    }
    std::uint64_t recorded = 0;
    for (int i = 0; i < 8; ++i) recorded |= std::uint64_t{data[4 + i]} << (8 * i);
    if (record->cubin.size() != recorded) mlatune::fuzz::violated("an unpacked cubin's size is not the recorded one");
  });
  return 0;
}
