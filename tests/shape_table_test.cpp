// The dispatcher's shape table and the per-thread memo in front of it: what is
// inserted is found (across growth, at a stable address), a memo never
// answers for another table (not even a new table at a dead one's address),
// and many threads inserting and finding at once agree.
#include "cache/shape_table.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <memory>
#include <new>
#include <set>
#include <string>
#include <thread>
#include <vector>

// Counts this thread's heap allocations, so a test can show that a lookup
// makes none (every operator new of this program comes through here).
namespace {
thread_local std::size_t allocations = 0;
}  // namespace

// Not inlined: GCC would otherwise see free() of a pointer from operator new
// at every inlined call site and warn (-Wmismatched-new-delete), although a
// replaced pair of malloc/free operators is exactly what the standard allows.
[[gnu::noinline]] void* operator new(std::size_t size) {
  ++allocations;
  if (void* p = std::malloc(size ? size : 1)) return p;
  throw std::bad_alloc();
}
[[gnu::noinline]] void operator delete(void* p) noexcept { std::free(p); }
[[gnu::noinline]] void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace mlatune {
namespace {

using Sizes = std::vector<std::int64_t>;

Sizes shape_of(int i) { return {1 + i % 4, 1 + i, 8, 64 + i % 3, 24}; }
std::string value_of(const Sizes& s) {
  std::string text;
  for (std::int64_t v : s) text += std::to_string(v) + ",";
  return text;
}

TEST(ShapeTableTest, FindsWhatWasInsertedAndNothingElse) {
  ShapeTable<std::string> table;
  const Sizes a{2, 32, 4, 16, 24};
  EXPECT_EQ(table.find(a), nullptr);
  const auto& entry = table.insert(a, "a");
  EXPECT_EQ(entry.value, "a");
  EXPECT_EQ(entry.shape, a);
  ASSERT_NE(table.find(a), nullptr);
  EXPECT_EQ(table.find(a), &entry);
  EXPECT_EQ(table.find(Sizes{2, 32, 4, 16, 25}), nullptr);
  EXPECT_EQ(table.find(Sizes{2, 32, 4, 16}), nullptr) << "a prefix is another shape";
  EXPECT_EQ(table.find(Sizes{2, 32, 4, 16, 24, 0}), nullptr) << "so is a longer one";
  EXPECT_EQ(table.size(), 1u);
}

TEST(ShapeTableTest, InsertingAPresentShapeKeepsTheFirstValue) {
  ShapeTable<std::string> table;
  const Sizes a{1, 1, 1, 1, 1};
  const auto& first = table.insert(a, "first");
  std::string second = "second";
  const auto& again = table.insert(a, std::move(second));
  EXPECT_EQ(&again, &first);
  EXPECT_EQ(again.value, "first");
  EXPECT_EQ(table.size(), 1u);
}

TEST(ShapeTableTest, EntriesStayFoundAndInPlaceAsTheTableGrows) {
  ShapeTable<std::string> table;
  std::vector<const ShapeTable<std::string>::Entry*> addresses;
  for (int i = 0; i < 2000; ++i) addresses.push_back(&table.insert(shape_of(i), value_of(shape_of(i))));
  EXPECT_EQ(table.size(), 2000u);
  for (int i = 0; i < 2000; ++i) {
    const auto* e = table.find(shape_of(i));
    ASSERT_NE(e, nullptr) << i;
    EXPECT_EQ(e, addresses[static_cast<std::size_t>(i)]) << "an entry never moves (the memos point at it)";
    EXPECT_EQ(e->value, value_of(shape_of(i)));
  }
  EXPECT_EQ(table.find(shape_of(2000)), nullptr);
}

TEST(ShapeTableTest, LookupsAllocateNothing) {
  ShapeTable<std::string> table;
  for (int i = 0; i < 100; ++i) table.insert(shape_of(i), value_of(shape_of(i)));
  const Sizes absent{9, 9, 9, 9, 9};
  std::vector<Sizes> shapes;
  for (int i = 0; i < 100; ++i) shapes.push_back(shape_of(i));
  const std::size_t before = allocations;
  std::size_t found = 0;
  for (int round = 0; round < 3; ++round) {
    for (const Sizes& s : shapes) found += table.find(s) != nullptr;  // memo misses: probes
    for (int k = 0; k < 10; ++k) found += table.find(shapes[7]) != nullptr;  // memo hits
    found += table.find(absent) != nullptr;
  }
  EXPECT_EQ(allocations - before, 0u);
  EXPECT_EQ(found, 3u * 110u);
  // The counter does count: an insert allocates (the entry and its shape).
  table.insert(absent, "x");
  EXPECT_GT(allocations - before, 0u);
}

TEST(ShapeTableTest, EveryTableHasItsOwnNeverReusedId) {
  std::set<std::uint64_t> ids;
  for (int i = 0; i < 100; ++i) {
    ShapeTable<int> table;
    EXPECT_NE(table.id(), 0u);
    EXPECT_TRUE(ids.insert(table.id()).second) << "id " << table.id() << " reused";
  }
}

TEST(ShapeTableTest, TwoTablesWithTheSameShapeAnswerEachForItself) {
  ShapeTable<int> one, two;
  const Sizes s{4, 256, 8, 32, 64};
  one.insert(s, 1);
  // Remembered by this thread for `one`; `two` must not answer from that.
  ASSERT_NE(one.find(s), nullptr);
  EXPECT_EQ(two.find(s), nullptr);
  two.insert(s, 2);
  for (int k = 0; k < 4; ++k) {
    EXPECT_EQ(one.find(s)->value, 1);
    EXPECT_EQ(two.find(s)->value, 2);
  }
}

TEST(ShapeTableTest, ANewTableNeverSeesADestroyedTablesEntries) {
  const Sizes s{2, 32, 4, 16, 24};
  for (int round = 0; round < 20; ++round) {
    auto table = std::make_unique<ShapeTable<int>>();
    // A table made right after another was freed often lands at its address;
    // this thread's memo still holds the dead table's entry.
    EXPECT_EQ(table->find(s), nullptr) << "round " << round;
    table->insert(s, round);
    ASSERT_NE(table->find(s), nullptr);
    EXPECT_EQ(table->find(s)->value, round);
  }
}

struct Remembered {
  std::vector<std::int64_t> shape;
};

TEST(ShapeMemoTest, AnswersOnlyForTheSameOwnerAndShape) {
  ShapeMemo<Remembered, 4> memo;
  const Remembered a{{1, 2, 3}};
  EXPECT_EQ(memo.find(7, a.shape), nullptr) << "an empty memo knows nothing";
  memo.remember(7, &a);
  EXPECT_EQ(memo.find(7, a.shape), &a);
  EXPECT_EQ(memo.find(8, a.shape), nullptr) << "another table's entry";
  EXPECT_EQ(memo.find(7, Sizes{1, 2, 4}), nullptr);
  EXPECT_EQ(memo.find(7, Sizes{1, 2}), nullptr);
}

TEST(ShapeMemoTest, ForgetsTheOldestWhenFull) {
  ShapeMemo<Remembered, 4> memo;
  std::vector<Remembered> entries;
  for (std::int64_t i = 0; i < 6; ++i) entries.push_back(Remembered{{i, 1}});
  for (const Remembered& e : entries) memo.remember(1, &e);
  // Four slots: the last four remembered are there, the first two are not.
  EXPECT_EQ(memo.find(1, entries[0].shape), nullptr);
  EXPECT_EQ(memo.find(1, entries[1].shape), nullptr);
  for (std::size_t i = 2; i < 6; ++i) EXPECT_EQ(memo.find(1, entries[i].shape), &entries[i]) << i;
}

TEST(ShapeTableThreadsTest, ManyThreadsInsertingAndFindingAgree) {
  ShapeTable<std::string> table;
  constexpr int shapes = 3000;
  constexpr int threads = 8;
  std::atomic<int> wrong{0};
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      // Every thread walks all shapes from its own starting point, inserting
      // what it does not find, so inserts of one shape race each other.
      for (int k = 0; k < shapes; ++k) {
        const Sizes s = shape_of((k + t * 397) % shapes);
        const auto* e = table.find(s);
        if (!e) e = &table.insert(s, value_of(s));
        if (e->shape != s || e->value != value_of(s)) ++wrong;
      }
    });
  }
  for (std::thread& thread : pool) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(table.size(), static_cast<std::size_t>(shapes)) << "each shape inserted exactly once";
}

TEST(ShapeTableThreadsTest, ReadersFindEverythingPublishedWhileTheTableGrows) {
  ShapeTable<std::string> table;
  constexpr int shapes = 5000;
  std::atomic<int> published{0};
  std::atomic<bool> done{false};
  std::atomic<int> missing{0}, wrong{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 6; ++t) {
    readers.emplace_back([&, t] {
      unsigned i = static_cast<unsigned>(t);
      while (!done.load(std::memory_order_acquire)) {
        // Whatever insert() has returned for is findable, even by a thread
        // that is probing the array the writer just replaced.
        const int n = published.load(std::memory_order_acquire);
        if (n == 0) continue;
        i = i * 1664525u + 1013904223u;
        const Sizes s = shape_of(static_cast<int>(i % static_cast<unsigned>(n)));
        const auto* e = table.find(s);
        if (!e)
          ++missing;
        else if (e->value != value_of(s))
          ++wrong;
      }
    });
  }
  for (int i = 0; i < shapes; ++i) {
    table.insert(shape_of(i), value_of(shape_of(i)));
    published.store(i + 1, std::memory_order_release);
  }
  done.store(true, std::memory_order_release);
  for (std::thread& thread : readers) thread.join();
  EXPECT_EQ(missing.load(), 0);
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(table.size(), static_cast<std::size_t>(shapes));
}

}  // namespace
}  // namespace mlatune
