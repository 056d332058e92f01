// The dispatcher's per-shape table: an insert-only map from a shape (its
// integer values) to an immutable value, whose lookups take no lock, allocate
// nothing and never block on an insert, with a small per-thread memo of the
// entries that thread resolved last in front of it.
//
// Why this shape: a launch on a cache hit must cost little more than the raw
// cudaLaunchKernel, and runtime callers launch from many threads.  A shared
// mutex would put an atomic read-modify-write on one cache line per launch
// (contended across threads), a std::string or vector key would allocate.
// Here a hit is: the thread's memo (a few pointer and integer compares), or
// else an open-addressing probe through atomically published slots.
//
// Memory rules that make the lock-free reads safe:
//   - an entry is fully built before its pointer is published (release) and
//     is never changed or freed until the table is destroyed;
//   - growing publishes a new slot array and keeps the old one alive until
//     destruction, so a reader still probing the old array reads valid
//     memory (at worst it misses a fresh entry and takes the locked path);
//   - a memo slot names its table by a process-unique number that is never
//     reused, so a slot left by a destroyed table is never dereferenced.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <utility>
#include <vector>

namespace mlatune {

/// Hash of a shape's values (stable within a process).
std::uint64_t shape_hash(std::span<const std::int64_t> shape) noexcept;

/// A process-unique, never reused, non-zero number for a new table.
std::uint64_t next_shape_table_id() noexcept;

/// A thread's few most recent (table, shape) → entry resolutions.  Entry must
/// have a `shape` member (a std::vector<std::int64_t>).  Not thread-safe by
/// design: each thread owns one (see ShapeTable).
template <typename Entry, std::size_t Ways = 4>
class ShapeMemo {
 public:
  /// The remembered entry of table `owner` at `shape`, or null.
  const Entry* find(std::uint64_t owner, std::span<const std::int64_t> shape) const noexcept {
    for (const Slot& slot : slots_) {
      // Only an entry of `owner` is dereferenced: `owner` is alive (its caller
      // is using it), and ids are never reused.
      if (slot.owner == owner && equal(slot.entry->shape, shape)) return slot.entry;
    }
    return nullptr;
  }
  /// Remembers `entry` of table `owner`, replacing the oldest slot.
  void remember(std::uint64_t owner, const Entry* entry) noexcept {
    slots_[next_] = Slot{owner, entry};
    next_ = (next_ + 1) % Ways;
  }
  static bool equal(const std::vector<std::int64_t>& a, std::span<const std::int64_t> b) noexcept {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < b.size(); ++i)
      if (a[i] != b[i]) return false;
    return true;
  }

 private:
  struct Slot {
    std::uint64_t owner = 0;  // 0: empty (no table has id 0)
    const Entry* entry = nullptr;
  };
  Slot slots_[Ways] = {};
  std::size_t next_ = 0;
};

/// Insert-only map shape → Value with lock-free lookups (see the top of this
/// file).  Thread safety: find() and insert() may run on many threads at
/// once; inserts are serialized among themselves by an internal mutex.
/// Entries stay at their address until the table is destroyed, which must
/// not race any other call.
template <typename Value>
class ShapeTable {
 public:
  struct Entry {
    std::vector<std::int64_t> shape;
    Value value;
  };

  ShapeTable() : id_(next_shape_table_id()) { publish(std::make_unique<Slots>(initial_capacity)); }
  ShapeTable(const ShapeTable&) = delete;
  ShapeTable& operator=(const ShapeTable&) = delete;

  /// The entry at `shape`, or null.  Takes no lock and allocates nothing;
  /// remembers a found entry in the calling thread's memo.
  const Entry* find(std::span<const std::int64_t> shape) const noexcept {
    ShapeMemo<Entry>& m = memo();
    if (const Entry* e = m.find(id_, shape)) return e;
    const Entry* e = probe(*current_.load(std::memory_order_acquire), shape);
    if (e) m.remember(id_, e);
    return e;
  }

  /// The entry at `shape`, made from `value` when absent (when present,
  /// `value` is dropped and the first one kept).
  const Entry& insert(std::span<const std::int64_t> shape, Value value) {
    std::lock_guard lock(insert_mutex_);
    Slots* slots = current_.load(std::memory_order_relaxed);  // only inserts change it, under the lock
    if (const Entry* e = probe(*slots, shape)) return *e;
    if ((size_ + 1) * 2 > slots->capacity) {  // keep at least half the slots empty: probes end
      auto grown = std::make_unique<Slots>(slots->capacity * 2);
      for (std::size_t i = 0; i < slots->capacity; ++i)
        if (const Entry* e = slots->at[i].load(std::memory_order_relaxed)) place(*grown, e);
      slots = grown.get();
      publish(std::move(grown));
    }
    entries_.push_back(std::make_unique<Entry>(
        Entry{std::vector<std::int64_t>(shape.begin(), shape.end()), std::move(value)}));
    const Entry* e = entries_.back().get();
    place(*slots, e);
    size_.fetch_add(1, std::memory_order_relaxed);
    return *e;
  }

  std::size_t size() const noexcept { return size_.load(std::memory_order_relaxed); }
  /// The number that names this table in the threads' memos.
  std::uint64_t id() const noexcept { return id_; }

 private:
  static constexpr std::size_t initial_capacity = 16;  // a power of two

  struct Slots {
    explicit Slots(std::size_t n) : capacity(n), at(new std::atomic<const Entry*>[n]) {
      for (std::size_t i = 0; i < n; ++i) at[i].store(nullptr, std::memory_order_relaxed);
    }
    std::size_t capacity;
    std::unique_ptr<std::atomic<const Entry*>[]> at;
  };

  static const Entry* probe(const Slots& slots, std::span<const std::int64_t> shape) noexcept {
    const std::size_t mask = slots.capacity - 1;
    for (std::size_t i = shape_hash(shape) & mask;; i = (i + 1) & mask) {
      const Entry* e = slots.at[i].load(std::memory_order_acquire);
      if (!e) return nullptr;
      if (ShapeMemo<Entry>::equal(e->shape, shape)) return e;
    }
  }

  // Under insert_mutex_.  The release store publishes the entry's contents.
  static void place(Slots& slots, const Entry* e) noexcept {
    const std::size_t mask = slots.capacity - 1;
    std::size_t i = shape_hash(e->shape) & mask;
    while (slots.at[i].load(std::memory_order_relaxed)) i = (i + 1) & mask;
    slots.at[i].store(e, std::memory_order_release);
  }

  // Under insert_mutex_ (or in the constructor).  Earlier arrays stay alive.
  void publish(std::unique_ptr<Slots> slots) {
    current_.store(slots.get(), std::memory_order_release);
    arrays_.push_back(std::move(slots));
  }

  static ShapeMemo<Entry>& memo() noexcept {
    thread_local ShapeMemo<Entry> m;
    return m;
  }

  const std::uint64_t id_;
  std::atomic<Slots*> current_{nullptr};
  std::atomic<std::size_t> size_{0};
  std::mutex insert_mutex_;
  std::vector<std::unique_ptr<Slots>> arrays_;    // every array ever published (under insert_mutex_)
  std::vector<std::unique_ptr<Entry>> entries_;  // under insert_mutex_
};

}  // namespace mlatune
