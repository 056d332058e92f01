// The store: mlatune's SQLite database, the memory of every sweep and the
// source of every dispatch decision.
//
// It holds devices, toolchains and kernel versions; runs (one per sweep); every
// measurement, failures included; compiled binaries by content key; the best
// config per (kernel, device, toolchain, shape); and the shapes that were asked
// for at run time but never tuned.
//
// A result is keyed by everything that determines it (template hash,
// definition hash, NVRTC version, architecture, device), so an entry made under
// other versions is never found by a lookup; stale() lists such entries and
// prune() removes them.
//
// Concurrency: WAL mode, a busy timeout and BEGIN IMMEDIATE for every write;
// each measurement is its own transaction together with the update of `best`,
// so a killed writer loses at most the candidate in flight, and many processes
// may write one file at once.  A Store object itself is for one thread.
//
// This header is the whole public face; the implementation is one file per
// concern: store_schema.cpp (schema, migration, file checks, opening),
// store_identities.cpp, store_measurements.cpp (runs, measurements, record),
// store_best.cpp, store_binaries.cpp, store_misses.cpp, store_maintenance.cpp
// (stale, prune, vacuum, info), store_merge.cpp, store_portable.cpp (best
// configs exported and imported: cache/portable_configs.h), store_warm.cpp
// (warm ranges, copies for held-out analyses), and store_sql.h for what they
// share (the device identity's columns among it).
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cache/sqlite.h"
#include "core/device.h"
#include "core/outcome.h"
#include "core/resource_usage.h"

namespace mlatune {

/// The compiler and framework versions a result was produced with.
struct ToolchainInfo {
  std::string nvrtc_version;    // "13.0"
  std::string mlatune_version;  // MLATUNE_VERSION
  bool operator==(const ToolchainInfo&) const = default;
  /// The NVRTC linked into this program and this mlatune's version.
  static ToolchainInfo current();
};

/// One version of a kernel family: its name and the hashes of its template
/// text and of its parameter definitions (SearchSpace::template_hash and
/// definition_hash).
struct KernelInfo {
  std::string name;
  std::string template_hash;
  std::string definition_hash;
  bool operator==(const KernelInfo&) const = default;
};

enum class RunStatus { running, finished, interrupted, failed };
std::string_view to_string(RunStatus);

/// What a sweep is started with.
struct RunInfo {
  std::int64_t kernel_id = 0;
  std::int64_t device_id = 0;
  std::int64_t toolchain_id = 0;
  std::string space_path;
  std::string space_text;
  std::string strategy;           // "brute_force", "random", ...
  std::string strategy_settings;  // JSON text
};

/// A sweep as stored.
struct RunRecord {
  std::int64_t id = 0;
  std::string uuid;
  std::string kernel_name;
  std::string space_path;
  std::string strategy;
  std::string strategy_settings;
  std::string started_at;
  std::string finished_at;  // empty while running
  std::string status;
};

/// GPU timing of one candidate, microseconds.
struct Timing {
  double median_us = 0;
  double min_us = 0;
  double p90_us = 0;
  int samples = 0;
  double spread = 0;    // (p90 - min) / median, or as the method defines it
  std::string method;   // how it was timed: events, L2 flush, repetitions
};

/// Deviation from the float64 reference.
struct ErrorFigures {
  double relative_l2 = 0;
  double max_abs = 0;
};

/// The result for one config at one shape in one run.  Shape and config are
/// canonical strings (SearchSpace::shape_string / config_string), opaque here.
struct Measurement {
  std::int64_t run_id = 0;
  std::string shape;
  std::string config;
  Outcome outcome = Outcome::ok;
  std::optional<Timing> timing;
  std::optional<ErrorFigures> error;
  std::optional<ResourceUsage> resources;
  std::string message;  // compiler log, launch error, reason for skipping
};

/// A measurement as stored, with the names of what it belongs to.
struct MeasurementRecord {
  std::int64_t id = 0;
  std::string run_uuid;
  KernelInfo kernel;
  DeviceIdentity device;
  ToolchainInfo toolchain;
  Measurement measurement;
  std::string measured_at;
};

/// The fastest valid config known for one (kernel, device, toolchain, shape).
struct BestEntry {
  std::int64_t kernel_id = 0;
  std::int64_t device_id = 0;
  std::int64_t toolchain_id = 0;
  std::string shape;
  std::string config;
  double median_us = 0;
  std::int64_t measurement_id = 0;
};

/// A best entry with its kernel, device and toolchain spelled out (for the
/// dispatcher's in-memory index and for listing).
struct BestRecord {
  KernelInfo kernel;
  DeviceIdentity device;
  ToolchainInfo toolchain;
  BestEntry entry;
};

/// A compiled kernel.  The key is a hash of everything that determines the
/// cubin (template text, options, NVRTC version, architecture); the other
/// fields record what went into it, so stale binaries can be found.
struct BinaryRecord {
  std::string key;
  std::string kernel_name;
  std::string template_hash;
  std::string nvrtc_version;
  std::string arch;
  std::vector<std::uint8_t> cubin;
  std::string resources_json;  // the ptxas resource report
};

/// A shape asked for at run time that had no best entry.
struct MissRecord {
  std::string kernel_name;
  std::string device_name;
  std::string shape;
  std::int64_t count = 0;
  std::string last_seen;
};

/// The versions in force now: per kernel name its current hashes, and the
/// NVRTC version.  Kernels not named here are never called stale.
struct CurrentVersions {
  struct Kernel {
    std::string template_hash;
    std::string definition_hash;
  };
  std::map<std::string, Kernel> kernels;
  std::string nvrtc_version;  // empty: toolchains are not judged
};

/// Something stored under versions that no longer hold.
struct StaleEntry {
  enum class Kind { kernel, toolchain, binary };
  Kind kind = Kind::kernel;
  std::string description;  // "mla_attention template 1a2b… definition 3c4d…"
  std::string reason;       // "template changed (now 5e6f…)"
  std::int64_t runs = 0;
  std::int64_t measurements = 0;
  std::int64_t best = 0;
};
std::string_view to_string(StaleEntry::Kind);

/// Rows removed by prune().
struct PruneCounts {
  std::int64_t kernels = 0, toolchains = 0, runs = 0, measurements = 0, best = 0, binaries = 0,
               misses = 0;
};

/// Rows added by merge(); what was already there is skipped.
struct MergeCounts {
  std::int64_t runs = 0, measurements = 0, binaries = 0, best_changed = 0;
};

struct PortableEntry;  // cache/portable_configs.h

/// What import_best() did with the entries it was given.
struct ImportCounts {
  std::int64_t added = 0;         // new measurements, under the device and toolchain they name
  std::int64_t present = 0;       // already in the database (same natural key): unchanged
  std::int64_t best_changed = 0;  // best entries added or made faster
};

/// A box of shapes whose binaries `mlatune cache warm` compiled ahead of time
/// for one kernel version, architecture and NVRTC.  Kept as text, not by id:
/// it names no measurement, so pruning a kernel version never trips on it.
struct WarmRange {
  std::string kernel_name;
  std::string template_hash;
  std::string definition_hash;
  std::string arch;           // "sm_90"
  std::string nvrtc_version;  // "13.0"
  std::string range;          // "B=1..8;T=1..4096;..." as ShapeBox::text() writes it
  std::int64_t probe_shapes = 0;
  std::int64_t binaries = 0;  // distinct binaries the dispatcher may choose in the range
  std::int64_t failed = 0;    // of which did not compile
  std::string warmed_at;      // set by the store
};

struct StoreInfo {
  std::filesystem::path path;
  int schema_version = 0;
  std::string journal_mode;
  bool read_only = false;
  std::uintmax_t file_bytes = 0;  // the database file
  std::uintmax_t wal_bytes = 0;   // its -wal file, if any
  std::int64_t devices = 0, toolchains = 0, kernels = 0, runs = 0, measurements = 0, binaries = 0,
               best = 0, misses = 0;
};

/// Filter for listing measurements; empty fields match everything.
struct MeasurementFilter {
  std::string kernel_name;
  std::string shape;
};

enum class StoreMode {
  read_write,  // create the file or migrate it as needed
  read_only,   // lookups only; works on a read-only file system
};

/// The mlatune database (see the file comment).
class Store {
 public:
  /// The schema this build writes; older ones are migrated forward on a
  /// read-write open.
  static constexpr int schema_version = 1;
  /// PRAGMA application_id of every mlatune database ("MLAT").
  static constexpr std::int32_t application_id = 0x4D4C4154;

  /// Opens (read_write: creates or migrates) the database.  A file that is
  /// not an mlatune database, is truncated, or has a newer schema is refused
  /// with an InputError and left byte-for-byte untouched.
  static Store open(const std::filesystem::path& path, StoreMode mode = StoreMode::read_write);

  Store(Store&&) noexcept = default;
  Store& operator=(Store&&) noexcept = default;

  bool read_only() const { return read_only_; }
  const std::filesystem::path& path() const { return path_; }

  // ---- identities: find or insert by natural key -----------------------------
  /// A device is kept by its identity only (a DeviceInfo converts to it).
  std::int64_t ensure_device(const DeviceIdentity&);
  std::int64_t ensure_toolchain(const ToolchainInfo&);
  std::int64_t ensure_kernel(const KernelInfo&);
  /// Lookups that never write (for read-only stores).
  std::optional<std::int64_t> find_device(const DeviceIdentity&);
  std::optional<std::int64_t> find_toolchain(const ToolchainInfo&);
  std::optional<std::int64_t> find_kernel(const KernelInfo&);

  // ---- runs and measurements ---------------------------------------------------
  std::int64_t begin_run(const RunInfo&);
  void finish_run(std::int64_t run_id, RunStatus status);
  std::vector<RunRecord> runs();
  /// Commits the measurement and, in the same transaction, makes it the best
  /// entry when it is ok and faster than the current best.  Returns its id.
  std::int64_t record(const Measurement&);
  /// Whether this run already has a committed measurement of config at shape.
  bool measured(std::int64_t run_id, const std::string& shape, const std::string& config);
  /// Whether any run of this kernel version, device and toolchain has.
  bool measured(std::int64_t kernel_id, std::int64_t device_id, std::int64_t toolchain_id,
                const std::string& shape, const std::string& config);
  std::vector<MeasurementRecord> measurements(const MeasurementFilter& filter = {});
  std::int64_t measurement_count();

  // ---- best ----------------------------------------------------------------------
  std::optional<BestEntry> best(std::int64_t kernel_id, std::int64_t device_id, std::int64_t toolchain_id,
                                const std::string& shape);
  /// Best entry by identities; nullopt when any of them is unknown.
  std::optional<BestEntry> best(const KernelInfo&, const DeviceIdentity&, const ToolchainInfo&,
                                const std::string& shape);
  std::vector<BestRecord> all_best();

  // ---- binaries ------------------------------------------------------------------
  /// Stores a binary; a key already present is kept as it is (same key, same
  /// content).
  void put_binary(const BinaryRecord&);
  std::optional<BinaryRecord> get_binary(const std::string& key);
  /// What is stored of each binary of a kernel family, without its cubin.
  struct StoredBinary {
    std::string key, template_hash, nvrtc_version, arch;
    std::int64_t stored_bytes = 0;  // the blob as kept (compressed)
  };
  std::vector<StoredBinary> binaries_of(const std::string& kernel_name);
  /// Deletes these binaries in one transaction; returns how many there were.
  std::int64_t delete_binaries(const std::vector<std::string>& keys);
  /// Rewrites with zstd the binaries stored zlib-compressed or as they were
  /// (databases written before zstd), in one transaction, so that reading
  /// them back costs what a new one does; a damaged one is left as it is
  /// and counted.  Idempotent.
  struct Repacked {
    std::int64_t binaries = 0, bytes_before = 0, bytes_after = 0, damaged = 0;
  };
  Repacked repack_binaries();

  // ---- misses --------------------------------------------------------------------
  /// Counts a run-time lookup of an untuned shape.  Returns false (and writes
  /// nothing) on a read-only store: a miss must never fail a launch.
  bool record_miss(std::int64_t kernel_id, std::int64_t device_id, const std::string& shape);
  std::vector<MissRecord> misses();

  // ---- warm ranges (store_warm.cpp) --------------------------------------------------
  /// Records a warmed range (the table is created on first use: databases
  /// written before it existed stay readable by every build).
  void record_warm_range(const WarmRange&);
  /// Every warmed range, newest first; none on a database without the table.
  std::vector<WarmRange> warm_ranges();

  // ---- copies for analysis (store_warm.cpp) ---------------------------------------------
  /// A consistent snapshot of this database written to `target` (VACUUM
  /// INTO: the write-ahead log's committed contents included).  `target`
  /// must not exist.
  void copy_to(const std::filesystem::path& target);
  /// Removes the best entries of `shapes` for one kernel version, on every
  /// device and toolchain (measurements stay); returns how many were
  /// removed.  For held-out analyses on a copy, never on a database in use.
  std::int64_t remove_best(std::int64_t kernel_id, const std::vector<std::string>& shapes);

  // ---- maintenance -----------------------------------------------------------------
  std::vector<StaleEntry> stale(const CurrentVersions&);
  PruneCounts prune(const CurrentVersions&);
  /// Copies another database's contents in by natural keys; running it
  /// twice changes nothing the second time.
  MergeCounts merge(const std::filesystem::path& other);
  /// Every best entry (of `kernel_name`; empty: of every kernel) with the
  /// statistics of its measurement, for a portable file.
  std::vector<PortableEntry> export_best(const std::string& kernel_name);
  /// Adds portable entries as measurements of one imported run per kernel
  /// version, device and toolchain (strategy "import", `source` in its
  /// settings), each under the device and toolchain it names, and makes each
  /// the best entry where it is faster than the one there; all in one
  /// transaction.  An entry whose measurement is already there (same kernel
  /// version, device, toolchain, shape, config, median and time stamp) is
  /// skipped, so importing twice changes nothing.
  ImportCounts import_best(const std::vector<PortableEntry>& entries, const std::string& source);
  void vacuum();
  StoreInfo info();

 private:
  Store(sqlite::Connection connection, std::filesystem::path path, bool read_only)
      : db_(std::move(connection)), path_(std::move(path)), read_only_(read_only) {}
  void require_writable(const char* what) const;
  /// The id `find` returns, after `insert` (INSERT OR IGNORE of the natural
  /// key) in one transaction when there is none yet; `what` names the row
  /// for the read-only error.  Shared by ensure_device/toolchain/kernel.
  std::int64_t ensure_row(const char* what, const std::function<std::optional<std::int64_t>()>& find,
                          const std::function<void()>& insert);
  struct StaleIds;
  StaleIds find_stale(const CurrentVersions&);

  sqlite::Connection db_;
  sqlite::StatementCache statements_;  // declared after db_: finalized first
  std::filesystem::path path_;
  bool read_only_ = false;
};

}  // namespace mlatune
