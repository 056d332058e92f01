// The database as the compile pool's second-level binary cache: a cubin that
// any earlier sweep compiled (same template text, options, NVRTC version and
// architecture: the BinaryKey) is loaded instead of compiled again.
#pragma once
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>

#include "tuner/compile_pool.h"

namespace mlatune {

class Store;

/// Owns its own connection to the database (the pool calls the hooks from
/// several threads; a Store is for one thread, so calls are serialized).
class StoreBinaryCache {
 public:
  /// `kernel_name` and `template_hash` are recorded with each binary so that
  /// `mlatune cache stale` can tell when its template changed.
  StoreBinaryCache(const std::filesystem::path& database, std::string kernel_name,
                   std::string template_hash);
  ~StoreBinaryCache();
  StoreBinaryCache(const StoreBinaryCache&) = delete;
  StoreBinaryCache& operator=(const StoreBinaryCache&) = delete;

  /// Hooks for CompilePool; valid while this object lives.
  BinaryCacheHooks hooks();

 private:
  std::unique_ptr<Store> store_;
  std::mutex mutex_;
  std::string kernel_name_;
  std::string template_hash_;
};

}  // namespace mlatune
