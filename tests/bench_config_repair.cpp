// Host time of the dispatcher's choice at a shape nobody tuned: the repair of
// one borrowed config, the whole choice (neighbours repaired, binary key),
// the stand-ins' ranking with and without their binary keys, and the one
// pass that gives both (what a first call at a new shape pays, against its
// 5 ms budget).
//
// Method: the flagship space; a database holding the H200's best configs at
// S0-S4 (docs/performance/side_by_side.md, every one with FLOAT4, so odd R
// needs a repair); shapes from issue 13 and a few more.  Each benchmark
// iteration is one repair / choose / ranked call on a warm index (the space
// loaded, the store read once at build, as in a running dispatcher).
// Counters: evaluations (configs checked by the repair) and changes.
// Needs no GPU.
#include <benchmark/benchmark.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>
#include <unistd.h>

#include "cache/config_repair.h"
#include "cache/dispatch_index.h"
#include "cache/store.h"
#include "core/space.h"
#include "tests/tuned_entry.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path space_file = fs::path(MLATUNE_TEST_DATA_DIR).parent_path() / "search_spaces" / "fused_mla_attention.yaml";
const DeviceInfo h200{"NVIDIA H200", "sm_90", 132, 150'000'000'000, "13.0", 52'428'800, 232'448};

const char* const tuned[][2] = {
    {"B=2,T=32,H=4,D=16,R=24",
     "ALGORITHM=tf32x3,THREADS_PER_QUERY=2,QUERIES_PER_BLOCK=32,HEADS_PER_BLOCK=1,STAGE_LATENT=true,KEY_TILE=32,FLOAT4=true,UNROLL=1,STAGE_WEIGHTS=true,SHAPE_BUCKETS=exact,EXPAND_GEMM=mma_sync,KEY_SPLITS=1"},
    {"B=4,T=256,H=8,D=32,R=64",
     "ALGORITHM=tf32x3,THREADS_PER_QUERY=2,QUERIES_PER_BLOCK=64,HEADS_PER_BLOCK=1,STAGE_LATENT=true,KEY_TILE=32,FLOAT4=true,UNROLL=1,STAGE_WEIGHTS=true,SHAPE_BUCKETS=exact,EXPAND_GEMM=mma_sync,KEY_SPLITS=1"},
    {"B=4,T=1024,H=16,D=64,R=128",
     "ALGORITHM=tf32x3_2k,THREADS_PER_QUERY=2,QUERIES_PER_BLOCK=64,HEADS_PER_BLOCK=1,STAGE_LATENT=true,KEY_TILE=32,FLOAT4=true,UNROLL=1,STAGE_WEIGHTS=false,SHAPE_BUCKETS=exact,EXPAND_GEMM=mma_sync,KEY_SPLITS=1"},
    {"B=2,T=2048,H=32,D=64,R=256",
     "ALGORITHM=tf32x3_2k,THREADS_PER_QUERY=2,QUERIES_PER_BLOCK=128,HEADS_PER_BLOCK=2,STAGE_LATENT=true,KEY_TILE=64,FLOAT4=true,UNROLL=1,STAGE_WEIGHTS=false,SHAPE_BUCKETS=exact,EXPAND_GEMM=mma_sync,KEY_SPLITS=1"},
    {"B=1,T=4096,H=16,D=128,R=512",
     "ALGORITHM=tf32x3_2k,THREADS_PER_QUERY=2,QUERIES_PER_BLOCK=128,HEADS_PER_BLOCK=1,STAGE_LATENT=true,KEY_TILE=64,FLOAT4=true,UNROLL=1,STAGE_WEIGHTS=false,SHAPE_BUCKETS=exact,EXPAND_GEMM=mma_sync,KEY_SPLITS=1"},
};

// Untuned shapes: issue 13's three, then harder ones (tiny T, huge D and R).
const char* const shapes[] = {"B=4,T=300,H=16,D=64,R=131", "B=2,T=1000,H=12,D=72,R=96",
                              "B=1,T=777,H=20,D=56,R=200", "B=8,T=3,H=7,D=250,R=1021",
                              "B=1,T=4000,H=64,D=256,R=1024"};

struct Fixture {
  std::unique_ptr<SearchSpace> space;
  std::unique_ptr<DispatchIndex> index;
  fs::path dir;

  Fixture() {
    space = std::make_unique<SearchSpace>(SearchSpace::load(space_file));
    dir = fs::temp_directory_path() / ("mlatune_bench_config_repair_" + std::to_string(getpid()));
    fs::create_directories(dir);
    const fs::path db = dir / "tuned.db";
    for (const auto& [shape, config] : tuned)
      record_tuned_entry(db, *space, space_file, h200, shape, config, "bench",
                         Timing{10, 9, 11, 10, 0.1, "bench"});
    Store store = Store::open(db, StoreMode::read_only);
    index = std::make_unique<DispatchIndex>(
        DispatchIndex::build(store, *space, DispatchTarget{h200, ToolchainInfo::current()}));
  }
  ~Fixture() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

Fixture& fixture() {
  static Fixture f;
  return f;
}

// The repair of each tuned config at the shape (the work choose() does per neighbour).
void BM_Repair(benchmark::State& state) {
  Fixture& f = fixture();
  const Shape shape = f.space->parse_shape(shapes[state.range(0)]);
  const Config config = f.space->parse_config(tuned[state.range(1)][1]);
  ConfigRepairer repairer(*f.space);
  Repair repair;
  for (auto _ : state) {
    repair = repairer.repair(config, shape);
    benchmark::DoNotOptimize(repair);
  }
  state.SetLabel(std::string(shapes[state.range(0)]) + " from " + tuned[state.range(1)][0] +
                 (repair.ok() ? ": " + repairer.describe(repair.changes) : ": no repair"));
  state.counters["evaluations"] = static_cast<double>(repair.evaluations);
  state.counters["changes"] = repair.ok() ? static_cast<double>(repair.changes.size()) : -1;
}
BENCHMARK(BM_Repair)
    ->ArgsProduct({{0, 1, 2, 3, 4}, {0, 2, 4}})
    ->Unit(benchmark::kMicrosecond);

// The whole choice at an untuned shape: what a first call pays before it loads a binary.
void BM_Choose(benchmark::State& state) {
  Fixture& f = fixture();
  const Shape shape = f.space->parse_shape(shapes[state.range(0)]);
  Choice choice;
  for (auto _ : state) {
    choice = f.index->choose(shape);
    benchmark::DoNotOptimize(choice);
  }
  state.SetLabel(std::string(shapes[state.range(0)]) + ": " + std::string(to_string(choice.reason)) + " " +
                 choice.repair);
}
BENCHMARK(BM_Choose)->DenseRange(0, 4)->Unit(benchmark::kMicrosecond);

// Times one listing of candidates at the benchmark's shape; counts them.
template <typename List>
void list_candidates(benchmark::State& state, List list) {
  Fixture& f = fixture();
  const Shape shape = f.space->parse_shape(shapes[state.range(0)]);
  std::size_t n = 0;
  for (auto _ : state) {
    std::vector<Choice> listed = list(*f.index, shape);
    n = listed.size();
    benchmark::DoNotOptimize(listed);
  }
  state.counters["candidates"] = static_cast<double>(n);
}

// The ranked alternatives a dispatcher looks through for a stand-in.
void BM_Ranked8(benchmark::State& state) {
  list_candidates(state, [](const DispatchIndex& index, const Shape& shape) { return index.ranked(shape, 8); });
}
BENCHMARK(BM_Ranked8)->DenseRange(0, 4)->Unit(benchmark::kMicrosecond);

// The same ranking with no binary key made (the dispatcher's stand-in lookup
// finishes each candidate only when its turn comes): BM_Ranked8 minus this
// is what finishing all eight costs.
void BM_Ranked8Unfinished(benchmark::State& state) {
  list_candidates(state,
                  [](const DispatchIndex& index, const Shape& shape) { return index.ranked_unfinished(shape, 8); });
}
BENCHMARK(BM_Ranked8Unfinished)->DenseRange(0, 4)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace mlatune

BENCHMARK_MAIN();
