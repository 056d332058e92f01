#include "tuner/measurement_source.h"

#include "core/launch_plan.h"

#include <algorithm>
#include <chrono>
#include <deque>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <stdexcept>

#include "core/compiler.h"
#include "core/error.h"
#include "tuner/binary_cache.h"
#include "tuner/compile_pool.h"
#include "tuner/evaluator.h"
#include "tuner/replay.h"
#include "tuner/worker/client.h"
#include "tuner/worker/pool.h"

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
        pool_(compiler_, settings.jobs, binary_cache_.hooks(), settings.compile_in) {}

  unsigned threads() const { return pool_.threads(); }
  bool in_processes() const { return pool_.where() == CompileIn::processes; }

  std::shared_future<CompileResult> submit(const Config& config, const Shape& shape) {
    queue_.push_back({config, pool_.submit(compile_request(space_, config, shape, arch_))});
    return queue_.back().result;
  }

  /// The compilation of the oldest submitted candidate, `config`, as it is.
  std::shared_future<CompileResult> pop(const Config& config) {
    if (queue_.empty() || queue_.front().config != config)
      throw std::logic_error("CompileStage: measured out of the order prepared");
    std::shared_future<CompileResult> compiled = std::move(queue_.front().result);
    queue_.pop_front();
    return compiled;
  }

  /// The same, waited for (compile_wait_s), its NVRTC time counted once per
  /// binary (nvrtc_s).
  std::shared_future<CompileResult> take(const Config& config, ShapeReport& report) {
    std::shared_future<CompileResult> compiled = pop(config);
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
    const Compiler::PartCounts parts = compiler_.prologue_parts();
    report.prologue_parts_compiled = parts.compiled;
    report.prologue_parts_reused = parts.reused;
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

/// One candidate on its way through a worker lane: what the sweep's thread
/// prepared (before the job is queued), and what the lane found (read by the
/// sweep's thread once `done` is ready).
struct Evaluation {
  CandidateReport report;  // the config text from the start
  LaunchPlan plan;
  std::shared_future<CompileResult> compiled;
  std::future<void> done;
  std::optional<Candidate> candidate;  // set when it went to the GPU
  std::size_t lane = 0;
  double compile_wait_s = 0;
  double gpu_s = 0;
};

class GpuSource final : public MeasurementSource {
 public:
  GpuSource(const SearchSpace& space, const std::filesystem::path& space_file, const CompileSettings& compile,
            const TimingOptions& timing, std::unique_ptr<WorkerPool> workers)
      : space_(space),
        space_file_(std::filesystem::absolute(space_file)),
        timing_(timing),
        compile_(space, compile),
        loads_(workers->size()),
        workers_(std::move(workers)) {
    for (std::size_t i = 0; i < loads_.size(); ++i) loads_[i].label = workers_->label(i);
  }

  unsigned compile_threads() const override { return compile_.threads(); }
  bool compiles_in_processes() const override { return compile_.in_processes(); }
  // Enough candidates compiling that no GPU waits for the compiler when it
  // could be busy.  It does not depend on the number of GPUs up to
  // max(2, threads), so that an adaptive strategy proposes the same
  // sequence on one GPU as on several.
  std::size_t lookahead() const override {
    return std::max<std::size_t>({4, 2 * compile_.threads(), 2 * workers_->size()});
  }
  std::optional<std::string> origin() const override { return std::nullopt; }

  // The next shape's candidates compile while this shape's last are timed;
  // their worker jobs wait in a batch of their own until begin_shape opens it.
  bool prepares_across_shapes() const override { return true; }

  void begin_preparing(const Shape&) override { unopened_.push_back(++batch_); }

  void prepare(const Config& config, const Shape& shape) override {
    if (batch_ == 0)
      throw EnvironmentError("GpuSource: a candidate was prepared before begin_preparing");
    auto e = std::make_shared<Evaluation>();
    e->report.config = space_.config_string(config);
    e->plan = plan_launch(space_, config, shape);
    e->compiled = compile_.submit(config, shape);
    e->done = workers_->submit(batch_, [this, e](Worker& worker, std::size_t lane) { evaluate(*e, worker, lane); });
    queued_.push_back(std::move(e));
  }

  // Every worker sets up the same inputs (one seed), so that any of them
  // may evaluate any candidate of the shape.
  void begin_shape(const Shape& shape, const Cutoff& start, std::mt19937_64& rng, ShapeReport& report) override {
    runnable_.clear();
    {
      std::lock_guard lock(best_mutex_);
      best_us_ = start.best_us;
      cutoff_factor_ = start.factor;
    }
    WorkloadRequest request{space_file_, space_.shape_string(shape), rng(), timing_};
    std::vector<WorkloadInfo> infos(workers_->size());
    std::vector<double> setup_s(workers_->size());
    workers_->on_each([&](Worker& worker, std::size_t lane) {
      auto start = Clock::now();
      infos[lane] = worker.set_workload(request);
      setup_s[lane] = seconds_since(start);
    });
    report.workload = infos.front();
    for (double s : setup_s) report.setup_s += s;
    // The oldest shape prepared is this one (the sweep begins shapes in the
    // order it prepared them).
    if (unopened_.empty())
      throw EnvironmentError("GpuSource: begin_shape for a shape with no candidates prepared");
    workers_->open(unopened_.front());
    unopened_.pop_front();
  }

  CandidateReport measure(const Config& config, const Shape&, ShapeReport& report) override {
    std::shared_future<CompileResult> compiled = compile_.pop(config);
    std::shared_ptr<Evaluation> e = std::move(queued_.front());
    queued_.pop_front();
    e->done.get();  // rethrows what broke the lane's worker
    compile_.count_binary(compiled.get(), report);
    report.gpu_s += e->gpu_s;
    report.compile_wait_s += e->compile_wait_s;
    WorkerLoad& load = loads_[e->lane];
    ++load.evaluated;
    load.busy_s += e->gpu_s;
    if (e->report.outcome == Outcome::ok && e->candidate)
      runnable_.emplace(e->report.config, std::move(*e->candidate));
    return std::move(e->report);
  }

  // On the first worker alone: re-timed candidates are compared on one GPU.
  std::vector<std::optional<TimingStats>> retime(const std::vector<std::string>& configs, int rounds,
                                                 ShapeReport& report) override {
    std::vector<Candidate> again;
    for (const std::string& config : configs) again.push_back(runnable_.at(config));
    std::vector<std::optional<TimingStats>> retimed;
    double busy_s = 0;
    workers_->on_lane(0, [&](Worker& worker, std::size_t) {
      auto start = Clock::now();
      retimed = worker.retime(again, rounds);
      busy_s = seconds_since(start);
    });
    report.gpu_s += busy_s;
    loads_[0].busy_s += busy_s;
    return retimed;
  }

  void add_totals(SweepReport& report) const override {
    compile_.add_totals(report);
    report.workers = loads_;
    workers_->on_each([&](Worker& worker, std::size_t lane) { report.workers[lane].replacements = worker.replacements(); });
    report.worker_replacements = 0;
    for (const WorkerLoad& load : report.workers) report.worker_replacements += load.replacements;
  }

 private:
  // On a lane's thread: it writes only `e` and, under the mutex, the best.
  void evaluate(Evaluation& e, Worker& worker, std::size_t lane) {
    e.lane = lane;
    auto wait_start = Clock::now();
    const CompileResult& compiled = e.compiled.get();
    e.compile_wait_s = seconds_since(wait_start);
    CandidateReport& c = e.report;
    c.compile = summarize(compiled);
    if (!compiled.ok()) {
      c.outcome = Outcome::compile_error;
      c.reason = compiled.failure().message;
      return;
    }
    c.usage = compiled.binary().usage;
    if (!e.plan.ok()) {
      c.outcome = Outcome::launch_error;
      c.reason = e.plan.refusal;
      return;
    }
    e.candidate = make_candidate(e.plan, c.config, compiled.binary().cubin);
    auto gpu_start = Clock::now();
    EvaluationResult result = worker.evaluate(*e.candidate, cutoff_now());
    e.gpu_s = seconds_since(gpu_start);
    c.outcome = result.outcome;
    c.reason = result.reason;
    c.timing = result.timing;
    c.validation = result.validation;
    if (c.outcome == Outcome::ok && c.timing) note_time(c.timing->median_us);
  }

  // The best at this shape: of an earlier run's results timed with this
  // cache method (begin_shape), and of this sweep's results in so far.
  Cutoff cutoff_now() {
    std::lock_guard lock(best_mutex_);
    return Cutoff{best_us_, cutoff_factor_};
  }

  void note_time(double median_us) {
    std::lock_guard lock(best_mutex_);
    if (best_us_ <= 0 || median_us < best_us_) best_us_ = median_us;
  }

  const SearchSpace& space_;
  std::filesystem::path space_file_;
  TimingOptions timing_;
  CompileStage compile_;
  std::mutex best_mutex_;
  double best_us_ = 0;  // 0: none yet
  double cutoff_factor_ = 0;
  std::uint64_t batch_ = 0;              // the last batch begun (begin_preparing)
  std::deque<std::uint64_t> unopened_;   // batches begun, not yet opened, oldest first
  std::deque<std::shared_ptr<Evaluation>> queued_;
  std::map<std::string, Candidate> runnable_;  // the ok candidates of this shape, to re-time
  std::vector<WorkerLoad> loads_;
  // Last, so that it goes first: the lanes stop before what they use does.
  std::unique_ptr<WorkerPool> workers_;
};

class ReplaySource final : public MeasurementSource {
 public:
  ReplaySource(const ReplayData& data, std::string name) : data_(data), name_(std::move(name)) {}

  unsigned compile_threads() const override { return 0; }
  std::size_t lookahead() const override { return 1; }
  std::optional<std::string> origin() const override { return name_; }
  void prepare(const Config&, const Shape&) override {}
  void begin_shape(const Shape&, const Cutoff&, std::mt19937_64&, ShapeReport&) override {}

  CandidateReport measure(const Config& config, const Shape& shape, ShapeReport&) override {
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
  bool compiles_in_processes() const override { return compile_.in_processes(); }
  // Nothing waits on a GPU: queue every candidate so the pool never idles.
  std::size_t lookahead() const override { return std::numeric_limits<std::size_t>::max(); }
  std::optional<std::string> origin() const override { return std::nullopt; }
  void prepare(const Config& config, const Shape& shape) override { compile_.submit(config, shape); }
  void begin_shape(const Shape&, const Cutoff&, std::mt19937_64&, ShapeReport&) override {}

  CandidateReport measure(const Config& config, const Shape&, ShapeReport& report) override {
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
                                                    const CompileSettings& compile, const TimingOptions& timing,
                                                    std::unique_ptr<WorkerPool> workers) {
  if (!workers || workers->size() == 0) throw InternalError("gpu_measurements: no worker");
  return std::make_unique<GpuSource>(space, space_file, compile, timing, std::move(workers));
}

std::unique_ptr<MeasurementSource> gpu_measurements(const SearchSpace& space,
                                                    const std::filesystem::path& space_file,
                                                    const CompileSettings& compile,
                                                    const TimingOptions& timing, Worker& worker) {
  return gpu_measurements(space, space_file, compile, timing, std::make_unique<WorkerPool>(worker, "GPU 0"));
}

std::unique_ptr<MeasurementSource> replayed_measurements(const ReplayData& data, std::string name) {
  return std::make_unique<ReplaySource>(data, std::move(name));
}

std::unique_ptr<MeasurementSource> compiled_only(const SearchSpace& space, const CompileSettings& compile) {
  return std::make_unique<CompileOnlySource>(space, compile);
}

}  // namespace mlatune
