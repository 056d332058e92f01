// The launch plan without a GPU: scalar packing and its range checks, the
// device-limit check against a fake device, and the equivalence of the two
// launch paths.  For the same (space, config, shape) the evaluator's path
// (the candidate the sweep builds from the plan, after its trip through the
// worker pipe, issued as the evaluator issues it, with the workload's
// argument list) and the dispatcher's path (its per-shape launch made from
// the plan, with the arguments its cache hit points at) must launch the same
// entries with the same geometry, workspace sizes and argument bytes, or
// refuse with the same reason.
#include "core/launch_plan.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <random>

#include <gtest/gtest.h>

#include "cache/dispatch_launch.h"
#include "core/launch_issue.h"
#include "core/launch_limits.h"
#include "tuner/argument_list.h"
#include "tuner/evaluator.h"
#include "tuner/worker/client.h"
#include "tuner/worker/codec.h"
#include "tuner/workload.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

const fs::path test_spaces = fs::path(MLATUNE_TEST_DATA_DIR) / "spaces";
const fs::path flagship_file =
    fs::path(MLATUNE_TEST_DATA_DIR).parent_path() / "search_spaces" / "fused_mla_attention.yaml";

// ---- scalar packing ----------------------------------------------------------

Argument scalar(std::string name, ElementType type) {
  Argument a;
  a.name = std::move(name);
  a.type = type;
  a.role = ArgumentRole::scalar;
  a.where = SourceLocation{"space.yaml", 7, 5};
  return a;
}

template <typename T>
T unpacked(const PackedScalar& p) {
  T value;
  std::memcpy(&value, &p.packed, sizeof value);
  return value;
}

TEST(PackScalar, Int32TakesExactlyItsRange) {
  const Argument n = scalar("n", ElementType::int32);
  EXPECT_EQ(unpacked<std::int32_t>(pack_scalar(n, 2147483647.0)), 2147483647);
  EXPECT_EQ(unpacked<std::int32_t>(pack_scalar(n, -2147483648.0)), -2147483647 - 1);
  EXPECT_EQ(unpacked<std::int32_t>(pack_scalar(n, -5.0)), -5);
  // The bytes above the value stay zero: both paths pass all 8.
  EXPECT_EQ(pack_scalar(n, 1000.0).packed, 1000u);

  PackedScalar above = pack_scalar(n, 2147483648.0);
  EXPECT_FALSE(above.ok());
  EXPECT_EQ(above.packed, 0u);
  EXPECT_NE(above.refusal.find("scalar 'n'"), std::string::npos) << above.refusal;
  EXPECT_NE(above.refusal.find("int32"), std::string::npos) << above.refusal;
  EXPECT_NE(above.refusal.find("space.yaml:7:5"), std::string::npos) << above.refusal;
  EXPECT_NE(above.refusal.find("outside the range"), std::string::npos) << above.refusal;
  EXPECT_FALSE(pack_scalar(n, -2147483649.0).ok());
  EXPECT_NE(pack_scalar(n, 1.5).refusal.find("not an integer"), std::string::npos);
  EXPECT_NE(pack_scalar(n, std::nan("")).refusal.find("not a finite number"), std::string::npos);
  EXPECT_FALSE(pack_scalar(n, std::numeric_limits<double>::infinity()).ok());
}

TEST(PackScalar, Int64TakesIntegersWhereADoubleIsExact) {
  const Argument n = scalar("count", ElementType::int64);
  EXPECT_EQ(unpacked<std::int64_t>(pack_scalar(n, 3.0e9)), 3000000000);
  EXPECT_EQ(unpacked<std::int64_t>(pack_scalar(n, 9007199254740992.0)), 9007199254740992);
  EXPECT_EQ(unpacked<std::int64_t>(pack_scalar(n, -7.0)), -7);
  EXPECT_FALSE(pack_scalar(n, 9007199254740994.0).ok());
  EXPECT_FALSE(pack_scalar(n, 1e300).ok());
  EXPECT_FALSE(pack_scalar(n, 0.5).ok());
  EXPECT_NE(pack_scalar(n, 1e19).refusal.find("scalar 'count'"), std::string::npos);
}

TEST(PackScalar, FloatsMustStayFiniteInTheirType) {
  const Argument f = scalar("scale", ElementType::float32);
  EXPECT_EQ(unpacked<float>(pack_scalar(f, 0.25)), 0.25f);
  EXPECT_EQ(unpacked<float>(pack_scalar(f, 1.0 / std::sqrt(24.0))),
            static_cast<float>(1.0 / std::sqrt(24.0)));
  EXPECT_NE(pack_scalar(f, 1e39).refusal.find("beyond the largest float32"), std::string::npos);
  EXPECT_FALSE(pack_scalar(f, std::nan("")).ok());
  EXPECT_FALSE(pack_scalar(f, -std::numeric_limits<double>::infinity()).ok());

  const Argument d = scalar("eps", ElementType::float64);
  EXPECT_EQ(unpacked<double>(pack_scalar(d, 1e39)), 1e39);
  EXPECT_FALSE(pack_scalar(d, std::nan("")).ok());
  EXPECT_NE(pack_scalar(d, std::numeric_limits<double>::infinity()).refusal.find("scalar 'eps'"),
            std::string::npos);
}

TEST(ArgumentLayout, NumbersBuffersAndWorkspacesAndNamesTheFirstBadScalar) {
  SearchSpace space = SearchSpace::load(test_spaces / "prologue.yaml");
  ArgumentLayout layout = layout_arguments(space.bind_arguments(space.parse_shape("N=1000")));
  ASSERT_TRUE(layout.ok()) << layout.refusal;
  ASSERT_EQ(layout.slots.size(), 4u);  // x, out, scratch, n
  EXPECT_EQ(layout.buffer_count, 2u);
  EXPECT_EQ(layout.workspace_count, 1u);
  EXPECT_EQ(layout.slots[0].index, 0);
  EXPECT_EQ(layout.slots[1].index, 1);
  EXPECT_EQ(layout.slots[2].role, ArgumentRole::workspace);
  EXPECT_EQ(layout.slots[2].index, 0);
  EXPECT_EQ(layout.slots[3].packed, 1000u);

  ArgumentLayout big = layout_arguments(space.bind_arguments(space.parse_shape("N=3000000000")));
  EXPECT_FALSE(big.ok());
  EXPECT_NE(big.refusal.find("scalar 'n' (int32"), std::string::npos) << big.refusal;
  EXPECT_NE(big.refusal.find("3000000000"), std::string::npos) << big.refusal;
  EXPECT_THROW(workload_layout(space.bind_arguments(space.parse_shape("N=3000000000"))), InputError);
}

TEST(ArgumentList, CountsMustMatchTheLayout) {
  SearchSpace space = SearchSpace::load(test_spaces / "prologue.yaml");
  ArgumentLayout layout = layout_arguments(space.bind_arguments(space.parse_shape("N=1000")));
  void* in = reinterpret_cast<void*>(0x1000);
  void* out = reinterpret_cast<void*>(0x2000);
  EXPECT_THROW(ArgumentList(layout, {in}, {}), EnvironmentError);
  EXPECT_THROW(ArgumentList(layout, {in, out}, {}), EnvironmentError);  // two inputs, the space has one
  ArgumentList list(layout, {in}, {out});
  EXPECT_THROW(list.set_workspaces({}), EnvironmentError);
  void* scratch = reinterpret_cast<void*>(0x3000);
  list.set_workspaces({scratch});
  EXPECT_EQ(*static_cast<void**>(list.pointers()[2]), scratch);
}

// ---- device limits -------------------------------------------------------------

DeviceProperties fake_device() {
  DeviceProperties d;
  d.name = "fake H200";
  d.max_threads_per_block = 1024;
  const std::int64_t block[3] = {1024, 1024, 64}, grid[3] = {2147483647, 65535, 65535};
  for (int i = 0; i < 3; ++i) {
    d.max_block[i] = block[i];
    d.max_grid[i] = grid[i];
  }
  d.shared_per_block = 48 * 1024;
  d.shared_per_block_optin = 227 * 1024;
  return d;
}

KernelAttributes fake_kernel(int max_threads = 1024, std::int64_t static_shared = 0) {
  KernelAttributes a;
  a.max_threads_per_block = max_threads;
  a.registers = 65536 / max_threads;
  a.static_shared_bytes = static_shared;
  return a;
}

LaunchGeometry geometry(std::int64_t gx, std::int64_t bx, std::int64_t shared = 0) {
  LaunchGeometry g;
  g.grid[0] = gx;
  g.block[0] = bx;
  g.shared_bytes = shared;
  return g;
}

std::string refusal_of(const LaunchGeometry& g, const KernelAttributes& k = fake_kernel()) {
  return limit_refusal(g, k, fake_device());
}

TEST(LaunchLimits, EveryLimitIsNamed) {
  const DeviceProperties device = fake_device();
  EXPECT_EQ(refusal_of(geometry(1000, 256, 200 * 1024)), "");

  LaunchGeometry g = geometry(0, 128);
  EXPECT_NE(refusal_of(g).find("must be positive"), std::string::npos);
  g = geometry(8, 64);
  g.block[2] = 65;
  g.block[0] = 8;
  EXPECT_NE(refusal_of(g).find("block dimension z is 65, the device allows 64"), std::string::npos)
      << refusal_of(g);
  g = geometry(8, 64);
  g.grid[1] = 65536;
  EXPECT_NE(refusal_of(g).find("grid dimension y is 65536"), std::string::npos) << refusal_of(g);
  EXPECT_NE(refusal_of(geometry(2147483648, 32)).find("grid dimension x"), std::string::npos);

  g = geometry(8, 512);
  g.block[1] = 4;
  EXPECT_NE(refusal_of(g).find("2048 threads per block, the device allows 1024"), std::string::npos)
      << refusal_of(g);
  EXPECT_NE(refusal_of(geometry(8, 768), fake_kernel(512)).find("this kernel can launch at most 512"),
            std::string::npos);
  EXPECT_EQ(refusal_of(geometry(8, 512), fake_kernel(512)), "");

  EXPECT_NE(refusal_of(geometry(8, 32, -1)).find("negative dynamic shared memory"), std::string::npos);
  // Static shared memory counts against the same limit as dynamic.
  const std::int64_t dynamic = device.shared_per_block_optin - 1024;
  EXPECT_EQ(refusal_of(geometry(8, 32, dynamic), fake_kernel(1024, 1024)), "");
  std::string why = refusal_of(geometry(8, 32, dynamic), fake_kernel(1024, 1025));
  EXPECT_NE(why.find("(1025 static + 231424 dynamic), the device allows 232448"), std::string::npos)
      << why;
}

TEST(LaunchLimits, ThePrologueIsCheckedToo) {
  LaunchSteps steps;
  steps.geometry = geometry(8, 256, 1024);
  EXPECT_EQ(limit_refusal(steps, fake_kernel(), nullptr, fake_device()), "");
  steps.prologue = PrologueLaunch{"expand", geometry(8, 512)};
  steps.prologue->geometry.block[1] = 4;
  const KernelAttributes prologue = fake_kernel();
  EXPECT_EQ(limit_refusal(steps, fake_kernel(), &prologue, fake_device()),
            "prologue: 2048 threads per block, the device allows 1024");
  EXPECT_NE(limit_refusal(steps, fake_kernel(), nullptr, fake_device()), "");
  steps.prologue->geometry = geometry(8, 128, 300 * 1024);
  EXPECT_NE(limit_refusal(steps, fake_kernel(), &prologue, fake_device())
                .find("prologue: 307200 bytes of shared memory per block"),
            std::string::npos);
  // The main kernel's refusal comes first.
  steps.geometry.block[0] = 4096;
  EXPECT_EQ(limit_refusal(steps, fake_kernel(), &prologue, fake_device()),
            "block dimension x is 4096, the device allows 1024");
}

// ---- the two paths ---------------------------------------------------------------

/// Stand-ins for loaded kernels: never loaded, only compared by address.
struct FakeKernels {
  LoadedKernel main;
  LoadedKernel prologue;
};

void* fake_buffer(std::size_t argument) { return reinterpret_cast<void*>(0x100000 * (argument + 1)); }
void* fake_workspace(std::size_t k) { return reinterpret_cast<void*>(0xdead0000 + 0x100 * k); }

/// The 8 bytes each argument pointer of a launch points at.
std::vector<std::uint64_t> argument_bytes(void* const* arguments, std::size_t n) {
  std::vector<std::uint64_t> bytes(n);
  for (std::size_t i = 0; i < n; ++i) std::memcpy(&bytes[i], arguments[i], sizeof bytes[i]);
  return bytes;
}

/// What the evaluator launches for `plan` at `shape`: the sweep's candidate,
/// after the worker pipe, issued with the kernels it loads, and the
/// workload's argument list with the candidate's workspaces installed.
struct WorkerLaunch {
  Candidate candidate;
  LaunchSequence sequence;
  std::vector<std::uint64_t> arguments;
};

WorkerLaunch worker_launch(const SearchSpace& space, const Shape& shape, const LaunchPlan& plan,
                           const FakeKernels& kernels) {
  WorkerLaunch w;
  const Candidate sent = make_candidate(plan, "label", std::string("\x7f" "ELF", 4));
  // Through the worker's wire format, as the sweep sends it.
  const Request received = decode_request(encode_request(EvaluateRequest{sent, std::nullopt}));
  w.candidate = std::get<EvaluateRequest>(received).candidate;
  w.sequence = launch_sequence(launch_steps(w.candidate), &kernels.main,
                               w.candidate.prologue ? &kernels.prologue : nullptr);
  std::vector<void*> inputs, outputs, workspaces;
  for (std::size_t i = 0; i < space.arguments().size(); ++i) {
    if (space.arguments()[i].role == ArgumentRole::input) inputs.push_back(fake_buffer(i));
    if (space.arguments()[i].role == ArgumentRole::output) outputs.push_back(fake_buffer(i));
  }
  ArgumentList list(workload_layout(space.bind_arguments(shape)), inputs, outputs);
  // The evaluator's WorkspaceLease allocates and installs one buffer per size.
  for (std::size_t k = 0; k < w.candidate.workspace_bytes.size(); ++k)
    workspaces.push_back(fake_workspace(k));
  if (!workspaces.empty()) list.set_workspaces(workspaces);
  w.arguments = argument_bytes(list.pointers(), list.size());
  return w;
}

/// What the dispatcher launches for `plan`: its per-shape launch, with the
/// argument list launch_buffers points at the caller's buffers and, where
/// the prologue runs, launch_with_workspace's scratch.
struct DispatcherLaunch {
  DispatchLaunch launch;
  std::vector<std::uint64_t> arguments;
};

DispatcherLaunch dispatcher_launch(const SearchSpace& space, const LaunchPlan& plan,
                                   const FakeKernels& kernels) {
  DispatcherLaunch d;
  d.launch = dispatch_launch(plan, &kernels.main, &kernels.prologue);
  std::vector<void*> buffers;  // the caller's: inputs and outputs in launch order
  for (std::size_t i = 0; i < space.arguments().size(); ++i) {
    ArgumentRole role = space.arguments()[i].role;
    if (role == ArgumentRole::input || role == ArgumentRole::output) buffers.push_back(fake_buffer(i));
  }
  EXPECT_EQ(buffers.size(), d.launch.buffer_count);
  std::vector<void*> list(d.launch.arguments.size());
  point_arguments(d.launch, buffers.data(), list.data());
  std::vector<void*> scratch;
  for (std::size_t k = 0; k < d.launch.workspace_bytes.size(); ++k) scratch.push_back(fake_workspace(k));
  if (d.launch.runs_prologue()) point_workspaces(d.launch, list.data(), scratch.data());
  d.arguments = argument_bytes(list.data(), list.size());
  return d;
}

void expect_same_kernel_launch(const KernelLaunch& a, const KernelLaunch& b) {
  EXPECT_EQ(a.kernel, b.kernel);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(a.grid[i], b.grid[i]);
    EXPECT_EQ(a.block[i], b.block[i]);
  }
  EXPECT_EQ(a.shared_bytes, b.shared_bytes);
}

/// Counts of what the comparison saw, so a test can insist that it covered
/// prologues and refusals rather than passing vacuously.
struct Coverage {
  int launches = 0;
  int prologues = 0;
  int refusals = 0;
};

/// Compares the two paths for one (config, shape).
void expect_same_launch(const SearchSpace& space, const Config& config, const Shape& shape,
                        Coverage& coverage) {
  SCOPED_TRACE(space.config_string(config) + " at " + space.shape_string(shape));
  const LaunchPlan plan = plan_launch(space, config, shape);
  const std::string where = space.config_string(config) + " at " + space.shape_string(shape);
  FakeKernels kernels;
  if (!plan.arguments.ok()) {
    // The worker cannot build the shape's workload; the dispatcher refuses
    // the shape at its first launch.  The same reason, from each.
    ++coverage.refusals;
    std::string worker_reason;
    try {
      workload_layout(space.bind_arguments(shape));
    } catch (const InputError& e) {
      worker_reason = e.what();
    }
    EXPECT_FALSE(worker_reason.empty());
    EXPECT_EQ(dispatch_refusal(plan, where), where + ": " + worker_reason);
    return;
  }
  if (!plan.ok()) {
    // The sweep records the plan's refusal; the dispatcher reports it.
    ++coverage.refusals;
    EXPECT_EQ(dispatch_refusal(plan, where), where + ": " + plan.refusal);
    return;
  }
  EXPECT_EQ(dispatch_refusal(plan, where), "");
  ++coverage.launches;
  const WorkerLaunch w = worker_launch(space, shape, plan, kernels);
  const DispatcherLaunch d = dispatcher_launch(space, plan, kernels);

  EXPECT_EQ(w.candidate.entry, space.kernel().entry);
  expect_same_kernel_launch(w.sequence.main, d.launch.sequence.main);
  EXPECT_EQ(w.candidate.prologue.has_value(), d.launch.runs_prologue());
  EXPECT_EQ(w.candidate.prologue.has_value(), space.prologue_runs(config, shape));
  expect_same_kernel_launch(w.sequence.prologue, d.launch.sequence.prologue);
  if (w.candidate.prologue) {
    ++coverage.prologues;
    EXPECT_EQ(w.candidate.prologue->entry, space.prologue()->kernel.entry);
  }
  EXPECT_EQ(w.candidate.workspace_bytes, d.launch.workspace_bytes);
  EXPECT_EQ(w.arguments, d.arguments);
}

/// `count` configs drawn at random among those valid at `shape` under the
/// extra `constraints` (the same parameters, so they are configs of `space`).
std::vector<Config> sample_configs(const SearchSpace& space, const Shape& shape, int count,
                                   const std::vector<std::string>& constraints = {}) {
  SearchSpace restricted = constraints.empty() ? SearchSpace(space) : space.restrict(constraints);
  std::mt19937_64 rng(12345);
  std::vector<Config> configs;
  for (int i = 0; i < count; ++i)
    if (std::optional<Config> c = restricted.sample(shape, rng)) configs.push_back(*c);
  return configs;
}

TEST(LaunchPlanEquivalence, FlagshipSpaceOverManyConfigsAndShapes) {
  SearchSpace space = SearchSpace::load(flagship_file);
  Coverage coverage;
  for (const char* text : {"B=2,T=32,H=4,D=16,R=24", "B=4,T=256,H=8,D=32,R=64",
                           "B=4,T=1024,H=16,D=64,R=128", "B=2,T=2048,H=32,D=64,R=256",
                           "B=1,T=4096,H=16,D=128,R=512", "B=3,T=77,H=5,D=24,R=40",
                           "B=4,T=300,H=16,D=64,R=131", "B=1,T=777,H=3,D=57,R=203"}) {
    const Shape shape = space.parse_shape(text);
    for (const Config& config : sample_configs(space, shape, 120)) expect_same_launch(space, config, shape, coverage);
    // The two-kernel algorithm, whose prologue fills the workspace.
    for (const Config& config : sample_configs(space, shape, 40, {"ALGORITHM == tf32x3_2k"}))
      expect_same_launch(space, config, shape, coverage);
    // Shape-bucketed binaries, whose shared memory follows the bucket.
    for (const Config& config : sample_configs(space, shape, 20, {"SHAPE_BUCKETS == bucketed"}))
      expect_same_launch(space, config, shape, coverage);
  }
  EXPECT_GT(coverage.launches, 500);
  EXPECT_GT(coverage.prologues, 100);
}

TEST(LaunchPlanEquivalence, FlagshipWorkspaceAndScalarsAreWhatTheSpaceSays) {
  SearchSpace space = SearchSpace::load(flagship_file);
  // tf32x3_2k is tried at T > 256 only.
  const Shape shape = space.parse_shape("B=4,T=1024,H=8,D=32,R=64");
  std::vector<Config> configs = sample_configs(space, shape, 1, {"ALGORITHM == tf32x3_2k"});
  ASSERT_EQ(configs.size(), 1u);
  const LaunchPlan plan = plan_launch(space, configs[0], shape);
  ASSERT_TRUE(plan.ok()) << plan.refusal;
  ASSERT_TRUE(plan.steps.prologue.has_value());
  // kv_ws is [B, H, T, 2, 8 * ceil(D / 8)] float32.
  EXPECT_EQ(plan.steps.workspace_bytes, std::vector<std::int64_t>{4 * 8 * 1024 * 2 * 32 * 4});
  const std::vector<ArgumentSlot>& slots = plan.arguments.slots;
  ASSERT_EQ(slots.size(), 12u);
  EXPECT_EQ(slots[6].packed, 4u);    // B
  EXPECT_EQ(slots[7].packed, 1024u);  // T
  float scale = 0;
  std::memcpy(&scale, &slots[8].packed, sizeof scale);
  EXPECT_EQ(scale, static_cast<float>(1.0 / std::sqrt(32.0)));
  // The run-time H, D, R that shape-bucketed binaries read.
  EXPECT_EQ(slots[9].packed, 8u);
  EXPECT_EQ(slots[10].packed, 32u);
  EXPECT_EQ(slots[11].packed, 64u);
  EXPECT_EQ(slots[4].index, 4);  // out: the fifth of the caller's buffers
  EXPECT_EQ(slots[5].role, ArgumentRole::workspace);
}

TEST(LaunchPlanEquivalence, FlagshipRefusesAnInt32OverflowTheSameWayOnBothPaths) {
  SearchSpace space = SearchSpace::load(flagship_file);
  const Shape tuned = space.parse_shape("B=2,T=1024,H=4,D=16,R=24");
  Coverage coverage;
  std::vector<Config> configs = sample_configs(space, tuned, 30);
  for (const Config& config : sample_configs(space, tuned, 10, {"ALGORITHM == tf32x3_2k"}))
    configs.push_back(config);
  ASSERT_EQ(configs.size(), 40u);
  for (const char* text : {"B=1,T=3000000000,H=4,D=16,R=24", "B=2147483648,T=32,H=4,D=16,R=24"})
    for (const Config& config : configs)
      expect_same_launch(space, config, space.parse_shape(text), coverage);
  EXPECT_EQ(coverage.refusals, 2 * static_cast<int>(configs.size()));
  EXPECT_EQ(coverage.launches, 0);

  const LaunchPlan plan = plan_launch(space, configs[0], space.parse_shape("B=1,T=3000000000,H=4,D=16,R=24"));
  EXPECT_NE(plan.refusal.find("scalar 'T' (int32"), std::string::npos) << plan.refusal;
}

TEST(LaunchPlanEquivalence, TestSpacesEveryConfigAtSeveralShapes) {
  Coverage coverage;
  for (const char* file : {"prologue.yaml", "small.yaml", "dense.yaml", "large.yaml"}) {
    SCOPED_TRACE(file);
    SearchSpace space = SearchSpace::load(test_spaces / file);
    std::vector<Shape> shapes = space.default_shapes();
    for (const Shape& shape : space.default_shapes()) {
      Shape bigger = shape;
      for (std::int64_t& v : bigger.values) v = v * 3 + 1;
      shapes.push_back(bigger);
    }
    int per_space = 0;
    for (const Shape& shape : shapes)
      space.for_each_valid(shape, [&](const Config& config) {
        expect_same_launch(space, config, shape, coverage);
        return ++per_space % 400 != 0;  // at most 400 configs per shape
      });
  }
  EXPECT_GT(coverage.launches, 200);
  EXPECT_GE(coverage.prologues, 4);  // prologue.yaml: EXPAND with PROLOGUE_THREADS 128, 2 shapes
}

TEST(LaunchPlanEquivalence, PrologueSpaceRefusalsAgree) {
  SearchSpace space = SearchSpace::load(test_spaces / "prologue.yaml");
  Coverage coverage;
  // A prologue geometry that is invalid where it runs: the config cannot run.
  const Shape shape = space.parse_shape("N=1000");
  const Config wide = space.parse_config("EXPAND=true,THREADS=64,PROLOGUE_THREADS=2048");
  expect_same_launch(space, wide, shape, coverage);
  EXPECT_NE(plan_launch(space, wide, shape).refusal.find("invalid launch geometry: prologue"),
            std::string::npos);
  // Where the prologue does not run, its geometry does not matter.
  expect_same_launch(space, space.parse_config("EXPAND=false,THREADS=64,PROLOGUE_THREADS=2048"),
                     shape, coverage);
  // n is int32: N beyond it is refused by both, whatever the config.
  space.for_each_valid(shape, [&](const Config& config) {
    expect_same_launch(space, config, space.parse_shape("N=2147483648"), coverage);
    return true;
  });
  expect_same_launch(space, wide, space.parse_shape("N=2147483647"), coverage);
  EXPECT_EQ(coverage.launches, 1);
  EXPECT_EQ(coverage.refusals, 2 + static_cast<int>(space.count(shape)));

  const LaunchPlan plan =
      plan_launch(space, space.parse_config("EXPAND=true,THREADS=256,PROLOGUE_THREADS=128"), shape);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan.steps.prologue->entry, "double_into");
  EXPECT_EQ(plan.steps.prologue->geometry.grid[0], 8);  // ceil(1000 / 128)
  EXPECT_EQ(plan.steps.geometry.grid[0], 4);            // ceil(1000 / 256)
  EXPECT_EQ(plan.steps.workspace_bytes, std::vector<std::int64_t>{4000});
}

}  // namespace
}  // namespace mlatune
