// mlatune run: dispatch a kernel family once at one shape, the way a library
// caller would (cache/dispatcher.h), on random inputs; print the config the
// dispatcher chose and why, and with --check compare with the float64
// reference.  At an untuned shape it then runs the dispatcher's race (four
// candidates unless --race or MLATUNE_RACE say otherwise) to its end, every
// raced config's output checked with --check, and says who won.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <random>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cache/dispatch_index.h"
#include "cache/dispatcher.h"
#include "cache/store.h"
#include "cli/commands.h"
#include "cli/option_checks.h"
#include "core/cuda.h"
#include "core/error.h"
#include "core/space.h"
#include "tuner/workload.h"

namespace mlatune::cli {
namespace {

struct RunOptions {
  std::string space_file;
  std::string shape;
  std::string db;
  bool check = false;
  bool json = false;
  bool blocking_compile = false;
  std::optional<std::uint64_t> seed;
  std::optional<std::size_t> race;  // configs raced at an untuned shape (unset: MLATUNE_RACE, else 4; 0 or 1: none)
};

nlohmann::json choice_json(const SearchSpace& space, const Choice& choice) {
  nlohmann::json j;
  j["reason"] = std::string(to_string(choice.reason));
  j["config"] = choice.ok() ? nlohmann::json(choice.config_text) : nlohmann::json(nullptr);
  j["explanation"] = choice.explanation;
  j["source_shape"] = choice.source_shape ? nlohmann::json(space.shape_string(*choice.source_shape))
                                          : nlohmann::json(nullptr);
  j["source_device"] = choice.source_device.empty() ? nlohmann::json(nullptr) : nlohmann::json(choice.source_device);
  if (choice.source_shape) {
    j["tuned_median_us"] = choice.tuned_median_us;
    j["tuned_config"] = choice.tuned_config_text;
    j["log_distance"] = choice.distance;
  }
  if (choice.reason == ChoiceReason::repaired) {
    j["repair"] = choice.repair;
    nlohmann::json changes = nlohmann::json::array();
    for (const ParameterChange& change : choice.changes) {
      const Parameter& p = space.parameters()[change.parameter];
      changes.push_back({{"parameter", p.name}, {"from", p.text[change.from]}, {"to", p.text[change.to]},
                         {"why", change.why}});
    }
    j["changes"] = changes;
  }
  if (choice.reason == ChoiceReason::fallback) j["fallback_index"] = choice.fallback_index;
  if (choice.ok()) j["binary_key"] = choice.binary.hash;
  return j;
}

void print_choice(const SearchSpace& space, const std::string& shape_text, const Choice& choice) {
  fmt::print("kernel:  {}\nshape:   {}\nchoice:  {}\nconfig:  {}\nwhy:     {}\n", space.kernel_name(),
             shape_text, to_string(choice.reason), choice.ok() ? choice.config_text : "-", choice.explanation);
  if (choice.reason == ChoiceReason::repaired)
    fmt::print("tuned:   {}\nrepair:  {}\n", choice.tuned_config_text, choice.repair);
}

/// Output checked against the reference: the figures as JSON, and the
/// failure (if any).
std::optional<std::string> check_output(Workload& workload, nlohmann::json& out) {
  ValidationStats validation = workload.compare(0);
  std::optional<std::string> failure = tolerance_failure(validation, workload.tolerance());
  out = {{"relative_l2", validation.relative_l2},
         {"max_abs", validation.max_abs},
         {"nonfinite", validation.nonfinite},
         {"elements", validation.elements},
         {"passed", !failure.has_value()},
         {"tolerance_relative_l2", workload.tolerance().relative_l2}};
  if (failure) out["failure"] = *failure;
  return failure;
}

std::string check_line(const nlohmann::json& check, std::uint64_t seed) {
  return fmt::format("{} (relative L2 {:.3g}, max abs {:.3g}, {} elements, seed {})",
                     check.contains("failure") ? "FAILED: " + check["failure"].get<std::string>() : "passed",
                     check["relative_l2"].get<double>(), check["max_abs"].get<double>(),
                     check["elements"].get<std::uint64_t>(), seed);
}

/// Launches at `shape` until its race settles (each output checked with
/// `check`), into report["race"]; the first failed check, if any.  Nothing
/// happens at a shape that does not race.
std::optional<std::string> run_race(Dispatcher& dispatcher, const Shape& shape, Workload& workload, bool check,
                                    nlohmann::json& report) {
  dispatcher.wait_compiles();  // the race's candidates are readied in the background
  std::optional<DispatchDescription> d = dispatcher.describe(shape);
  if (!d->race) return std::nullopt;
  constexpr int max_launches = 1000;  // each is synchronized, so a race needs runners * samples + 1
  std::optional<std::string> failure;
  nlohmann::json checks = nlohmann::json::array();
  int launches = 0;
  for (; !d->race->settled && launches < max_launches; ++launches) {
    if (check) workload.poison_outputs();
    dispatcher.launch(shape, workload.arguments(0), workload.stream().get());
    workload.stream().synchronize();
    if (check) {
      checks.emplace_back();
      std::optional<std::string> f = check_output(workload, checks.back());
      if (!failure) failure = f;
    }
    d = dispatcher.describe(shape);
  }
  nlohmann::json runners = nlohmann::json::array();
  for (const RaceReport::Runner& r : d->race->runners)
    runners.push_back({{"reason", std::string(to_string(r.choice.reason))},
                       {"config", r.choice.config_text},
                       {"times_us", r.times_us},
                       {"median_us", r.median_us}});
  report["race"] = {{"settled", d->race->settled}, {"launches", launches}, {"winner", d->race->leader},
                    {"runners", runners}, {"text", d->race->text()}};
  if (check) report["race"]["checks"] = checks;
  return failure;
}

void run(const RunOptions& options) {
  SearchSpace space = SearchSpace::load(options.space_file);
  const Shape shape = shape_option(space, "--shape", options.shape);
  const std::string shape_text = space.shape_string(shape);
  const std::filesystem::path database = database_path(options.db);
  std::error_code ec;
  const bool have_database = std::filesystem::exists(database, ec);
  nlohmann::json report;
  report["kernel"] = space.kernel_name();
  report["shape"] = shape_text;
  report["database"] = database.string();

  if (!have_database)
    throw InputError(fmt::format("no database at {} (give --db, set MLATUNE_DB or run `mlatune tune` first)",
                                 database.string()));

  GpuProbe probe = probe_gpu();
  if (!probe.usable) {
    // The choice needs no GPU: show it as a device-less process would see it
    // (every tuned entry is then another device's, used as guidance).
    DeviceInfo no_device;
    no_device.arch = "sm_90";
    Store store = Store::open(database, StoreMode::read_only);
    Choice choice =
        DispatchIndex::build(store, space, DispatchTarget{no_device, ToolchainInfo::current()}).choose(shape);
    report["choice"] = choice_json(space, choice);
    report["gpu"] = nullptr;
    if (options.json)
      fmt::print("{}\n", report.dump(2));
    else
      print_choice(space, shape_text, choice);
    throw EnvironmentError("no GPU: " + probe.reason + "; the choice above was not launched");
  }

  auto t0 = std::chrono::steady_clock::now();
  DispatcherOptions dispatcher_options;
  dispatcher_options.compile = options.blocking_compile ? CompileMode::blocking : CompileMode::background;
  if (options.race) {
    dispatcher_options.race.candidates = *options.race;
    dispatcher_options.race_from_environment = false;
  }
  std::unique_ptr<Dispatcher> dispatcher = Dispatcher::open(database, options.space_file, dispatcher_options);
  auto t1 = std::chrono::steady_clock::now();
  DispatchDescription description = dispatcher->describe(shape);
  report["choice"] = choice_json(space, description.choice);
  report["gpu"] = probe.device.name;

  WorkloadOptions workload_options;
  workload_options.seed = options.seed ? *options.seed : std::random_device{}();
  workload_options.cache = CacheMode::hot;
  workload_options.validation_sets = 1;
  Workload workload(dispatcher->space(), shape, workload_options);
  report["seed"] = workload.seed();
  if (options.check) workload.poison_outputs();

  auto t2 = std::chrono::steady_clock::now();
  dispatcher->launch(shape, workload.arguments(0), workload.stream().get());
  auto t3 = std::chrono::steady_clock::now();
  workload.stream().synchronize();
  auto t4 = std::chrono::steady_clock::now();
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
  DispatcherStats stats = dispatcher->stats();
  const DispatchDescription launched = dispatcher->describe(shape);  // a stand-in shows now
  report["open_ms"] = ms(t0, t1);
  report["first_launch_host_ms"] = ms(t2, t3);
  report["first_launch_complete_ms"] = ms(t2, t4);
  report["binary"] = launched.stand_in ? "stand-in (loaded or from the database); the choice compiles in the background"
                     : stats.blocking_compiles ? "compiled now, on this thread"
                                               : "loaded from the database";
  report["stand_in"] = launched.stand_in ? choice_json(space, *launched.stand_in) : nlohmann::json(nullptr);

  std::optional<std::string> failure;
  if (options.check) failure = check_output(workload, report["check"]);
  // With a stand-in: wait for the choice, launch it, and check it too.
  std::optional<DispatchDescription> switched;
  if (launched.stand_in) {
    auto w0 = std::chrono::steady_clock::now();
    dispatcher->wait_compiles();
    auto w1 = std::chrono::steady_clock::now();
    switched = dispatcher->describe(shape);
    report["background_compile_ms"] = ms(w0, w1);
    report["switched"] = !switched->stand_in.has_value();
    if (!switched->background_error.empty()) report["background_error"] = switched->background_error;
    if (options.check) workload.poison_outputs();
    dispatcher->launch(shape, workload.arguments(0), workload.stream().get());
    workload.stream().synchronize();
    if (options.check) {
      std::optional<std::string> after = check_output(workload, report["check_after_switch"]);
      if (!failure) failure = after;
    }
  }
  std::optional<std::string> race_failure = run_race(*dispatcher, shape, workload, options.check, report);
  if (!failure) failure = race_failure;
  dispatcher->wait_compiles();  // the miss is counted in the background
  stats = dispatcher->stats();
  report["binary_stored"] = stats.binaries_stored > 0;
  report["miss_recorded"] = stats.misses_recorded > 0;

  if (options.json) {
    fmt::print("{}\n", report.dump(2));
  } else {
    print_choice(space, shape_text, description.choice);
    fmt::print("device:  {}\nbinary:  {}{}\n", probe.device.name, report["binary"].get<std::string>(),
               stats.binaries_stored ? " (stored in the database)" : "");
    if (launched.stand_in)
      fmt::print("stand-in: {} {} ({})\n", to_string(launched.stand_in->reason), launched.stand_in->config_text,
                 launched.stand_in->explanation);
    fmt::print("timing:  open {:.1f} ms, first launch {:.3f} ms host, {:.3f} ms to completion\n", ms(t0, t1),
               ms(t2, t3), ms(t2, t4));
    if (description.choice.reason != ChoiceReason::hit)
      fmt::print("miss:    {}\n", stats.misses_recorded ? "recorded (mlatune tune --misses will tune this shape)"
                                                        : "not recorded (read-only database)");
    if (options.check) fmt::print("check:   {}\n", check_line(report["check"], workload.seed()));
    if (switched) {
      fmt::print("switch:  {} after {:.1f} ms of background compile{}\n",
                 switched->stand_in ? "kept the stand-in" : "switched to the choice",
                 report["background_compile_ms"].get<double>(),
                 switched->background_error.empty() ? "" : " (" + switched->background_error + ")");
      if (options.check)
        fmt::print("check:   {} (after the switch)\n", check_line(report["check_after_switch"], workload.seed()));
    }
    if (report.contains("race")) {
      fmt::print("race:    {} ({} launches)\n", report["race"]["text"].get<std::string>(),
                 report["race"]["launches"].get<int>());
      if (options.check)
        fmt::print("check:   {} of {} raced launches passed{}\n",
                   std::count_if(report["race"]["checks"].begin(), report["race"]["checks"].end(),
                                 [](const nlohmann::json& c) { return c["passed"].get<bool>(); }),
                   report["race"]["checks"].size(), race_failure ? ": " + *race_failure : "");
    }
  }
  if (failure) throw EnvironmentError("check failed at " + shape_text + ": " + *failure);
}

}  // namespace

void add_run_commands(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* run_command = app.add_subcommand(
      "run", "Dispatch a kernel once at a shape as the runtime library would; print the chosen config and why "
             "(with --race, at an untuned shape, then run its race to the end and say which config won)");
  run_command->add_option("space", options->space_file, "search-space YAML file")->required();
  run_command->add_option("--shape", options->shape, "the shape, e.g. B=2,T=32,H=4,D=16,R=24")->required();
  run_command->add_option("--db", options->db, "database (default: $MLATUNE_DB, else ./mlatune.db)");
  run_command->add_flag("--check", options->check, "validate the output against the float64 reference");
  run_command->add_flag("--json", options->json, "print the report as JSON");
  run_command->add_flag("--blocking-compile", options->blocking_compile,
                        "compile the chosen binary on this thread when absent, instead of running a ready stand-in "
                        "while it compiles in the background");
  run_command->add_option("--race", options->race,
                          "at an untuned shape, race this many of the selector's configs to the end and say "
                          "which won; 0 or 1: no race, whatever MLATUNE_RACE says (default: MLATUNE_RACE, else 4)")
      ->check(whole_number(0, 64));
  run_command->add_option("--seed", options->seed, "seed for the random inputs (default: fresh)")
      ->check(whole_number(0, UINT64_MAX));
  run_command->callback([options] { run(*options); });
}

}  // namespace mlatune::cli
