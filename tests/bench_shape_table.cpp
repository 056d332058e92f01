// Host cost of the dispatcher's per-shape lookup on a cache hit, without a
// GPU: the shape table when the calling thread's memo answers (one shape
// launched repeatedly), when it does not (a thread cycling through more
// shapes than its memo holds: a lock-free probe), and, for comparison, the
// lookup the dispatcher did before (a Shape vector built per launch, as the
// typed entry did, then a shared_mutex and an unordered_map keyed by it).
// Each also runs on several threads at once: a shared lock's reader count is
// one cache line that every launching thread writes.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "cache/shape_table.h"
#include "core/space.h"

namespace mlatune {
namespace {

struct Prepared {
  int payload[16] = {};
};

constexpr int shape_count = 8;  // more than a thread's memo holds (4)

std::vector<std::int64_t> sizes(int i) { return {2, 32 + i, 4, 16, 24}; }

ShapeTable<Prepared>& table() {
  static ShapeTable<Prepared> t;
  static std::once_flag filled;
  std::call_once(filled, [] {
    for (int i = 0; i < shape_count; ++i) t.insert(sizes(i), Prepared{});
  });
  return t;
}

void BM_TableMemoHit(benchmark::State& state) {
  ShapeTable<Prepared>& t = table();
  const std::int64_t shape[5] = {2, 32, 4, 16, 24};
  for (auto _ : state) {
    const auto* e = t.find(shape);
    benchmark::DoNotOptimize(e);
  }
}
BENCHMARK(BM_TableMemoHit)->ThreadRange(1, 2);

void BM_TableProbe(benchmark::State& state) {
  ShapeTable<Prepared>& t = table();
  std::int64_t shapes[shape_count][5];
  for (int i = 0; i < shape_count; ++i)
    for (int k = 0; k < 5; ++k) shapes[i][k] = sizes(i)[static_cast<std::size_t>(k)];
  int i = 0;
  for (auto _ : state) {
    const auto* e = t.find(shapes[i]);
    benchmark::DoNotOptimize(e);
    i = (i + 1) % shape_count;  // round-robin over 8 shapes: the 4-way memo never holds the next one
  }
}
BENCHMARK(BM_TableProbe)->ThreadRange(1, 2);

struct ShapeHash {
  std::size_t operator()(const Shape& shape) const noexcept {
    std::uint64_t h = 1469598103934665603ull;
    for (std::int64_t v : shape.values) {
      h ^= static_cast<std::uint64_t>(v);
      h *= 1099511628211ull;
    }
    return static_cast<std::size_t>(h);
  }
};

struct LockedMap {
  std::shared_mutex mutex;
  std::unordered_map<Shape, Prepared, ShapeHash> map;
};

LockedMap& locked_map() {
  static LockedMap m;
  static std::once_flag filled;
  std::call_once(filled, [] {
    for (int i = 0; i < shape_count; ++i) m.map.emplace(Shape{sizes(i)}, Prepared{});
  });
  return m;
}

void BM_SharedMutexMapBefore(benchmark::State& state) {
  LockedMap& m = locked_map();
  int B = 2, T = 32, H = 4, D = 16, R = 24;
  for (auto _ : state) {
    benchmark::DoNotOptimize(T);
    const Shape shape{{B, T, H, D, R}};  // what the typed entry built per launch
    std::shared_lock lock(m.mutex);
    auto it = m.map.find(shape);
    benchmark::DoNotOptimize(it);
  }
}
BENCHMARK(BM_SharedMutexMapBefore)->ThreadRange(1, 2);

}  // namespace
}  // namespace mlatune

BENCHMARK_MAIN();
