// Host time of the first call at a shape: inside a warmed range (`mlatune
// cache warm`) against outside it.
//
// Method:
//   - One Dispatcher is opened on a database.  Each benchmark is one shape,
//     launched once (Iterations(1)); no shape is launched twice in the
//     process, so every figure is a first call.  The shape's buffers are
//     allocated and zeroed before the timed region; the time is steady_clock
//     around Dispatcher::launch_buffers alone (choice, binary load or NVRTC
//     compile, launch enqueue), the stream synchronized after it, untimed.
//   - Counters per shape: host_ms, and the DispatcherStats deltas of that
//     call: compiles (NVRTC runs), from_store (cubins read from the
//     database), loaded (modules loaded into the context), and the host ms
//     of its phases (choose, store read, module load, launch readying, miss
//     record, stand-in ranking, background queueing, the launch's enqueue
//     with its workspaces' share); the summary gives each phase's median per
//     group.
//   - Shapes: `--inside=N` drawn from the warmed range and `--outside=N`
//     from `--outside-range` (default for the fused MLA space: the benchmark
//     distribution of docs/performance.md, B 1..8, T 1..4096, H 1..64, D
//     8..256, R 16..1024, or where the warmed range covers all of it, the
//     same with H 65..128) but outside the warmed range; fewer than asked
//     is said on stderr.  A variable whose range spans a factor of 16 or
//     more is drawn log-uniformly, else uniformly (--seed, default 1).
//   - Database: `--db=FILE` with `--space=FILE` (default the shipped fused
//     MLA space) and `--range=TEXT` (default: the newest warm range of that
//     kernel and this GPU's architecture recorded in the database).  Without
//     --db the benchmark makes its own in a temporary directory: the space's
//     default config and one sampled valid config recorded as tuned (times
//     made up: they only steer the choice) at two shapes, then warmed over
//     B=1..8;T=1..4096;H=8;D=64;R=128.
//   - `--nonblocking=1` opens the dispatcher in CompileMode::nonblocking: a
//     first call with no binary ready then throws NotReadyError (counted as
//     not ready; its host time is the time to that answer) instead of
//     compiling on the caller's thread.
//   - At the end one summary line per group: shapes, median and max host
//     ms, NVRTC compiles (all, and those on the caller's thread), not-ready
//     answers, and how many first calls took over 5 ms.
// Without a GPU the benchmark skips with the reason.
#include <benchmark/benchmark.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <fmt/format.h>

#include "cache/dispatch_index.h"
#include "cache/dispatcher.h"
#include "cache/store.h"
#include "core/compiler.h"
#include "core/cuda.h"
#include "core/space.h"
#include "tests/tuned_entry.h"
#include "tuner/shape_box.h"
#include "tuner/warm.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

constexpr double slow_first_call_ms = 5.0;  // issue 13's bound inside a warmed range
const char* const benchmark_distribution = "B=1..8;T=1..4096;H=1..64;D=8..256;R=16..1024";
// The default outside range when the warmed range covers the distribution
// (the shipped file's recipe warms all of it): models with more heads.
const char* const more_heads = "B=1..8;T=1..4096;H=65..128;D=8..256;R=16..1024";
const char* const own_warm_range = "B=1..8;T=1..4096;H=8;D=64;R=128";

struct Flags {
  std::string db, space = MLATUNE_SOURCE_DIR "/search_spaces/fused_mla_attention.yaml", range, outside_range;
  int inside = 8, outside = 8;
  std::uint64_t seed = 1;
  bool nonblocking = false;
};

/// Takes this program's own --name=value flags out of argv (the rest is
/// Google Benchmark's).
Flags take_flags(int& argc, char** argv) {
  Flags flags;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* name) -> std::optional<std::string> {
      std::string prefix = std::string("--") + name + "=";
      if (arg.rfind(prefix, 0) == 0) return arg.substr(prefix.size());
      return std::nullopt;
    };
    if (auto v = value("db")) flags.db = *v;
    else if (auto v = value("space")) flags.space = *v;
    else if (auto v = value("range")) flags.range = *v;
    else if (auto v = value("outside-range")) flags.outside_range = *v;
    else if (auto v = value("inside")) flags.inside = std::stoi(*v);
    else if (auto v = value("outside")) flags.outside = std::stoi(*v);
    else if (auto v = value("seed")) flags.seed = std::stoull(*v);
    else if (auto v = value("nonblocking")) flags.nonblocking = *v == "1";
    else argv[kept++] = argv[i];
  }
  argc = kept;
  return flags;
}

/// Where a first call's host time went (DispatcherStats' phases), in ms.
struct Phases {
  double choose = 0, store_read = 0, load = 0, ready = 0, miss = 0, rank = 0, queue = 0, launch = 0, workspace = 0,
         lock_wait = 0;
  /// What the dispatcher's phases do not cover (the launch's workspace time
  /// is inside `launch`).
  double other(double host_ms) const {
    return host_ms - (choose + store_read + load + ready + miss + rank + queue + launch + lock_wait);
  }
};

struct FirstCall {
  bool inside = false;
  double host_ms = 0;
  std::uint64_t compiles = 0;
  std::uint64_t caller_compiles = 0;  // of compiles, on the caller's thread
  bool not_ready = false;             // nonblocking mode answered NotReadyError
  Phases phases;
};

Phases phase_delta(const DispatcherStats& before, const DispatcherStats& after) {
  auto ms = [](std::uint64_t from, std::uint64_t to) { return static_cast<double>(to - from) * 1e-6; };
  return Phases{ms(before.choose_ns, after.choose_ns), ms(before.store_read_ns, after.store_read_ns),
                ms(before.load_ns, after.load_ns), ms(before.ready_ns, after.ready_ns),
                ms(before.miss_ns, after.miss_ns), ms(before.rank_ns, after.rank_ns),
                ms(before.queue_ns, after.queue_ns), ms(before.first_launch_ns, after.first_launch_ns),
                ms(before.workspace_ns, after.workspace_ns), ms(before.lock_wait_ns, after.lock_wait_ns)};
}

struct Setup {
  std::string skip;
  std::unique_ptr<SearchSpace> space;
  fs::path own_dir;  // the temporary database's directory, when the benchmark made one
  std::unique_ptr<Dispatcher> dispatcher;
  std::unique_ptr<Stream> stream;
  std::string range_text;
  std::set<Shape> launched;
  std::vector<FirstCall> calls;

  ~Setup() {
    dispatcher.reset();
    std::error_code ec;
    if (!own_dir.empty()) fs::remove_all(own_dir, ec);
  }
};

Shape draw(const ShapeBox& box, std::mt19937_64& rng) {
  Shape shape;
  for (std::size_t i = 0; i < box.low.size(); ++i) {
    const double low = static_cast<double>(box.low[i]), high = static_cast<double>(box.high[i]);
    std::int64_t value;
    if (high / low >= 16) {
      std::uniform_real_distribution<double> log_value(std::log(low), std::log(high + 1));
      value = static_cast<std::int64_t>(std::floor(std::exp(log_value(rng))));
    } else {
      value = std::uniform_int_distribution<std::int64_t>(box.low[i], box.high[i])(rng);
    }
    shape.values.push_back(std::clamp(value, box.low[i], box.high[i]));
  }
  return shape;
}

/// A database of its own: two tuned entries, warmed over own_warm_range.
fs::path make_database(Setup& s, const DeviceInfo& device, const Flags& flags) {
  s.own_dir = fs::temp_directory_path() / fmt::format("mlatune_bench_first_call_{}", getpid());
  fs::remove_all(s.own_dir);
  fs::create_directories(s.own_dir);
  const fs::path db = s.own_dir / "first_call.db";
  const SearchSpace& space = *s.space;
  const Shape near = space.parse_shape("B=2,T=256,H=8,D=64,R=128"), far = space.parse_shape("B=2,T=2048,H=8,D=64,R=128");
  std::mt19937_64 rng(flags.seed);
  std::optional<Config> sampled = space.sample(far, rng);
  record_tuned_entry(db, space, flags.space, device, space.shape_string(near), space.config_string(space.default_config()),
                     "bench_first_call", Timing{10, 10, 10, 1, 0, "made up: steers the choice only"});
  record_tuned_entry(db, space, flags.space, device, space.shape_string(far),
                     space.config_string(sampled ? *sampled : space.default_config()), "bench_first_call",
                     Timing{50, 50, 50, 1, 0, "made up: steers the choice only"});
  Store store = Store::open(db);
  DispatchIndex index = DispatchIndex::build(store, space, DispatchTarget{device, ToolchainInfo::current()});
  WarmReport report = warm(store, index, WarmOptions{parse_shape_box(space, own_warm_range)});
  if (report.failed) throw EnvironmentError("warm-up failed: " + report.first_failure);
  return db;
}

/// The range to draw inside shapes from: --range, else the newest warm
/// range of this kernel version and architecture in the database.
std::string warmed_range(const fs::path& db, const SearchSpace& space, const std::string& arch) {
  Store store = Store::open(db, StoreMode::read_only);
  for (const WarmRange& w : store.warm_ranges())
    if (w.kernel_name == space.kernel_name() && w.template_hash == space.template_hash() &&
        w.definition_hash == space.definition_hash() && w.arch == arch && w.nvrtc_version == nvrtc_version())
      return w.range;
  throw InputError(fmt::format("{} records no warm range of {} for {}: run mlatune cache warm, or give --range",
                               db.string(), space.kernel_name(), arch));
}

void first_call(benchmark::State& state, Setup* s, Shape shape, bool inside) {
  if (!s->skip.empty()) {
    state.SkipWithError(s->skip.c_str());
    return;
  }
  FirstCall call{inside};
  DispatcherStats before{}, after{};
  try {
    for (auto _ : state) {
      if (!s->launched.insert(shape).second) {
        state.SkipWithError("this shape was launched before in this process: not a first call");
        return;
      }
      const CallSignature& signature = s->dispatcher->signature();
      std::vector<DeviceBuffer> buffers;
      std::vector<void*> pointers;
      for (std::int64_t bytes : signature.buffer_bytes(shape)) {
        buffers.emplace_back(static_cast<std::size_t>(bytes));
        MLATUNE_CUDA(cudaMemset(buffers.back().get(), 0, static_cast<std::size_t>(bytes)));
        pointers.push_back(buffers.back().get());
      }
      MLATUNE_CUDA(cudaDeviceSynchronize());
      before = s->dispatcher->stats();
      auto start = std::chrono::steady_clock::now();
      try {
        s->dispatcher->launch_buffers(shape, pointers.data(), pointers.size(), s->stream->get());
      } catch (const NotReadyError&) {
        call.not_ready = true;
      }
      auto stop = std::chrono::steady_clock::now();
      after = s->dispatcher->stats();
      s->stream->synchronize();
      const double seconds = std::chrono::duration<double>(stop - start).count();
      call.host_ms = seconds * 1e3;
      state.SetIterationTime(seconds);
    }
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
    return;
  }
  call.compiles = after.compiles - before.compiles;
  call.caller_compiles = after.blocking_compiles - before.blocking_compiles;
  call.phases = phase_delta(before, after);
  s->calls.push_back(call);
  state.counters["host_ms"] = call.host_ms;
  state.counters["choose_ms"] = call.phases.choose;
  state.counters["store_ms"] = call.phases.store_read;
  state.counters["load_ms"] = call.phases.load;
  state.counters["ready_ms"] = call.phases.ready;
  state.counters["miss_ms"] = call.phases.miss;
  state.counters["rank_ms"] = call.phases.rank;
  state.counters["queue_ms"] = call.phases.queue;
  state.counters["launch_ms"] = call.phases.launch;
  state.counters["workspace_ms"] = call.phases.workspace;
  state.counters["lock_wait_ms"] = call.phases.lock_wait;
  state.counters["rest_ms"] = call.phases.other(call.host_ms);
  state.counters["compiles"] = static_cast<double>(call.compiles);
  state.counters["caller_compiles"] = static_cast<double>(call.caller_compiles);
  state.counters["not_ready"] = call.not_ready ? 1 : 0;
  state.counters["from_store"] = static_cast<double>(after.binaries_from_store - before.binaries_from_store);
  state.counters["loaded"] = static_cast<double>(after.binaries_loaded - before.binaries_loaded);
  DispatchDescription d = s->dispatcher->describe(shape);
  state.SetLabel(fmt::format("{} {}", to_string(d.choice.reason), d.choice.config_text));
}

/// `count` shapes of `box` that the dispatcher can run, not yet drawn, and
/// (for outside shapes) not inside `exclude`.
std::vector<Shape> draw_shapes(Setup& s, const ShapeBox& box, const ShapeBox* exclude, int count, std::mt19937_64& rng,
                               std::set<Shape>& drawn) {
  std::vector<Shape> shapes;
  for (int attempt = 0; static_cast<int>(shapes.size()) < count && attempt < 1000 * (count + 1); ++attempt) {
    Shape shape = draw(box, rng);
    if ((exclude && exclude->contains(shape)) || drawn.count(shape)) continue;
    if (!s.dispatcher->describe(shape).choice.ok()) continue;
    drawn.insert(shape);
    shapes.push_back(shape);
  }
  return shapes;
}

bool covers(const ShapeBox& outer, const ShapeBox& inner) {
  return outer.contains(Shape{inner.low}) && outer.contains(Shape{inner.high});
}

void register_shapes(Setup& s, const Flags& flags) {
  const SearchSpace& space = *s.space;
  const ShapeBox inside_box = parse_shape_box(space, s.range_text);
  std::string outside_text = flags.outside_range;
  if (outside_text.empty() && space.shape_variables() == std::vector<std::string>{"B", "T", "H", "D", "R"})
    outside_text = covers(inside_box, parse_shape_box(space, benchmark_distribution)) ? more_heads
                                                                                    : benchmark_distribution;
  std::mt19937_64 rng(flags.seed);
  std::set<Shape> drawn;
  for (const Shape& shape : draw_shapes(s, inside_box, nullptr, flags.inside, rng, drawn))
    benchmark::RegisterBenchmark(("first_call/inside/" + space.shape_string(shape)).c_str(), first_call, &s, shape, true)
        ->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
  if (outside_text.empty()) return;
  const ShapeBox outside_box = parse_shape_box(space, outside_text);
  const std::vector<Shape> outside = draw_shapes(s, outside_box, &inside_box, flags.outside, rng, drawn);
  for (const Shape& shape : outside)
    benchmark::RegisterBenchmark(("first_call/outside/" + space.shape_string(shape)).c_str(), first_call, &s, shape,
                                 false)
        ->Iterations(1)->UseManualTime()->Unit(benchmark::kMillisecond);
  if (static_cast<int>(outside.size()) < flags.outside)
    fmt::print(stderr,
               "bench_first_call: {} of {} outside shapes drawn from {}: the rest lies inside the warmed range {} "
               "or cannot run; give --outside-range\n",
               outside.size(), flags.outside, outside_box.text(space), s.range_text);
}

void prepare(Setup& s, const Flags& flags) {
  GpuProbe probe = probe_gpu();
  if (!probe.usable) {
    s.skip = "no GPU: " + probe.reason;
    return;
  }
  try {
    s.space = std::make_unique<SearchSpace>(SearchSpace::load(flags.space));
    const DeviceInfo device = probe.device.info();
    const fs::path db = flags.db.empty() ? make_database(s, device, flags) : fs::path(flags.db);
    s.range_text = !flags.range.empty() ? flags.range
                   : flags.db.empty()    ? std::string(own_warm_range)
                                         : warmed_range(db, *s.space, device.arch);
    const auto opening = std::chrono::steady_clock::now();
    DispatcherOptions options;
    if (flags.nonblocking) options.compile = CompileMode::nonblocking;
    s.dispatcher = Dispatcher::open(db, flags.space, options);
    fmt::print("Dispatcher::open: {:.3f} ms host\n",
               std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - opening).count());
    s.stream = std::make_unique<Stream>();
    register_shapes(s, flags);
  } catch (const std::exception& e) {
    s.skip = std::string("setup failed: ") + e.what();
  }
}

double median_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

void print_summary(const Setup& s, const Flags& flags) {
  for (bool inside : {true, false}) {
    std::vector<double> ms, choose, store_read, load, ready, miss, rank, queue, launch, workspace, lock_wait, other;
    std::uint64_t compiles = 0, caller_compiles = 0, not_ready = 0;
    for (const FirstCall& c : s.calls)
      if (c.inside == inside) {
        ms.push_back(c.host_ms);
        compiles += c.compiles;
        caller_compiles += c.caller_compiles;
        not_ready += c.not_ready;
        choose.push_back(c.phases.choose);
        store_read.push_back(c.phases.store_read);
        load.push_back(c.phases.load);
        ready.push_back(c.phases.ready);
        miss.push_back(c.phases.miss);
        rank.push_back(c.phases.rank);
        queue.push_back(c.phases.queue);
        launch.push_back(c.phases.launch);
        workspace.push_back(c.phases.workspace);
        lock_wait.push_back(c.phases.lock_wait);
        other.push_back(c.phases.other(c.host_ms));
      }
    if (ms.empty()) continue;
    auto slow = std::count_if(ms.begin(), ms.end(), [](double v) { return v > slow_first_call_ms; });
    fmt::print("first_call summary: {} {}{}: {} shapes, host ms median {:.3f} max {:.3f}, NVRTC compiles {} "
               "(on the caller's thread {}), not ready {}, over {} ms: {}\n",
               inside ? "inside the warmed range" : "outside the warmed range", s.range_text,
               flags.nonblocking ? " (nonblocking mode)" : "", ms.size(), median_of(ms),
               *std::max_element(ms.begin(), ms.end()), compiles, caller_compiles, not_ready, slow_first_call_ms,
               slow);
    fmt::print("  phase medians (ms): choose {:.3f}, store read {:.3f}, module load {:.3f}, launch readying {:.3f}, "
               "miss record {:.3f}, stand-in ranking {:.3f}, background queueing {:.3f}, launch {:.3f} (of it "
               "workspaces {:.3f}), lock wait {:.3f}, the rest {:.3f}\n",
               median_of(choose), median_of(store_read), median_of(load), median_of(ready), median_of(miss),
               median_of(rank), median_of(queue), median_of(launch), median_of(workspace), median_of(lock_wait),
               median_of(other));
  }
}

}  // namespace
}  // namespace mlatune

// NVRTC's compute cache must be off before NVRTC loads (core/compiler.h).
int main(int argc, char** argv) {
  mlatune::ensure_compute_cache_disabled(argv);
  const mlatune::Flags flags = mlatune::take_flags(argc, argv);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  auto setup = std::make_unique<mlatune::Setup>();
  mlatune::prepare(*setup, flags);
  if (!setup->skip.empty())
    benchmark::RegisterBenchmark("first_call", mlatune::first_call, setup.get(), mlatune::Shape{}, false)
        ->Iterations(1);
  benchmark::RunSpecifiedBenchmarks();
  mlatune::print_summary(*setup, flags);
  benchmark::Shutdown();
  return 0;
}
