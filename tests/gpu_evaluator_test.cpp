// GPU evaluation end to end, through the worker process: fault injection,
// timing sanity, and sweeps of the default space.  Every test skips with the
// reason when no GPU is usable.  The measurements are printed (the numbers to
// quote); the assertions are the acceptance bounds.
#include <algorithm>
#include <cstdio>
#include <future>
#include <map>
#include <random>
#include <set>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "tests/gpu_worker.h"
#include "core/space.h"
#include "tuner/support_kernels.h"
#include "tuner/worker/client.h"

namespace mlatune {
namespace {

std::filesystem::path faults_space() {
  return std::filesystem::path(MLATUNE_TEST_DATA_DIR) / "faults" / "faults.yaml";
}

/// A compiled candidate, or the reason it did not compile.
struct Built {
  std::optional<Candidate> candidate;
  std::string log;
};

Built build(const SearchSpace& space, const Config& config, const Shape& shape,
            const std::string& arch) {
  CubinBuild cubin = nvrtc_compile_cubin(space.template_text(), space.kernel().path.filename().string(),
                                         space.kernel().entry, space.definitions(config, shape), arch);
  Built built;
  if (!cubin.ok) {
    built.log = cubin.log;
    return built;
  }
  Candidate candidate;
  candidate.label = space.config_string(config);
  candidate.cubin = std::move(cubin.cubin);
  // Entry, geometry, and the prologue and workspace where the config has one.
  describe_launch(space, config, shape, candidate);
  built.candidate = std::move(candidate);
  return built;
}

/// Compiles many configs on all cores (NVRTC needs no GPU).
std::vector<Built> build_all(const SearchSpace& space, const std::vector<Config>& configs,
                             const Shape& shape, const std::string& arch) {
  std::vector<Built> built(configs.size());
  std::atomic<std::size_t> next{0};
  unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::vector<std::thread> pool;
  for (unsigned t = 0; t < threads; ++t)
    pool.emplace_back([&] {
      for (std::size_t i = next++; i < configs.size(); i = next++)
        built[i] = build(space, configs[i], shape, arch);
    });
  for (std::thread& thread : pool) thread.join();
  return built;
}

Config config(const SearchSpace& space, const std::string& text) { return space.parse_config(text); }

std::string describe(const EvaluationResult& r) {
  std::string text(to_string(r.outcome));
  if (r.validation)
    text += fmt::format(" rel_l2={:.3g} max_abs={:.3g} nonfinite={}", r.validation->relative_l2,
                        r.validation->max_abs, r.validation->nonfinite);
  if (r.timing)
    text += fmt::format(" median={:.2f}us min={:.2f} p90={:.2f} n={} spread={:.3f}", r.timing->median_us,
                        r.timing->min_us, r.timing->p90_us, r.timing->count, r.timing->spread);
  if (!r.reason.empty()) text += " | " + r.reason;
  return text;
}

TEST(GpuEvaluator, FaultsAreRecordedAndCorrectConfigsAroundThemMeasured) {
  MLATUNE_REQUIRE_GPU();
  SearchSpace space = SearchSpace::load(faults_space());
  Shape shape = space.parse_shape("N=65536");
  Worker worker(worker_options());
  WorkloadRequest request{faults_space(), "N=65536", 1234, {}};
  request.timing.budget_ms = 100;
  WorkloadInfo info = worker.set_workload(request);
  std::printf("device %s (%s), reference %.2f us, floor %.2f us, step timeout %.2f s\n",
              info.device.name.c_str(), info.device.arch().c_str(), info.reference_us,
              info.floor.median_us, worker.step_timeout_s());

  // Each fault between correct configs: THREADS alternates so that the
  // correct ones are different cubins.  A correct config right after a fault
  // that changed an input or a guard also shows that the damage was undone.
  struct Step {
    std::string config;
    Outcome expected;
    std::string reason_contains;
    // For wrong results: the max abs error against the reference, which
    // says what caught the fault (0: the output itself was right).
    double max_abs = 0.0;
    double max_abs_within = 0.0;
  };
  const std::vector<Step> steps = {
      {"MODE=correct,THREADS=256", Outcome::ok, ""},
      {"MODE=out_of_bounds,THREADS=256", Outcome::crashed, "cudaErrorIllegalAddress"},
      {"MODE=correct,THREADS=128", Outcome::ok, ""},
      {"MODE=trap,THREADS=256", Outcome::crashed, "cudaErrorLaunchFailure"},
      {"MODE=correct,THREADS=256", Outcome::ok, ""},
      {"MODE=hang,THREADS=256", Outcome::timeout, "no progress"},
      {"MODE=correct,THREADS=128", Outcome::ok, ""},
      {"MODE=off_by_1e3,THREADS=256", Outcome::wrong_result, "max abs error", 1e-3, 2e-4},
      {"MODE=correct,THREADS=256", Outcome::ok, ""},
      {"MODE=too_much_smem,THREADS=256", Outcome::launch_error, "shared memory"},
      {"MODE=correct,THREADS=128", Outcome::ok, ""},
      {"MODE=past_end,THREADS=256", Outcome::wrong_result,
       "input set 1: wrote 4 bytes past the end of out (first changed byte at +0)", 0.0, 1e-6},
      {"MODE=correct,THREADS=128", Outcome::ok, ""},
      {"MODE=before_start,THREADS=256", Outcome::wrong_result,
       "input set 1: wrote 4 bytes before the start of out (first changed byte at -4)", 0.0, 1e-6},
      {"MODE=correct,THREADS=256", Outcome::ok, ""},
      {"MODE=overwrites_b,THREADS=128", Outcome::wrong_result,
       "input set 1: overwrote input b (first changed element 17; 1 of 65536 elements changed)", 0.0,
       1e-6},
      {"MODE=correct,THREADS=256", Outcome::ok, ""},
      {"MODE=overwrites_b,THREADS=256", Outcome::wrong_result, "overwrote input b (first changed element 17",
       0.0, 1e-6},
      {"MODE=staged,THREADS=256", Outcome::ok, ""},
      {"MODE=workspace_past_end,THREADS=256", Outcome::wrong_result,
       "input set 1: wrote 4 bytes past the end of ws (first changed byte at +0)", 0.0, 1e-6},
      {"MODE=staged,THREADS=128", Outcome::ok, ""},
      {"MODE=nondeterministic,THREADS=256", Outcome::wrong_result,
       "nondeterministic: input set 1, run 2 differs from run 1: max abs error", 6e-5, 1e-5},
      {"MODE=correct,THREADS=128", Outcome::ok, ""},
      {"MODE=last_bit_jitter,THREADS=256", Outcome::ok, ""},
      {"MODE=correct,THREADS=256", Outcome::ok, ""},
  };
  for (const Step& step : steps) {
    Built built = build(space, config(space, step.config), shape, info.device.arch());
    ASSERT_TRUE(built.candidate) << step.config << ":\n" << built.log;
    EvaluationResult result = worker.evaluate(*built.candidate);
    std::printf("%-36s %s\n", step.config.c_str(), describe(result).c_str());
    EXPECT_EQ(result.outcome, step.expected) << step.config << ": " << describe(result);
    EXPECT_NE(result.reason.find(step.reason_contains), std::string::npos)
        << step.config << ": " << result.reason;
    if (step.expected == Outcome::ok) {
      ASSERT_TRUE(result.timing && result.validation) << step.config;
      EXPECT_TRUE(result.validation->passed);
      EXPECT_EQ(result.validation->input_sets, 2);
      EXPECT_LT(result.validation->relative_l2, 1e-6);  // float32 rounding only
      EXPECT_GT(result.timing->count, 0);
      EXPECT_GE(result.timing->median_us, info.floor.min_us);
    }
    if (step.expected == Outcome::wrong_result) {
      // The error figures are kept with the failure.
      ASSERT_TRUE(result.validation) << step.config;
      EXPECT_FALSE(result.validation->passed) << step.config;
      EXPECT_NEAR(result.validation->max_abs, step.max_abs, step.max_abs_within) << step.config;
      EXPECT_LT(result.validation->relative_l2, 1e-5) << step.config;  // never the L2 bound
      EXPECT_EQ(result.validation->nonfinite, 0u) << step.config;
      EXPECT_FALSE(result.timing) << step.config;
    }
  }
  // out_of_bounds, trap and hang each cost one worker.
  EXPECT_EQ(worker.replacements(), 3);
}

TEST(GpuEvaluator, TimingSanity) {
  MLATUNE_REQUIRE_GPU();
  SearchSpace space = SearchSpace::load(faults_space());
  // 16 Mi elements: 192 MiB streamed per pass, over three times the L2.
  const std::string shape_text = "N=16777216";
  Shape shape = space.parse_shape(shape_text);
  Worker worker(worker_options());
  WorkloadRequest request{faults_space(), shape_text, 99, {}};
  request.timing.budget_ms = 300;
  WorkloadInfo info = worker.set_workload(request);
  std::printf("empty kernel (cold): median %.3f us, min %.3f, p90 %.3f, %d launches, %s\n",
              info.floor.median_us, info.floor.min_us, info.floor.p90_us, info.floor.count,
              info.floor.method.c_str());
  EXPECT_GE(info.floor.median_us, 2.0);
  EXPECT_LE(info.floor.median_us, 6.0);

  Built single = build(space, config(space, "MODE=correct,THREADS=256"), shape, info.device.arch());
  Built twice = build(space, config(space, "MODE=double_work,THREADS=256"), shape, info.device.arch());
  ASSERT_TRUE(single.candidate && twice.candidate);
  EvaluationResult first = worker.evaluate(*single.candidate);
  EvaluationResult doubled = worker.evaluate(*twice.candidate);
  EvaluationResult second = worker.evaluate(*single.candidate);
  std::printf("correct, 1st:  %s\ndouble_work:   %s\ncorrect, 2nd:  %s\n", describe(first).c_str(),
              describe(doubled).c_str(), describe(second).c_str());
  ASSERT_EQ(first.outcome, Outcome::ok);
  ASSERT_EQ(second.outcome, Outcome::ok);
  ASSERT_EQ(doubled.outcome, Outcome::ok);
  double repeat = second.timing->median_us / first.timing->median_us;
  double ratio = doubled.timing->median_us / first.timing->median_us;
  std::printf("same config twice: ratio %.4f; double work: ratio %.3f\n", repeat, ratio);
  EXPECT_NEAR(repeat, 1.0, 0.05);
  EXPECT_GE(ratio, 1.7);
  EXPECT_LE(ratio, 2.3);

  auto again = worker.retime({*single.candidate, *twice.candidate}, 10);
  ASSERT_EQ(again.size(), 2u);
  ASSERT_TRUE(again[0] && again[1]);
  std::printf("interleaved retime: correct %.2f us, double_work %.2f us (%s)\n", again[0]->median_us,
              again[1]->median_us, again[0]->method.c_str());
  EXPECT_NEAR(again[0]->median_us / first.timing->median_us, 1.0, 0.05);
}

TEST(GpuEvaluator, HopelessCandidateIsCutAfterValidationWithARealTime) {
  MLATUNE_REQUIRE_GPU();
  SearchSpace space = SearchSpace::load(faults_space());
  const std::string shape_text = "N=16777216";
  Shape shape = space.parse_shape(shape_text);
  Worker worker(worker_options());
  WorkloadRequest request{faults_space(), shape_text, 99, {}};
  WorkloadInfo info = worker.set_workload(request);
  Built single = build(space, config(space, "MODE=correct,THREADS=256"), shape, info.device.arch());
  Built twice = build(space, config(space, "MODE=double_work,THREADS=256"), shape, info.device.arch());
  ASSERT_TRUE(single.candidate && twice.candidate);

  EvaluationResult best = worker.evaluate(*single.candidate);
  ASSERT_EQ(best.outcome, Outcome::ok) << describe(best);
  // Twice the work is about 2x the best: past a 1.5x cutoff, inside a 3x one.
  const Cutoff tight{best.timing->median_us, 1.5};
  EvaluationResult cut = worker.evaluate(*twice.candidate, tight);
  EvaluationResult kept = worker.evaluate(*twice.candidate, Cutoff{best.timing->median_us, 3.0});
  EvaluationResult near_best = worker.evaluate(*single.candidate, tight);
  std::printf("best:      %s\ncut:       %s\n           %s\nkept (3x): %s\nnear best: %s\n",
              describe(best).c_str(), describe(cut).c_str(), cut.timing ? cut.timing->method.c_str() : "-",
              describe(kept).c_str(), describe(near_best).c_str());

  ASSERT_EQ(cut.outcome, Outcome::ok) << describe(cut);
  ASSERT_TRUE(cut.validation && cut.timing);
  EXPECT_TRUE(cut.validation->passed);
  // Timed after its first validation launch and cut: validated on that one.
  EXPECT_EQ(cut.validation->input_sets, 1);
  EXPECT_NE(cut.timing->method.find("not in full: cut"), std::string::npos) << cut.timing->method;
  EXPECT_TRUE(cut.timing->cut);
  EXPECT_FALSE(cut.timing->stable);
  EXPECT_EQ(cut.timing->count, TimingOptions{}.cut_min_samples);
  EXPECT_NE(cut.timing->method.find("cut after 5 launches"), std::string::npos) << cut.timing->method;
  // Fewer launches, but the same kernel's time all the same.
  ASSERT_EQ(kept.outcome, Outcome::ok) << describe(kept);
  EXPECT_FALSE(kept.timing->cut);
  EXPECT_GT(kept.timing->count, TimingOptions{}.cut_min_samples);
  EXPECT_NEAR(cut.timing->median_us / kept.timing->median_us, 1.0, 0.05);
  ASSERT_EQ(near_best.outcome, Outcome::ok) << describe(near_best);
  EXPECT_FALSE(near_best.timing->cut);
  // Not cut: validated in full after the timing.
  ASSERT_GE(best.validation->input_sets, 2);  // no cutoff: in full
  EXPECT_EQ(kept.validation->input_sets, best.validation->input_sets);
  EXPECT_EQ(near_best.validation->input_sets, best.validation->input_sets);
  EXPECT_EQ(kept.timing->method.find("not in full"), std::string::npos) << kept.timing->method;
}

// What the early timing gives up, and what it keeps: with a cutoff every
// candidate would pass (a hundredth of the real best), a kernel that is
// wrong, or writes past its output, on its first launch is still refused
// and never timed; one that is right on its first launch but races is cut
// before its second launch could show it (a slow config that will never be
// chosen).  With validate_first the race is found, as without a cutoff.
TEST(GpuEvaluator, EarlyTimingRefusesWhatTheFirstLaunchShowsAndValidateFirstTheRest) {
  MLATUNE_REQUIRE_GPU();
  SearchSpace space = SearchSpace::load(faults_space());
  const std::string shape_text = "N=1048576";
  Shape shape = space.parse_shape(shape_text);
  Worker early(worker_options());
  WorkloadInfo info = early.set_workload(WorkloadRequest{faults_space(), shape_text, 7, {}});
  auto built = [&](const char* text) {
    Built b = build(space, config(space, text), shape, info.device.arch());
    EXPECT_TRUE(b.candidate) << text;
    return b;
  };
  Built correct = built("MODE=correct,THREADS=256");
  Built wrong = built("MODE=off_by_1e3,THREADS=256");
  Built past = built("MODE=past_end,THREADS=256");
  Built races = built("MODE=nondeterministic,THREADS=256");
  ASSERT_TRUE(correct.candidate && wrong.candidate && past.candidate && races.candidate);

  EvaluationResult best = early.evaluate(*correct.candidate);
  ASSERT_EQ(best.outcome, Outcome::ok) << describe(best);
  ASSERT_GE(best.validation->input_sets, 2);
  const Cutoff everything{best.timing->median_us / 100.0, 1.5};

  EvaluationResult r_correct = early.evaluate(*correct.candidate, everything);
  EvaluationResult r_wrong = early.evaluate(*wrong.candidate, everything);
  EvaluationResult r_past = early.evaluate(*past.candidate, everything);
  EvaluationResult r_races = early.evaluate(*races.candidate, everything);
  std::printf("early: correct %s\n       off_by_1e3 %s\n       past_end %s\n       nondeterministic %s\n",
              describe(r_correct).c_str(), describe(r_wrong).c_str(), describe(r_past).c_str(),
              describe(r_races).c_str());
  ASSERT_EQ(r_correct.outcome, Outcome::ok) << describe(r_correct);
  EXPECT_TRUE(r_correct.timing->cut);
  EXPECT_EQ(r_correct.validation->input_sets, 1);
  // A first launch of microseconds is never judged alone (first_launch_floor_us).
  EXPECT_EQ(r_correct.timing->count, TimingOptions{}.cut_min_samples) << r_correct.timing->method;
  EXPECT_EQ(r_wrong.outcome, Outcome::wrong_result) << describe(r_wrong);
  EXPECT_FALSE(r_wrong.timing);
  EXPECT_EQ(r_past.outcome, Outcome::wrong_result) << describe(r_past);
  EXPECT_FALSE(r_past.timing);
  EXPECT_EQ(r_races.outcome, Outcome::ok) << describe(r_races);
  EXPECT_TRUE(r_races.timing && r_races.timing->cut);

  TimingOptions full;
  full.validate_first = true;
  Worker careful(worker_options());
  careful.set_workload(WorkloadRequest{faults_space(), shape_text, 7, full});
  EvaluationResult f_correct = careful.evaluate(*correct.candidate, everything);
  EvaluationResult f_races = careful.evaluate(*races.candidate, everything);
  std::printf("validate_first: correct %s\n                nondeterministic %s\n", describe(f_correct).c_str(),
              describe(f_races).c_str());
  ASSERT_EQ(f_correct.outcome, Outcome::ok) << describe(f_correct);
  EXPECT_TRUE(f_correct.timing->cut);
  EXPECT_EQ(f_correct.validation->input_sets, best.validation->input_sets);
  EXPECT_EQ(f_races.outcome, Outcome::wrong_result) << describe(f_races);
  EXPECT_NE(f_races.reason.find("nondeterministic"), std::string::npos) << f_races.reason;
}

// A kernel of more than a millisecond whose first validation launch is far
// past the cutoff is cut on that launch, with no timed launch; one whose
// first launch is not that far is timed as before, and a factor of 0 turns
// the judgment off.
TEST(GpuEvaluator, FirstLaunchFarPastTheCutoffIsCutOnIt) {
  MLATUNE_REQUIRE_GPU();
  SearchSpace space = SearchSpace::load(faults_space());
  // 1 GiB a buffer: double_work streams 6 GiB, well over a millisecond.
  const std::string shape_text = "N=268435456";
  Shape shape = space.parse_shape(shape_text);
  Worker worker(worker_options());
  WorkloadInfo info = worker.set_workload(WorkloadRequest{faults_space(), shape_text, 11, {}});
  Built slow = build(space, config(space, "MODE=double_work,THREADS=256"), shape, info.device.arch());
  ASSERT_TRUE(slow.candidate);
  EvaluationResult full = worker.evaluate(*slow.candidate);
  ASSERT_EQ(full.outcome, Outcome::ok) << describe(full);
  const double us = full.timing->median_us;
  ASSERT_GE(us, 1.1 * first_launch_floor_us) << "the test needs a kernel of more than a millisecond";

  // Limit = 1.5% of the kernel's time: its first launch is far past 2x that.
  const Cutoff far{us / 100.0, 1.5};
  EvaluationResult cut = worker.evaluate(*slow.candidate, far);
  // Limit = 1.2x its time: not past it, so timed in full and kept.
  EvaluationResult kept = worker.evaluate(*slow.candidate, Cutoff{us / 2.5, 3.0});
  TimingOptions off;
  off.first_launch_cut = 0;
  Worker without(worker_options());
  without.set_workload(WorkloadRequest{faults_space(), shape_text, 11, off});
  EvaluationResult timed_cut = without.evaluate(*slow.candidate, far);
  std::printf("no cutoff:        %s\nfirst launch cut: %s\n                  %s\nkept:             %s\n"
              "factor 0:         %s\n                  %s\n",
              describe(full).c_str(), describe(cut).c_str(), cut.timing ? cut.timing->method.c_str() : "-",
              describe(kept).c_str(), describe(timed_cut).c_str(),
              timed_cut.timing ? timed_cut.timing->method.c_str() : "-");

  ASSERT_EQ(cut.outcome, Outcome::ok) << describe(cut);
  ASSERT_TRUE(cut.timing && cut.validation);
  EXPECT_TRUE(cut.timing->cut);
  EXPECT_EQ(cut.timing->count, 1);
  EXPECT_EQ(cut.validation->input_sets, 1);
  EXPECT_NE(cut.timing->method.find("first validation launch"), std::string::npos) << cut.timing->method;
  // Its one launch is the kernel's time, give or take a first launch's costs.
  EXPECT_NEAR(cut.timing->median_us / us, 1.0, 0.25);

  ASSERT_EQ(kept.outcome, Outcome::ok) << describe(kept);
  EXPECT_FALSE(kept.timing->cut);
  EXPECT_GT(kept.timing->count, 1);
  EXPECT_EQ(kept.validation->input_sets, full.validation->input_sets);

  ASSERT_EQ(timed_cut.outcome, Outcome::ok) << describe(timed_cut);
  EXPECT_TRUE(timed_cut.timing->cut);
  EXPECT_GT(timed_cut.timing->count, 1);
  EXPECT_EQ(timed_cut.timing->method.find("first validation launch"), std::string::npos);
}

TEST(GpuEvaluator, ShapeThatDoesNotFitSaysSo) {
  MLATUNE_REQUIRE_GPU();
  Worker worker(worker_options());
  // 3e10 elements: three buffers of 120 GB each.
  WorkloadRequest request{faults_space(), "N=30000000000", 1, {}};
  try {
    worker.set_workload(request);
    FAIL() << "expected an InputError";
  } catch (const InputError& error) {
    std::printf("%s\n", error.what());
    EXPECT_NE(std::string(error.what()).find("does not fit"), std::string::npos) << error.what();
  }
  EXPECT_EQ(worker.replacements(), 0);
}

TEST(GpuEvaluator, SameSeedSameErrorsOtherSeedOtherErrors) {
  MLATUNE_REQUIRE_GPU();
  SearchSpace space = SearchSpace::load(faults_space());
  Shape shape = space.parse_shape("N=65536");
  Worker worker(worker_options());
  auto errors_with_seed = [&](std::uint64_t seed) {
    WorkloadRequest request{faults_space(), "N=65536", seed, {}};
    request.timing.budget_ms = 20;
    WorkloadInfo info = worker.set_workload(request);
    EXPECT_EQ(info.seed, seed);
    Built built = build(space, config(space, "MODE=off_by_1e3,THREADS=256"), shape, info.device.arch());
    EvaluationResult result = worker.evaluate(*built.candidate);
    EXPECT_EQ(result.outcome, Outcome::wrong_result);
    return result.validation.value_or(ValidationStats{}).relative_l2;
  };
  double first = errors_with_seed(11), again = errors_with_seed(11), other = errors_with_seed(12);
  std::printf("relative L2 with seed 11: %.17g, again: %.17g, seed 12: %.17g\n", first, again, other);
  // Same inputs and a fixed-order reduction: bit for bit the same figure.
  EXPECT_EQ(first, again);
  EXPECT_NE(first, other);
}

TEST(GpuEvaluator, CacheModes) {
  MLATUNE_REQUIRE_GPU();
  SearchSpace space = SearchSpace::load(faults_space());
  // 1 Mi elements: 12 MiB per pass, well inside the L2.
  const std::string shape_text = "N=1048576";
  Shape shape = space.parse_shape(shape_text);
  for (CacheMode mode : {CacheMode::cold, CacheMode::rotate, CacheMode::hot}) {
    Worker worker(worker_options());
    WorkloadRequest request{faults_space(), shape_text, 5, {}};
    request.timing.cache = mode;
    request.timing.budget_ms = 100;
    WorkloadInfo info = worker.set_workload(request);
    Built built = build(space, config(space, "MODE=correct,THREADS=256"), shape, info.device.arch());
    EvaluationResult result = worker.evaluate(*built.candidate);
    ASSERT_EQ(result.outcome, Outcome::ok) << describe(result);
    std::printf("%-6s floor %.2f us, kernel %s; %d input sets; %s\n",
                std::string(to_string(mode)).c_str(), info.floor.median_us, describe(result).c_str(),
                info.input_sets, result.timing->method.c_str());
    EXPECT_EQ(result.timing->cache, mode);
    if (mode == CacheMode::rotate) {
      // One pass over the sets writes at least twice the L2.
      EXPECT_GE(static_cast<std::int64_t>(info.input_sets) * 2 * 1048576 * 4, 2 * info.device.l2_bytes);
    } else {
      EXPECT_EQ(info.input_sets, 2);
    }
  }
}

/// Evaluates configs of the default space at one shape and prints the
/// outcome counts and the fastest five (re-timed, interleaved).
void sweep_default_space(const std::string& shape_text, std::optional<std::size_t> sample) {
  std::filesystem::path file =
      std::filesystem::path(MLATUNE_SOURCE_DIR) / "search_spaces" / "fused_mla_attention.yaml";
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "the default space " << file << " is absent";
  SearchSpace space = SearchSpace::load(file);
  Shape shape = space.parse_shape(shape_text);
  std::vector<Config> configs;
  if (sample) {
    std::mt19937_64 rng(2026);
    std::set<Config> seen;
    std::uint64_t valid = space.count(shape);
    while (seen.size() < std::min<std::uint64_t>(*sample, valid)) {
      auto c = space.sample(shape, rng);
      if (!c) break;
      if (seen.insert(*c).second) configs.push_back(*c);
    }
  } else {
    space.for_each_valid(shape, [&](const Config& c) {
      configs.push_back(c);
      return true;
    });
  }
  ASSERT_FALSE(configs.empty());

  Worker worker(worker_options());
  WorkloadRequest request{file, shape_text, 7, {}};
  request.timing.budget_ms = 100;
  WorkloadInfo info = worker.set_workload(request);
  std::printf("%s at %s on %s: %zu configs, reference %.1f us, floor %.2f us, seed %llu\n",
              space.kernel_name().c_str(), shape_text.c_str(), info.device.name.c_str(),
              configs.size(), info.reference_us, info.floor.median_us,
              static_cast<unsigned long long>(info.seed));
  std::vector<Built> built = build_all(space, configs, shape, info.device.arch());

  std::map<Outcome, int> counts;
  std::vector<std::pair<double, std::size_t>> fastest;
  for (std::size_t i = 0; i < configs.size(); ++i) {
    if (!built[i].candidate) {
      if (counts[Outcome::compile_error]++ == 0)
        std::printf("  first compile error, %s:\n%s\n", space.config_string(configs[i]).c_str(),
                    built[i].log.substr(0, 600).c_str());
      continue;
    }
    EvaluationResult result = worker.evaluate(*built[i].candidate);
    ++counts[result.outcome];
    if (result.outcome == Outcome::ok)
      fastest.emplace_back(result.timing->median_us, i);
    else
      std::printf("  %s: %s\n", built[i].candidate->label.c_str(), describe(result).c_str());
    EXPECT_TRUE(result.outcome == Outcome::ok || !result.reason.empty());
  }
  std::printf("outcomes:");
  for (const auto& [outcome, count] : counts) std::printf(" %s=%d", std::string(to_string(outcome)).c_str(), count);
  std::printf(" (workers replaced: %d)\n", worker.replacements());
  ASSERT_FALSE(fastest.empty()) << "no config of the default space ran correctly";

  std::sort(fastest.begin(), fastest.end());
  fastest.resize(std::min<std::size_t>(fastest.size(), 5));
  std::vector<Candidate> top;
  for (const auto& [time, index] : fastest) top.push_back(*built[index].candidate);
  auto again = worker.retime(top, 10);
  std::printf("fastest five (sweep median -> interleaved re-time median, min, p90):\n");
  for (std::size_t k = 0; k < top.size(); ++k) {
    ASSERT_TRUE(again[k]) << top[k].label;
    std::printf("  %8.2f us -> %8.2f us (min %.2f, p90 %.2f)  %s\n", fastest[k].first,
                again[k]->median_us, again[k]->min_us, again[k]->p90_us, top[k].label.c_str());
    EXPECT_GE(again[k]->median_us, info.floor.min_us);
  }
}

TEST(GpuEvaluator, DefaultSpaceAllConfigsAtS0) {
  MLATUNE_REQUIRE_GPU();
  sweep_default_space("B=2,T=32,H=4,D=16,R=24", std::nullopt);
}

TEST(GpuEvaluator, DefaultSpaceRandom100AtS2) {
  MLATUNE_REQUIRE_GPU();
  sweep_default_space("B=4,T=1024,H=16,D=64,R=128", 100);
}

}  // namespace
}  // namespace mlatune
