// The NVRTC compiler: turns a kernel template plus one config's definitions
// into a cubin for an explicit GPU architecture, with the ptxas resource
// report.  Needs no GPU.  A template that does not compile is a value (a
// CompileFailure carrying the NVRTC log), not an exception: one broken config
// must not stop a sweep.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "core/hash.h"
#include "core/resource_usage.h"

namespace mlatune {

class SearchSpace;
struct Config;
struct Shape;

/// Everything that determines one compilation.
struct CompileRequest {
  std::string source;       // the template text
  std::string source_name;  // shown in NVRTC messages, e.g. "fused_mla_attention.cu"
  std::string entry;        // the extern "C" __global__ function to report on
  std::string arch;         // "sm_90"
  /// Preprocessor definitions (NAME, value): the config's parameters and the
  /// compiled-in shape variables, as SearchSpace::definitions gives them.
  std::vector<std::pair<std::string, std::string>> definitions;
  /// Further NVRTC options (e.g. "--include-path=..."); part of the key.
  std::vector<std::string> extra_options;
  /// The config as text, for messages only (not part of the key).
  std::string config;
  /// Whether a binary without its ptxas resource report is a failure.  The
  /// tuner needs the report (registers, spills); a caller that only launches
  /// (the dispatcher, inside a user's process where NVRTC's compute cache may
  /// answer without running ptxas) does not.  Not part of the key.
  bool require_resource_report = true;
  /// Whether the binary keeps the PTX NVRTC generated (CompiledBinary::ptx;
  /// tuner/code_identity.h reads it).  Not part of the key: it changes
  /// nothing that is compiled.
  bool keep_ptx = false;
  /// Set where the space compiles the prologue apart for this config
  /// (SearchSpace::prologue_apart_config): the main part is this request
  /// with MLATUNE_PART_MAIN=1, the prologue part the template with these
  /// definitions (the config it is compiled as) and MLATUNE_PART_PROLOGUE=1,
  /// and the binary holds both cubins (core/binary_image.h).  Part of the key.
  struct ProloguePart {
    std::string entry;
    std::vector<std::pair<std::string, std::string>> definitions;
    bool operator==(const ProloguePart&) const = default;
  };
  std::optional<ProloguePart> prologue_part;
};

/// The two programs of a request whose prologue is compiled apart: the main
/// kernel's and the prologue's, each an ordinary request (no prologue_part).
CompileRequest main_part_request(const CompileRequest& request);
CompileRequest prologue_part_request(const CompileRequest& request);

/// The request that compiles `config` of `space`'s kernel at `shape` for
/// `arch`, or for the architecture the config needs (the space's `requires:`;
/// SearchSpace::target_architecture): the template text, its entry point, the config's and the compiled
/// shape variables' definitions, and the config as text for messages.
CompileRequest compile_request(const SearchSpace& space, const Config& config, const Shape& shape,
                               const std::string& arch);
/// compile_request with an empty source: what Compiler::key(after_source,
/// request) needs.
CompileRequest compile_request_without_source(const SearchSpace& space, const Config& config, const Shape& shape,
                                              const std::string& arch);

/// Content hash that names a compiled binary: template text, sorted options,
/// NVRTC version, architecture and entry.  Equal keys mean equal binaries.
struct BinaryKey {
  std::string hash;  // 32 hex digits
  bool operator==(const BinaryKey&) const = default;
  auto operator<=>(const BinaryKey&) const = default;
};

/// A successful compilation.
struct CompiledBinary {
  BinaryKey key;
  /// ELF bytes loadable with cuModuleLoadData, or, where the prologue was
  /// compiled apart, an image of both parts (core/binary_image.h); either
  /// way what LoadedKernel loads.
  std::string cubin;
  std::string ptx;    // the PTX the cubin was made from, where the request kept it (keep_ptx); else empty
  /// Compiled apart, with keep_ptx: the prologue part's PTX (ptx is then the
  /// main part's).  Else empty.
  std::string prologue_ptx;
  ResourceUsage usage;
  std::vector<std::string> options;  // exactly as passed to NVRTC
  std::string log;                   // the full NVRTC log (ptxas report, warnings)
  double compile_seconds = 0;        // wall time of nvrtcCompileProgram
  /// CPU time of the compiling thread: NVRTC's work, without the time the
  /// thread waited for a core (compile_seconds - cpu_seconds grows when more
  /// threads compile than there are cores).
  double cpu_seconds = 0;
  /// ptxas's own "Compile time" of every function in the report (PTX to
  /// SASS, without parsing the PTX; wall time); compile_seconds minus this
  /// is NVRTC's front end and NVVM optimizer.  0 where no report came.
  double ptxas_seconds = 0;
  std::string arch;
  std::string entry;
};

/// A compilation that failed because of the template or the options.
struct CompileFailure {
  BinaryKey key;
  std::string log;                   // the NVRTC log (the compiler's error text)
  std::vector<std::string> options;  // exactly as passed to NVRTC
  /// One readable message: source, config, architecture, options and log.
  std::string message;
  double compile_seconds = 0;
  double cpu_seconds = 0;  // as CompiledBinary::cpu_seconds
};

/// The outcome of one compilation: a binary or a failure.
class CompileResult {
 public:
  CompileResult(CompiledBinary binary) : value_(std::move(binary)) {}
  CompileResult(CompileFailure failure) : value_(std::move(failure)) {}

  bool ok() const { return std::holds_alternative<CompiledBinary>(value_); }
  explicit operator bool() const { return ok(); }
  const CompiledBinary& binary() const;    // throws InternalError (a std::logic_error) when !ok()
  const CompileFailure& failure() const;   // throws InternalError (a std::logic_error) when ok()
  const BinaryKey& key() const;
  const std::vector<std::string>& options() const;
  const std::string& log() const;
  double compile_seconds() const;
  double cpu_seconds() const;

 private:
  std::variant<CompiledBinary, CompileFailure> value_;
};

/// The sum of ptxas's "Compile time = <x> ms" lines in an NVRTC log (one per
/// function with --ptxas-options=-v), in seconds; 0 when there are none.
double ptxas_seconds(std::string_view log);

/// "13.0": the version of the NVRTC library this program runs with.
std::string nvrtc_version();

/// NVRTC honours the CUDA compute cache: a program it compiled before (in
/// any process of this user) comes back from ~/.nv/ComputeCache without
/// running ptxas, and so without the resource report every binary needs (seen
/// on the H200 machine: the second compile of the same kernels reported no
/// functions).  NVRTC reads CUDA_CACHE_DISABLE when it is loaded, before
/// main(), so this sets the variable and re-executes the program
/// (/proc/self/exe, same arguments) unless it is already "1".  Call it first
/// thing in main().  mlatune caches binaries itself, with their reports, in
/// the database.
void ensure_compute_cache_disabled(char** argv);

/// Architectures this NVRTC can compile for, as "sm_75", "sm_80", ...
std::vector<std::string> supported_architectures();

/// Checks an architecture given by the user ("sm_90", "sm_90a", "90") and
/// returns its canonical form ("sm_90", "sm_90a").  Throws InputError naming
/// the supported ones when NVRTC cannot compile for it.
std::string parse_architecture(std::string_view text);

/// Compiles requests with NVRTC.  Stateless apart from the NVRTC version read
/// at construction: compile() may be called from many threads at once.
class Compiler {
 public:
  Compiler();

  /// The options passed to NVRTC for `request`, in the order passed:
  /// --gpu-architecture=<arch>, --std=c++17, --ptxas-options=-v, -lineinfo
  /// when MLATUNE_LINEINFO=1 was set at construction (for profiling: the
  /// flagship's cubins are then about 3.6 times the size), -D<name>=<value>
  /// for each definition, then the extra options.
  std::vector<std::string> options(const CompileRequest& request) const;
  BinaryKey key(const CompileRequest& request) const;
  /// The same key with the source's share of the hash done already:
  /// `after_source` is source_hasher(the request's source), and
  /// request.source is not read (compile_request_without_source).  Keying
  /// many configs of one template (a dispatcher's ranking) so skips copying
  /// and hashing the template for each: 14 us a key with the flagship's
  /// 123 KB template here, most of it that.
  BinaryKey key(const ContentHasher& after_source, const CompileRequest& request) const;
  static ContentHasher source_hasher(std::string_view source);

  /// Compiles one request.  A template or option error gives a CompileFailure;
  /// a failing NVRTC call (out of memory, a broken install) throws
  /// EnvironmentError naming the call.  A request with a prologue part
  /// compiles its main part, and its prologue part unless this compiler (or
  /// a copy of it) compiled that part before: the last prologue_parts_kept
  /// prologue parts are kept in memory, so the configs of a sweep that
  /// share one compile it once per process.  A part that failed is not
  /// kept (the next request compiles it again).
  CompileResult compile(const CompileRequest& request) const;
  /// How one program (a request without a prologue part) is compiled: in
  /// this process, or by a compile process (tuner/compile_pool.h).
  using ProgramCompile = std::function<CompileResult(const CompileRequest&)>;
  /// compile(), with each NVRTC program compiled by `program`.  The parts
  /// are still kept here, so compile processes fed from one pool (whose
  /// Compiler this is) compile each prologue part once between them, where
  /// each would otherwise compile it once for itself.
  CompileResult compile(const CompileRequest& request, const ProgramCompile& program) const;

  /// Prologue parts compiled by this compiler and its copies (each once,
  /// however many requests shared it), and requests that found theirs kept.
  struct PartCounts {
    std::uint64_t compiled = 0, reused = 0;
  };
  PartCounts prologue_parts() const;
  static constexpr std::size_t prologue_parts_kept = 64;

  const std::string& version() const { return version_; }

 private:
  CompileResult compile_program(const CompileRequest& request) const;
  CompileResult compile_apart(const CompileRequest& request, const ProgramCompile& program) const;
  struct PartCache;
  std::string version_;
  bool lineinfo_ = false;  // MLATUNE_LINEINFO=1: -lineinfo (see options())
  std::shared_ptr<PartCache> parts_;
};

}  // namespace mlatune
