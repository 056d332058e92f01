#include "core/compiler.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <ctime>
#include <unistd.h>
#include <cstdlib>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <stdexcept>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nvrtc.h>

#include "core/binary_image.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/space.h"

namespace mlatune {
namespace {

// Every NVRTC call other than the compilation itself goes through here: a
// failure is the environment's (memory, a broken install), not the template's.
void check(nvrtcResult result, const char* call, std::string_view context) {
  if (result != NVRTC_SUCCESS)
    throw EnvironmentError(fmt::format("{} failed: {} ({}) while compiling {}", call,
                                       nvrtcGetErrorString(result), static_cast<int>(result),
                                       context));
}

/// Owns one nvrtcProgram.
class Program {
 public:
  Program(const std::string& source, const std::string& name) {
    check(nvrtcCreateProgram(&handle_, source.c_str(), name.c_str(), 0, nullptr, nullptr),
          "nvrtcCreateProgram", name);
  }
  Program(Program&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
  Program& operator=(Program&& other) noexcept {
    if (this != &other) {
      reset();
      handle_ = std::exchange(other.handle_, nullptr);
    }
    return *this;
  }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  ~Program() { reset(); }

  nvrtcProgram get() const { return handle_; }

 private:
  void reset() noexcept {
    // A failing destroy leaks one program; there is nothing better to do in
    // a destructor, which must not throw.
    if (handle_) (void)nvrtcDestroyProgram(&handle_);
    handle_ = nullptr;
  }
  nvrtcProgram handle_ = nullptr;
};

std::string program_log(nvrtcProgram program, std::string_view context) {
  std::size_t size = 0;
  check(nvrtcGetProgramLogSize(program, &size), "nvrtcGetProgramLogSize", context);
  std::string log(size, '\0');
  if (size > 0) check(nvrtcGetProgramLog(program, log.data()), "nvrtcGetProgramLog", context);
  while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  return log;
}

std::string program_cubin(nvrtcProgram program, std::string_view context) {
  std::size_t size = 0;
  check(nvrtcGetCUBINSize(program, &size), "nvrtcGetCUBINSize", context);
  std::string cubin(size, '\0');
  if (size > 0) check(nvrtcGetCUBIN(program, cubin.data()), "nvrtcGetCUBIN", context);
  return cubin;
}

std::string program_ptx(nvrtcProgram program, std::string_view context) {
  std::size_t size = 0;
  check(nvrtcGetPTXSize(program, &size), "nvrtcGetPTXSize", context);
  std::string ptx(size, '\0');
  if (size > 0) check(nvrtcGetPTX(program, ptx.data()), "nvrtcGetPTX", context);
  if (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();  // the size counts the terminator
  return ptx;
}

std::string describe(const CompileRequest& request) {
  return fmt::format("{} (entry {}, config {}, {})", request.source_name, request.entry,
                     request.config.empty() ? "<none>" : request.config, request.arch);
}

// CPU time of the calling thread.  nvrtcCompileProgram runs on the calling
// thread (no --split-compile), so the difference around it is NVRTC's work.
double thread_cpu_seconds() {
  timespec now{};
  if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now) != 0)
    throw EnvironmentError(fmt::format("clock_gettime(CLOCK_THREAD_CPUTIME_ID) failed: {}",
                                       std::strerror(errno)));
  return static_cast<double>(now.tv_sec) + 1e-9 * static_cast<double>(now.tv_nsec);
}

// Seconds per unit of a ptxas duration ("ms" is what ptxas prints); 0 for a
// unit this does not know, so that an unexpected one adds nothing.
double seconds_per(std::string_view unit) {
  if (unit == "ms") return 1e-3;
  if (unit == "us") return 1e-6;
  if (unit == "s") return 1.0;
  return 0.0;
}

int arch_number(std::string_view canonical) {
  // canonical is "sm_<digits>[a|f]"
  int value = 0;
  for (char c : canonical.substr(3))
    if (std::isdigit(static_cast<unsigned char>(c))) value = value * 10 + (c - '0');
  return value;
}

}  // namespace

const CompiledBinary& CompileResult::binary() const {
  if (auto* b = std::get_if<CompiledBinary>(&value_)) return *b;
  throw InternalError("CompileResult::binary() on a failed compilation: " +
                      std::get<CompileFailure>(value_).message);
}

const CompileFailure& CompileResult::failure() const {
  if (auto* f = std::get_if<CompileFailure>(&value_)) return *f;
  throw InternalError("CompileResult::failure() on a successful compilation");
}

const BinaryKey& CompileResult::key() const {
  return ok() ? binary().key : failure().key;
}
const std::vector<std::string>& CompileResult::options() const {
  return ok() ? binary().options : failure().options;
}
const std::string& CompileResult::log() const { return ok() ? binary().log : failure().log; }
double CompileResult::compile_seconds() const {
  return ok() ? binary().compile_seconds : failure().compile_seconds;
}
double CompileResult::cpu_seconds() const {
  return ok() ? binary().cpu_seconds : failure().cpu_seconds;
}

double ptxas_seconds(std::string_view log) {
  constexpr std::string_view marker = "Compile time = ";
  double total = 0;
  for (std::size_t at = log.find(marker); at != std::string_view::npos; at = log.find(marker, at)) {
    at += marker.size();
    double value = 0;
    auto [end, error] = std::from_chars(log.data() + at, log.data() + log.size(), value);
    if (error != std::errc()) continue;
    std::string_view rest = log.substr(static_cast<std::size_t>(end - log.data()));
    rest.remove_prefix(std::min(rest.find_first_not_of(' '), rest.size()));
    total += value * seconds_per(rest.substr(0, rest.find_first_of(" \r\n")));
  }
  return total;
}

std::string nvrtc_version() {
  int major = 0, minor = 0;
  check(nvrtcVersion(&major, &minor), "nvrtcVersion", "(version query)");
  return fmt::format("{}.{}", major, minor);
}

std::vector<std::string> supported_architectures() {
  int count = 0;
  check(nvrtcGetNumSupportedArchs(&count), "nvrtcGetNumSupportedArchs", "(architecture query)");
  std::vector<int> numbers(static_cast<std::size_t>(count));
  if (count > 0)
    check(nvrtcGetSupportedArchs(numbers.data()), "nvrtcGetSupportedArchs", "(architecture query)");
  std::vector<std::string> names;
  for (int n : numbers) names.push_back(fmt::format("sm_{}", n));
  return names;
}

std::string parse_architecture(std::string_view text) {
  std::string_view digits = text;
  if (digits.starts_with("sm_")) digits.remove_prefix(3);
  std::string suffix;
  if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) {
    suffix = digits.back();
    digits.remove_suffix(1);
  }
  bool well_formed = !digits.empty() && digits.size() <= 4 &&
                     std::all_of(digits.begin(), digits.end(),
                                 [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
  std::vector<std::string> supported = supported_architectures();
  if (!well_formed)
    throw InputError(fmt::format("'{}' is not a GPU architecture; expected sm_<number> such as {}",
                                 text, supported.empty() ? "sm_90" : supported.back()));
  std::string canonical = fmt::format("sm_{}{}", digits, suffix);
  int number = arch_number(canonical);
  bool known = std::any_of(supported.begin(), supported.end(),
                           [&](const std::string& s) { return arch_number(s) == number; });
  if (!known)
    throw InputError(fmt::format("NVRTC {} cannot compile for {}; it supports {}", nvrtc_version(),
                                 canonical, fmt::join(supported, ", ")));
  return canonical;
}

namespace {
bool compute_cache_disabled() {
  const char* value = std::getenv("CUDA_CACHE_DISABLE");
  return value && std::string_view(value) == "1";
}
}  // namespace

void ensure_compute_cache_disabled(char** argv) {
  if (compute_cache_disabled()) return;
  ::setenv("CUDA_CACHE_DISABLE", "1", 1);
  if (argv && argv[0]) ::execv("/proc/self/exe", argv);
  // exec failed: carry on; compile() says plainly if the cache answers.
}

CompileRequest compile_request(const SearchSpace& space, const Config& config, const Shape& shape,
                               const std::string& arch) {
  CompileRequest request = compile_request_without_source(space, config, shape, arch);
  request.source = space.template_text();
  return request;
}

CompileRequest compile_request_without_source(const SearchSpace& space, const Config& config, const Shape& shape,
                                              const std::string& arch) {
  CompileRequest request;
  request.source_name = space.kernel().path.filename().string();
  request.entry = space.kernel().entry;
  // A config that needs sm_90a (say) compiles for it: the key names it.
  request.arch = space.target_architecture(config, shape, arch);
  request.definitions = space.definitions(config, shape);
  request.config = space.config_string(config);
  if (const std::optional<Config> as = space.prologue_apart_config(config, shape))
    request.prologue_part = CompileRequest::ProloguePart{space.prologue()->kernel.entry, space.definitions(*as, shape)};
  return request;
}

CompileRequest main_part_request(const CompileRequest& request) {
  CompileRequest main = request;
  main.prologue_part.reset();
  main.definitions.emplace_back("MLATUNE_PART_MAIN", "1");
  return main;
}

CompileRequest prologue_part_request(const CompileRequest& request) {
  if (!request.prologue_part) throw InternalError("prologue_part_request: the request has no prologue part");
  CompileRequest part = request;
  part.prologue_part.reset();
  part.entry = request.prologue_part->entry;
  part.definitions = request.prologue_part->definitions;
  part.definitions.emplace_back("MLATUNE_PART_PROLOGUE", "1");
  part.config = "the prologue part of " + request.config;
  return part;
}

namespace {
bool lineinfo_requested() {
  const char* value = std::getenv("MLATUNE_LINEINFO");
  return value && std::string_view(value) == "1";
}
}  // namespace

/// Prologue parts compiled in this process, newest last; a part being
/// compiled is there already, so that a second request for it waits for it.
struct Compiler::PartCache {
  std::mutex mutex;
  std::map<std::string, std::shared_future<CompileResult>> parts;
  std::deque<std::string> order;
  PartCounts counts;
};

Compiler::Compiler()
    : version_(nvrtc_version()), lineinfo_(lineinfo_requested()), parts_(std::make_shared<PartCache>()) {}

Compiler::PartCounts Compiler::prologue_parts() const {
  std::lock_guard lock(parts_->mutex);
  return parts_->counts;
}

std::vector<std::string> Compiler::options(const CompileRequest& request) const {
  std::vector<std::string> options = {
      "--gpu-architecture=" + request.arch,
      "--std=c++17",
      // The resource report (registers, spills, shared memory) comes from here.
      "--ptxas-options=-v",
  };
  // Line tables (-lineinfo) let a profiler map time to template lines, but
  // NVRTC then also embeds the whole PTX text in the cubin
  // (.nv_debug_ptx_txt): 70% of a flagship cubin, which every store read and
  // module load at a first call pays for, and every stored binary keeps.  The
  // code is the same either way, so they are opt-in (MLATUNE_LINEINFO=1).
  // The option is part of the binary key: binaries built with it are others.
  if (lineinfo_) options.push_back("-lineinfo");
  for (const auto& [name, value] : request.definitions)
    options.push_back(fmt::format("-D{}={}", name, value));
  options.insert(options.end(), request.extra_options.begin(), request.extra_options.end());
  return options;
}

BinaryKey Compiler::key(const CompileRequest& request) const { return key(source_hasher(request.source), request); }

ContentHasher Compiler::source_hasher(std::string_view source) {
  ContentHasher hasher;
  hasher.add(source);
  return hasher;
}

BinaryKey Compiler::key(const ContentHasher& after_source, const CompileRequest& request) const {
  if (request.prologue_part) {
    // Both parts' keys: equal keys still mean equal binaries.
    const BinaryKey main = key(after_source, main_part_request(request));
    const BinaryKey prologue = key(after_source, prologue_part_request(request));
    return BinaryKey{content_hash({"prologue apart", main.hash, prologue.hash})};
  }
  // Sorted, so that the order in which definitions were listed does not
  // matter; each option is length-prefixed by content_hash's framing below.
  std::vector<std::string> sorted = options(request);
  std::sort(sorted.begin(), sorted.end());
  std::string joined;
  for (const std::string& option : sorted) {
    joined += fmt::format("{}:", option.size());
    joined += option;
  }
  // content_hash({source, joined, version, arch, entry}), the source added already.
  ContentHasher hasher = after_source;
  for (std::string_view part : {std::string_view(joined), std::string_view(version_), std::string_view(request.arch),
                                std::string_view(request.entry)})
    hasher.add(part);
  return BinaryKey{hasher.digest()};
}

CompileResult Compiler::compile(const CompileRequest& request) const {
  return compile(request, [this](const CompileRequest& program) { return compile_program(program); });
}

CompileResult Compiler::compile(const CompileRequest& request, const ProgramCompile& program) const {
  return request.prologue_part ? compile_apart(request, program) : program(request);
}

CompileResult Compiler::compile_apart(const CompileRequest& request, const ProgramCompile& program) const {
  const CompileRequest prologue_request = prologue_part_request(request);
  const BinaryKey prologue_key = key(prologue_request);
  std::shared_future<CompileResult> prologue;
  std::optional<std::promise<CompileResult>> mine;  // set when this call compiles the part
  {
    std::lock_guard lock(parts_->mutex);
    if (auto it = parts_->parts.find(prologue_key.hash); it != parts_->parts.end()) {
      prologue = it->second;
      ++parts_->counts.reused;
    } else {
      mine.emplace();
      prologue = mine->get_future().share();
      parts_->parts.emplace(prologue_key.hash, prologue);
      parts_->order.push_back(prologue_key.hash);
      while (parts_->order.size() > prologue_parts_kept) {
        parts_->parts.erase(parts_->order.front());
        parts_->order.pop_front();
      }
      ++parts_->counts.compiled;
    }
  }
  if (mine) {
    // A part that failed is not kept: the requests waiting for it get its
    // failure, a later one compiles it again.  A compile process that died
    // on it (a failure value from tuner/compile_pool.h's processes) or NVRTC
    // itself failing (an exception) may not happen twice.
    const auto forget = [&] {
      std::lock_guard lock(parts_->mutex);
      if (auto it = parts_->parts.find(prologue_key.hash); it != parts_->parts.end()) {
        parts_->parts.erase(it);
        parts_->order.erase(std::find(parts_->order.begin(), parts_->order.end(), prologue_key.hash));
      }
    };
    try {
      CompileResult compiled = program(prologue_request);
      if (!compiled.ok()) forget();
      mine->set_value(std::move(compiled));
    } catch (...) {
      forget();
      mine->set_exception(std::current_exception());
    }
  }
  CompileResult main = program(main_part_request(request));
  const CompileResult& part = prologue.get();
  const BinaryKey binary_key = key(request);
  // The time and the NVRTC CPU this request spent: a part compiled for an
  // earlier request cost it nothing.
  const double part_seconds = mine ? part.compile_seconds() : 0.0;
  const double part_cpu = mine ? part.cpu_seconds() : 0.0;
  if (!main.ok() || !part.ok()) {
    CompileFailure f = main.ok() ? part.failure() : main.failure();
    f.key = binary_key;
    f.compile_seconds = main.compile_seconds() + part_seconds;
    f.cpu_seconds = main.cpu_seconds() + part_cpu;
    if (main.ok()) f.message = "the prologue part, compiled apart: " + f.message;
    return CompileResult(std::move(f));
  }
  CompiledBinary binary = main.binary();
  const CompiledBinary& p = part.binary();
  binary.key = binary_key;
  binary.cubin = pack_images({main.binary().cubin, p.cubin});
  if (request.keep_ptx) binary.prologue_ptx = p.ptx;
  binary.log += fmt::format("\nprologue part ({}):\n{}", mine ? "compiled for this request" : "compiled before, kept",
                            p.log);
  binary.compile_seconds += part_seconds;
  binary.cpu_seconds += part_cpu;
  if (mine) binary.ptxas_seconds += p.ptxas_seconds;
  return CompileResult(std::move(binary));
}

CompileResult Compiler::compile_program(const CompileRequest& request) const {
  const std::string context = describe(request);
  const std::vector<std::string> opts = options(request);
  BinaryKey binary_key = key(request);
  std::vector<const char*> argv;
  argv.reserve(opts.size());
  for (const std::string& o : opts) argv.push_back(o.c_str());

  auto start = std::chrono::steady_clock::now();
  const double cpu_start = thread_cpu_seconds();
  Program program(request.source, request.source_name.empty() ? "kernel.cu" : request.source_name);
  nvrtcResult result =
      nvrtcCompileProgram(program.get(), static_cast<int>(argv.size()), argv.data());
  const double cpu_seconds = thread_cpu_seconds() - cpu_start;
  double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  auto failure = [&](std::string log, std::string why) {
    CompileFailure f;
    f.key = binary_key;
    f.log = std::move(log);
    f.options = opts;
    f.compile_seconds = seconds;
    f.cpu_seconds = cpu_seconds;
    f.message = fmt::format("compiling {} failed: {}\noptions: {}\n{}", context, why,
                            fmt::join(opts, " "), f.log);
    return CompileResult(std::move(f));
  };

  // A compilation error or an option NVRTC rejects comes from the request:
  // report it as a value.  Anything else is the environment's failure.
  if (result == NVRTC_ERROR_COMPILATION || result == NVRTC_ERROR_INVALID_OPTION)
    return failure(program_log(program.get(), context),
                   nvrtcGetErrorString(result));
  check(result, "nvrtcCompileProgram", context);

  std::string log = program_log(program.get(), context);
  std::optional<ResourceUsage> usage = find_resource_usage(log, request.entry);
  if (!usage && parse_ptxas_report(log).empty() && !compute_cache_disabled()) {
    if (request.require_resource_report)
      return failure(std::move(log),
                     "NVRTC returned a binary without a ptxas report: the CUDA compute cache answered "
                     "(start the program with CUDA_CACHE_DISABLE=1; mlatune's own programs do)");
    usage = ResourceUsage{};  // unknown: the cache answered; the code is the same
    log += "\n(no ptxas report: the CUDA compute cache answered; resource usage unknown)";
  }
  if (!usage) {
    std::vector<std::string> entries;
    for (const auto& [name, _] : parse_ptxas_report(log)) entries.push_back(name);
    return failure(std::move(log),
                   fmt::format("entry function '{}' not found in the compiled code (functions "
                               "compiled: {}); is it declared extern \"C\" __global__?",
                               request.entry,
                               entries.empty() ? "none" : fmt::format("{}", fmt::join(entries, ", "))));
  }

  CompiledBinary binary;
  binary.key = std::move(binary_key);
  binary.cubin = program_cubin(program.get(), context);
  if (request.keep_ptx) binary.ptx = program_ptx(program.get(), context);
  binary.usage = *usage;
  binary.options = opts;
  binary.log = std::move(log);
  binary.compile_seconds = seconds;
  binary.cpu_seconds = cpu_seconds;
  binary.ptxas_seconds = ptxas_seconds(binary.log);
  binary.arch = request.arch;
  binary.entry = request.entry;
  return CompileResult(std::move(binary));
}

}  // namespace mlatune
