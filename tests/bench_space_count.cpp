// How fast a large search space is counted, sampled and checked.
//
// large.yaml: 12 parameters, 11.5 million raw configs, 7 constraints of the
// usual kinds; dense.yaml: 10 million raw configs, almost all valid, with a
// constraint over every parameter (nothing can be multiplied out).  Counts
// are cached per shape, so every iteration counts a shape not seen before.
// A pool of 2000 draws (the model strategy's, when the space is too large to
// hold) from the flagship restricted as the replay fixture is, at S0 and S1:
// sample() 2000 times against one sample_many().
#include <benchmark/benchmark.h>

#include <filesystem>
#include <random>

#include "core/space.h"
#include "tests/h200_sweeps_where.h"

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

const mlatune::SearchSpace& restricted_flagship() {
  static const mlatune::SearchSpace space =
      mlatune::SearchSpace::load(spaces_dir.parent_path().parent_path() / "search_spaces" /
                                 "fused_mla_attention.yaml")
          .restrict({mlatune::kH200SweepsWhere});
  return space;
}
const char* const kPoolShapes[] = {"B=2,T=32,H=4,D=16,R=24", "B=4,T=256,H=8,D=32,R=64"};

void BM_PoolOfSamples(benchmark::State& state) {
  const mlatune::SearchSpace& space = restricted_flagship();
  const mlatune::Shape shape = space.parse_shape(kPoolShapes[state.range(0)]);
  std::mt19937_64 rng(1);
  for (auto _ : state)
    for (int i = 0; i < 2000; ++i) benchmark::DoNotOptimize(space.sample(shape, rng));
  state.counters["valid_configs"] = static_cast<double>(space.count(shape));
}
BENCHMARK(BM_PoolOfSamples)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_PoolOfSampleMany(benchmark::State& state) {
  const mlatune::SearchSpace& space = restricted_flagship();
  const mlatune::Shape shape = space.parse_shape(kPoolShapes[state.range(0)]);
  std::mt19937_64 rng(1);
  for (auto _ : state) benchmark::DoNotOptimize(space.sample_many(shape, rng, 2000));
  state.counters["valid_configs"] = static_cast<double>(space.count(shape));
}
BENCHMARK(BM_PoolOfSampleMany)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

void BM_CheckOneConfig(benchmark::State& state) {
  const mlatune::SearchSpace& space = large_space();
  const mlatune::Shape shape{{4096, 4096, 4096}};
  const mlatune::Config config = space.default_config();
  for (auto _ : state) benchmark::DoNotOptimize(space.check(config, shape));
}
BENCHMARK(BM_CheckOneConfig)->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
