// mlatune tune: compile (and, with a GPU, later time) every valid config of a
// search space for one or more shapes.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "tuner/compile_pool.h"
#include "tuner/compiler.h"
#include "tuner/device.h"
#include "tuner/error.h"
#include "tuner/space.h"

namespace mlatune::cli {
namespace {

struct TuneOptions {
  std::string space_file;
  std::vector<std::string> shapes;
  bool compile_only = false;
  std::string arch;
  bool json = false;
  unsigned jobs = 0;
};

/// One config's compilation, as the report shows it.
struct Row {
  std::string config;
  std::shared_future<CompileResult> result;
};

struct ShapeWork {
  Shape shape;
  std::string shape_text;
  std::vector<Row> rows;
};

struct Totals {
  std::uint64_t configs = 0;
  std::uint64_t compiled = 0;
  std::uint64_t failed = 0;
  std::uint64_t spilling = 0;
  double compile_seconds = 0;  // sum over configs (CPU time of the compilations)
};

std::string first_error_line(const std::string& log) {
  std::size_t at = log.find("error");
  std::size_t start = at == std::string::npos ? 0 : log.rfind('\n', at);
  start = (start == std::string::npos || at == std::string::npos) ? 0 : start + 1;
  std::size_t end = log.find('\n', start);
  std::string line = log.substr(start, end == std::string::npos ? std::string::npos : end - start);
  return line.empty() ? std::string("(empty log)") : line;
}

std::string status_of(const CompileResult& result) {
  if (!result.ok()) return "FAILED: " + first_error_line(result.log());
  return result.binary().usage.spills() ? "spills" : "ok";
}

nlohmann::json row_json(const Row& row, const CompileResult& result) {
  nlohmann::json j;
  j["config"] = row.config;
  j["status"] = result.ok() ? (result.binary().usage.spills() ? "spills" : "ok") : "failed";
  j["compile_ms"] = result.compile_seconds() * 1e3;
  j["key"] = result.key().hash;
  j["options"] = result.options();
  if (result.ok()) {
    const ResourceUsage& u = result.binary().usage;
    j["registers"] = u.registers;
    j["spill_store_bytes"] = u.spill_store_bytes;
    j["spill_load_bytes"] = u.spill_load_bytes;
    j["stack_frame_bytes"] = u.stack_frame_bytes;
    j["shared_bytes"] = u.shared_bytes;
    j["barriers"] = u.barriers;
    j["cubin_bytes"] = result.binary().cubin.size();
  } else {
    j["error"] = result.failure().message;
  }
  return j;
}

void print_table(const ShapeWork& work, Totals& totals, const std::string& kernel) {
  std::size_t width = 6;
  for (const Row& row : work.rows) width = std::max(width, row.config.size());
  fmt::print("\n{} at {}: {} valid configs\n", kernel, work.shape_text, work.rows.size());
  fmt::print("{:<{}}  {:>4}  {:>8}  {:>8}  {:>6}  {:>6}  {:>8}  {}\n", "config", width, "regs",
             "spill st", "spill ld", "stack", "smem", "compile", "status");
  fmt::print("{:<{}}  {:>4}  {:>8}  {:>8}  {:>6}  {:>6}  {:>8}\n", "", width, "", "bytes",
             "bytes", "bytes", "bytes", "ms");
  const CompileFailure* first_failure = nullptr;
  for (const Row& row : work.rows) {
    const CompileResult& result = row.result.get();
    ++totals.configs;
    totals.compile_seconds += result.compile_seconds();
    if (result.ok()) {
      const ResourceUsage& u = result.binary().usage;
      ++totals.compiled;
      if (u.spills()) ++totals.spilling;
      fmt::print("{:<{}}  {:>4}  {:>8}  {:>8}  {:>6}  {:>6}  {:>8.0f}  {}\n", row.config, width,
                 u.registers, u.spill_store_bytes, u.spill_load_bytes, u.stack_frame_bytes,
                 u.shared_bytes, result.compile_seconds() * 1e3, status_of(result));
    } else {
      ++totals.failed;
      if (!first_failure) first_failure = &result.failure();
      fmt::print("{:<{}}  {:>4}  {:>8}  {:>8}  {:>6}  {:>6}  {:>8.0f}  {}\n", row.config, width,
                 "-", "-", "-", "-", "-", result.compile_seconds() * 1e3, status_of(result));
    }
  }
  if (first_failure)
    fmt::print(stderr, "\nfirst compile failure at {}:\n{}\n", work.shape_text,
               first_failure->message);
}

void run_tune(const TuneOptions& options) {
  SearchSpace space = SearchSpace::load(options.space_file);

  std::vector<ShapeWork> work;
  if (options.shapes.empty()) {
    for (const Shape& shape : space.default_shapes())
      work.push_back({shape, space.shape_string(shape), {}});
  } else {
    for (const std::string& text : options.shapes) {
      Shape shape = space.parse_shape(text);
      work.push_back({shape, space.shape_string(shape), {}});
    }
  }
  if (work.empty())
    throw InputError(SourceLocation{space.file_name()},
                     "the space has no default shapes; give one with --shape");

  std::string why_no_gpu;
  std::optional<DeviceInfo> device = detect_device(&why_no_gpu);
  std::string arch;
  std::vector<std::string> notes;
  if (!options.arch.empty()) {
    arch = parse_architecture(options.arch);
  } else if (device) {
    arch = parse_architecture(device->arch);
  } else {
    arch = "sm_90";
    if (options.compile_only)
      notes.push_back(fmt::format("no GPU found ({}); compiling for sm_90 (choose with --arch)",
                                  why_no_gpu));
  }
  if (!options.compile_only) {
    if (!device)
      notes.push_back(fmt::format(
          "no GPU present ({}): compiling every candidate for {} only; nothing is timed",
          why_no_gpu, arch));
    else
      notes.push_back(fmt::format(
          "GPU {} found, but timing candidates is not in this build of mlatune yet: compiling "
          "every candidate for {} only; nothing is timed",
          device->name, arch));
  }
  for (const std::string& note : notes) fmt::print(stderr, "mlatune: {}\n", note);

  Compiler compiler;
  CompilePool pool(compiler, options.jobs);
  const std::string source_name = space.kernel().path.filename().string();
  auto start = std::chrono::steady_clock::now();
  // Everything is queued first so that the pool never idles between shapes;
  // configs that compile to the same binary (shape variables that are not
  // compiled in) are compiled once.
  for (ShapeWork& shape_work : work) {
    space.for_each_valid(shape_work.shape, [&](const Config& config) {
      CompileRequest request;
      request.source = space.template_text();
      request.source_name = source_name;
      request.entry = space.kernel().entry;
      request.arch = arch;
      request.definitions = space.definitions(config, shape_work.shape);
      request.config = space.config_string(config);
      std::string config_text = request.config;
      shape_work.rows.push_back({std::move(config_text), pool.submit(std::move(request))});
      return true;
    });
  }

  Totals totals;
  nlohmann::json shapes_json = nlohmann::json::array();
  for (const ShapeWork& shape_work : work) {
    if (shape_work.rows.empty()) {
      std::string culprit = space.most_restrictive_constraint(shape_work.shape);
      std::string message =
          fmt::format("no valid config for {}{}", shape_work.shape_text,
                      culprit.empty() ? "" : fmt::format(" (most restrictive constraint: {})", culprit));
      if (options.json)
        shapes_json.push_back({{"shape", shape_work.shape_text}, {"configs", nlohmann::json::array()},
                               {"note", message}});
      else
        fmt::print("\n{}\n", message);
      continue;
    }
    if (options.json) {
      nlohmann::json configs = nlohmann::json::array();
      for (const Row& row : shape_work.rows) {
        const CompileResult& result = row.result.get();
        ++totals.configs;
        totals.compile_seconds += result.compile_seconds();
        if (!result.ok()) ++totals.failed;
        else {
          ++totals.compiled;
          if (result.binary().usage.spills()) ++totals.spilling;
        }
        configs.push_back(row_json(row, result));
      }
      shapes_json.push_back({{"shape", shape_work.shape_text}, {"configs", std::move(configs)}});
    } else {
      print_table(shape_work, totals, space.kernel_name());
    }
  }
  double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  CompilePoolStats stats = pool.stats();
  double rate = wall > 0 ? static_cast<double>(totals.configs) / wall : 0.0;

  if (options.json) {
    nlohmann::json out;
    out["space"] = space.file_name();
    out["kernel"] = space.kernel_name();
    out["arch"] = arch;
    out["nvrtc"] = compiler.version();
    out["device"] = device ? nlohmann::json{{"name", device->name}, {"arch", device->arch},
                                            {"sm_count", device->sm_count},
                                            {"memory_bytes", device->memory_bytes},
                                            {"l2_bytes", device->l2_bytes},
                                            {"driver_version", device->driver_version}}
                           : nlohmann::json(nullptr);
    if (!device) out["no_device_reason"] = why_no_gpu;
    out["notes"] = notes;
    out["timed"] = false;
    out["shapes"] = std::move(shapes_json);
    out["totals"] = {{"configs", totals.configs},
                     {"compiled", totals.compiled},
                     {"failed", totals.failed},
                     {"spilling", totals.spilling},
                     {"nvrtc_runs", stats.compiled},
                     {"reused", stats.memory_hits},
                     {"threads", pool.threads()},
                     {"compile_seconds", totals.compile_seconds},
                     {"wall_seconds", wall},
                     {"configs_per_second", rate}};
    fmt::print("{}\n", out.dump(2));
  } else {
    fmt::print(
        "\ntotal: {} configs for {} ({} NVRTC runs, {} reused), {} compiled, {} failed, {} "
        "spilling\n"
        "time: {:.2f} s wall on {} threads ({:.2f} s of compilation); {:.1f} configs/s\n",
        totals.configs, arch, stats.compiled, stats.memory_hits, totals.compiled, totals.failed,
        totals.spilling, wall, pool.threads(), totals.compile_seconds, rate);
  }
  if (totals.configs > 0 && totals.compiled == 0)
    throw InputError(SourceLocation{space.kernel().path.string()},
                     "no config compiled; the first failure is shown above");
}

}  // namespace

void add_tune_commands(CLI::App& app) {
  auto options = std::make_shared<TuneOptions>();
  CLI::App* tune = app.add_subcommand(
      "tune", "Compile (and, with a GPU, time) every valid config of a space for given shapes");
  tune->add_option("space", options->space_file, "search-space YAML file")->required();
  tune->add_option("--shape", options->shapes,
                   "a shape, e.g. B=2,T=32,H=4,D=16,R=24 (repeatable; default: the space's "
                   "default shapes)");
  tune->add_flag("--compile-only", options->compile_only,
                 "compile every valid config and report resources; time nothing");
  tune->add_option("--arch", options->arch,
                   "GPU architecture to compile for, e.g. sm_90 (default: the GPU's, else sm_90)");
  tune->add_flag("--json", options->json, "print the report as JSON");
  tune->add_option("--jobs,-j", options->jobs, "compile threads (default: one per core)")
      ->check(CLI::NonNegativeNumber);
  tune->callback([options] { run_tune(*options); });
}

}  // namespace mlatune::cli
