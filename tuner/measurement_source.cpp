#include "tuner/measurement_source.h"

#include "core/launch_plan.h"

#include <chrono>
#include <deque>
#include <future>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>

#include "core/compiler.h"
#include "tuner/binary_cache.h"
#include "tuner/compile_pool.h"
#include "tuner/evaluator.h"
#include "tuner/replay.h"
#include "tuner/worker/client.h"

namespace mlatune {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

CompileSummary summarize(const CompileResult& result) {
  CompileSummary s;
  s.key = result.key().hash;
  s.options = result.options();
  s.seconds = result.compile_seconds();
  if (result.ok()) s.cubin_bytes = result.binary().cubin.size();
  else s.log = result.log();
  return s;
}

/// Candidates compiled on a pool, in the order they were proposed, with
/// binaries cached in the database (a later sweep, or the dispatcher, loads
/// them instead of compiling again).
class CompileStage {
 public:
  CompileStage(const SearchSpace& space, const CompileSettings& settings)
      : space_(space),
        arch_(settings.arch),
        binary_cache_(settings.database, space.kernel_name(), space.template_hash()),
        pool_(compiler_, settings.jobs, binary_cache_.hooks()) {}

  unsigned threads() const { return pool_.threads(); }

  void submit(const Config& config, const Shape& shape) {
    queue_.push_back({config, pool_.submit(compile_request(space_, config, shape, arch_))});
  }

  /// The compilation of the oldest submitted candidate, `config`: waits for
  /// it (compile_wait_s) and counts its NVRTC time once per binary (nvrtc_s).
  std::shared_future<CompileResult> take(const Config& config, ShapeReport& report) {
    if (queue_.empty() || queue_.front().config != config)
      throw std::logic_error("CompileStage: measured out of the order prepared");
    std::shared_future<CompileResult> compiled = std::move(queue_.front().result);
    queue_.pop_front();
    auto wait_start = Clock::now();
    const CompileResult& result = compiled.get();
    report.compile_wait_s += seconds_since(wait_start);
    count_binary(result, report);
    return compiled;
  }

  // Configs that compile to the same binary (or a shape that reuses one)
  // share one compilation: its NVRTC time counts once, at the first shape
  // that used it; a later shape counts it as shared.  (The pool keys its
  // results by BinaryKey, a hash of the definitions, so equal keys at two
  // shapes are one compilation.)
  void count_binary(const CompileResult& result, ShapeReport& report) {
    const std::string& key = result.key().hash;
    auto [first, inserted] = first_shape_.emplace(key, report.shape);
    if (inserted) {
      report.nvrtc_s += result.compile_seconds();
      return;
    }
    if (result.ok() && first->second != report.shape && counted_shared_.insert({key, report.shape}).second)
      ++report.shared_binaries;
  }

  void add_totals(SweepReport& report) const {
    CompilePoolStats stats = pool_.stats();
    report.nvrtc_runs = stats.compiled;
    report.binaries_reused = stats.memory_hits + stats.external_hits;
  }

 private:
  struct Queued {
    Config config;
    std::shared_future<CompileResult> result;
  };
  const SearchSpace& space_;
  std::string arch_;
  Compiler compiler_;
  StoreBinaryCache binary_cache_;
  CompilePool pool_;
  std::deque<Queued> queue_;
  std::map<std::string, std::string> first_shape_;              // binary key -> the shape that first used it
  std::set<std::pair<std::string, std::string>> counted_shared_;  // (key, later shape) already counted
};

class GpuSource final : public MeasurementSource {
 public:
  GpuSource(const SearchSpace& space, const std::filesystem::path& space_file,
            const CompileSettings& compile, const TimingOptions& timing, Worker& worker)
      : space_(space),
        space_file_(std::filesystem::absolute(space_file)),
        timing_(timing),
        worker_(worker),
        compile_(space, compile) {}

  unsigned compile_threads() const override { return compile_.threads(); }
  // Enough candidates compiling that the GPU never waits for the compiler
  // when it could be busy.
  std::size_t lookahead() const override { return std::max<std::size_t>(4, 2 * compile_.threads()); }
  std::optional<std::string> origin() const override { return std::nullopt; }

  void prepare(const Config& config, const Shape& shape) override { compile_.submit(config, shape); }

  void begin_shape(const Shape& shape, std::mt19937_64& rng, ShapeReport& report) override {
    runnable_.clear();
    WorkloadRequest request;
    request.space_file = space_file_;
    request.shape = space_.shape_string(shape);
    request.seed = rng();
    request.timing = timing_;
    auto setup_start = Clock::now();
    report.workload = worker_.set_workload(request);
    report.setup_s = seconds_since(setup_start);
  }

  CandidateReport measure(const Config& config, const Shape& shape, const Cutoff& cutoff,
                          ShapeReport& report) override {
    std::shared_future<CompileResult> future = compile_.take(config, report);
    const CompileResult& compiled = future.get();
    CandidateReport c;
    c.config = space_.config_string(config);
    c.compile = summarize(compiled);
    LaunchPlan plan = plan_launch(space_, config, shape);
    if (!compiled.ok()) {
      c.outcome = Outcome::compile_error;
      c.reason = compiled.failure().message;
      return c;
    }
    c.usage = compiled.binary().usage;
    if (!plan.ok()) {
      c.outcome = Outcome::launch_error;
      c.reason = plan.refusal;
      return c;
    }
    Candidate candidate = make_candidate(plan, c.config, compiled.binary().cubin);
    auto gpu_start = Clock::now();
    EvaluationResult result = worker_.evaluate(candidate, cutoff);
    report.gpu_s += seconds_since(gpu_start);
    c.outcome = result.outcome;
    c.reason = result.reason;
    c.timing = result.timing;
    c.validation = result.validation;
    if (c.outcome == Outcome::ok) runnable_.emplace(c.config, std::move(candidate));
    return c;
  }

  std::vector<std::optional<TimingStats>> retime(const std::vector<std::string>& configs, int rounds,
                                                 ShapeReport& report) override {
    std::vector<Candidate> again;
    for (const std::string& config : configs) again.push_back(runnable_.at(config));
    auto gpu_start = Clock::now();
    std::vector<std::optional<TimingStats>> retimed = worker_.retime(again, rounds);
    report.gpu_s += seconds_since(gpu_start);
    return retimed;
  }

  void add_totals(SweepReport& report) const override {
    compile_.add_totals(report);
    report.worker_replacements = worker_.replacements();
  }

 private:
  const SearchSpace& space_;
  std::filesystem::path space_file_;
  TimingOptions timing_;
  Worker& worker_;
  CompileStage compile_;
  std::map<std::string, Candidate> runnable_;  // the ok candidates of this shape, to re-time
};

class ReplaySource final : public MeasurementSource {
 public:
  ReplaySource(const ReplayData& data, std::string name) : data_(data), name_(std::move(name)) {}

  unsigned compile_threads() const override { return 0; }
  std::size_t lookahead() const override { return 1; }
  std::optional<std::string> origin() const override { return name_; }
  void prepare(const Config&, const Shape&) override {}
  void begin_shape(const Shape&, std::mt19937_64&, ShapeReport&) override {}

  CandidateReport measure(const Config& config, const Shape& shape, const Cutoff&, ShapeReport&) override {
    CandidateReport c;  // the sweep fills in the config text
    c.outcome = data_.outcome(shape, config);
    if (auto time = data_.time(shape, config)) {
      TimingStats t;
      t.median_us = t.min_us = t.p90_us = *time;
      t.count = 1;
      t.method = "replayed from " + name_;
      c.timing = t;
    } else {
      c.reason = "replayed from " + name_;
    }
    return c;
  }

  // A recorded time cannot be taken again.
  std::vector<std::optional<TimingStats>> retime(const std::vector<std::string>& configs, int,
                                                 ShapeReport&) override {
    return std::vector<std::optional<TimingStats>>(configs.size());
  }

  void add_totals(SweepReport&) const override {}

 private:
  const ReplayData& data_;
  std::string name_;
};

class CompileOnlySource final : public MeasurementSource {
 public:
  CompileOnlySource(const SearchSpace& space, const CompileSettings& compile)
      : space_(space), compile_(space, compile) {}

  unsigned compile_threads() const override { return compile_.threads(); }
  // Nothing waits on a GPU: queue every candidate so the pool never idles.
  std::size_t lookahead() const override { return std::numeric_limits<std::size_t>::max(); }
  std::optional<std::string> origin() const override { return std::nullopt; }
  void prepare(const Config& config, const Shape& shape) override { compile_.submit(config, shape); }
  void begin_shape(const Shape&, std::mt19937_64&, ShapeReport&) override {}

  CandidateReport measure(const Config& config, const Shape&, const Cutoff&, ShapeReport& report) override {
    std::shared_future<CompileResult> future = compile_.take(config, report);
    const CompileResult& compiled = future.get();
    CandidateReport c;
    c.config = space_.config_string(config);
    c.compile = summarize(compiled);
    if (compiled.ok()) {
      c.usage = compiled.binary().usage;
    } else {
      c.outcome = Outcome::compile_error;
      c.reason = compiled.failure().message;
    }
    return c;
  }

  std::vector<std::optional<TimingStats>> retime(const std::vector<std::string>& configs, int,
                                                 ShapeReport&) override {
    return std::vector<std::optional<TimingStats>>(configs.size());
  }

  void add_totals(SweepReport& report) const override { compile_.add_totals(report); }

 private:
  const SearchSpace& space_;
  CompileStage compile_;
};

}  // namespace

std::unique_ptr<MeasurementSource> gpu_measurements(const SearchSpace& space,
                                                    const std::filesystem::path& space_file,
                                                    const CompileSettings& compile,
                                                    const TimingOptions& timing, Worker& worker) {
  return std::make_unique<GpuSource>(space, space_file, compile, timing, worker);
}

std::unique_ptr<MeasurementSource> replayed_measurements(const ReplayData& data, std::string name) {
  return std::make_unique<ReplaySource>(data, std::move(name));
}

std::unique_ptr<MeasurementSource> compiled_only(const SearchSpace& space, const CompileSettings& compile) {
  return std::make_unique<CompileOnlySource>(space, compile);
}

}  // namespace mlatune
