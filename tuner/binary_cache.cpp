#include "tuner/binary_cache.h"

#include "cache/binary_record.h"
#include "cache/store.h"
#include "core/compiler.h"

namespace mlatune {

StoreBinaryCache::StoreBinaryCache(const std::filesystem::path& database, std::string kernel_name,
                                   std::string template_hash)
    : store_(std::make_unique<Store>(Store::open(database, StoreMode::read_write))),
      kernel_name_(std::move(kernel_name)),
      template_hash_(std::move(template_hash)) {}

StoreBinaryCache::~StoreBinaryCache() = default;

BinaryCacheHooks StoreBinaryCache::hooks() {
  BinaryCacheHooks hooks;
  hooks.lookup = [this](const BinaryKey& key) -> std::optional<CompiledBinary> {
    std::lock_guard lock(mutex_);
    std::optional<BinaryRecord> record = store_->get_binary(key.hash);
    if (!record) return std::nullopt;
    return binary_from_record(*record);
  };
  hooks.store = [this](const CompiledBinary& binary) {
    BinaryRecord record = binary_record(binary, kernel_name_, template_hash_);
    std::lock_guard lock(mutex_);
    store_->put_binary(record);
  };
  return hooks;
}

}  // namespace mlatune
