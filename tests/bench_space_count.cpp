// How fast a large search space is counted, sampled and checked.
//
// large.yaml: 12 parameters, 11.5 million raw configs, 7 constraints of the
// usual kinds; dense.yaml: 10 million raw configs, almost all valid, with a
// constraint over every parameter (nothing can be multiplied out).  Counts
// are cached per shape, so every iteration counts a shape not seen before.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <random>

#include "core/space.h"

namespace {

const std::filesystem::path spaces_dir = std::filesystem::path(MLATUNE_TEST_DATA_DIR) / "spaces";

const mlatune::SearchSpace& large_space() {
  static const mlatune::SearchSpace space = mlatune::SearchSpace::load(spaces_dir / "large.yaml");
  return space;
}

const mlatune::SearchSpace& dense_space() {
  static const mlatune::SearchSpace space = mlatune::SearchSpace::load(spaces_dir / "dense.yaml");
  return space;
}

void BM_CountLargeSpace(benchmark::State& state) {
  const mlatune::SearchSpace& space = large_space();
  std::int64_t k = 1024;
  std::uint64_t valid = 0;
  for (auto _ : state) {
    valid = space.count(mlatune::Shape{{4096, 4096, k}});
    k += 64;
    benchmark::DoNotOptimize(valid);
  }
  state.counters["raw_configs"] = static_cast<double>(space.raw_count());
  state.counters["valid_configs"] = static_cast<double>(valid);
}
BENCHMARK(BM_CountLargeSpace)->Unit(benchmark::kMillisecond);

void BM_CountDenseSpace(benchmark::State& state) {
  const mlatune::SearchSpace& space = dense_space();
  std::int64_t n = 2000;
  std::uint64_t valid = 0;
  for (auto _ : state) {
    valid = space.count(mlatune::Shape{{n++}});
    benchmark::DoNotOptimize(valid);
  }
  state.counters["raw_configs"] = static_cast<double>(space.raw_count());
  state.counters["valid_configs"] = static_cast<double>(valid);
}
BENCHMARK(BM_CountDenseSpace)->Unit(benchmark::kMillisecond);

void BM_LoadLargeSpace(benchmark::State& state) {  // includes counting both default shapes
  for (auto _ : state) {
    mlatune::SearchSpace space = mlatune::SearchSpace::load(spaces_dir / "large.yaml");
    benchmark::DoNotOptimize(space.raw_count());
  }
}
BENCHMARK(BM_LoadLargeSpace)->Unit(benchmark::kMillisecond);

void BM_SampleLargeSpace(benchmark::State& state) {
  const mlatune::SearchSpace& space = large_space();
  const mlatune::Shape shape{{4096, 4096, 4096}};
  std::mt19937_64 rng(1);
  for (auto _ : state) benchmark::DoNotOptimize(space.sample(shape, rng));
}
BENCHMARK(BM_SampleLargeSpace)->Unit(benchmark::kMicrosecond);

void BM_CheckOneConfig(benchmark::State& state) {
  const mlatune::SearchSpace& space = large_space();
  const mlatune::Shape shape{{4096, 4096, 4096}};
  const mlatune::Config config = space.default_config();
  for (auto _ : state) benchmark::DoNotOptimize(space.check(config, shape));
}
BENCHMARK(BM_CheckOneConfig)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
