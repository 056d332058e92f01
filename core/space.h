// A search space: everything mlatune knows about one kernel family, read from
// one YAML file (format: search_spaces/README.md).
//
// Parsing happens once, at the edge: after SearchSpace::load the core sees typed
// values (parameters with typed values, compiled expressions, argument
// descriptors), never raw YAML.  Every error names file:line:col.
//
// Enumeration is lazy: count(), for_each_valid() and sample() never materialize
// the cartesian product; constraints are checked as soon as the variables they
// use are bound.
#pragma once
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "core/architecture.h"
#include "core/error.h"

namespace mlatune {

/// Values of the shape variables, in the order the space declares them.
struct Shape {
  std::vector<std::int64_t> values;
  bool operator==(const Shape&) const = default;
  auto operator<=>(const Shape&) const = default;
};

/// One point of the space: for each parameter (in declaration order), the
/// index of the chosen value in that parameter's value list.
struct Config {
  std::vector<std::uint32_t> choice;
  bool operator==(const Config&) const = default;
  auto operator<=>(const Config&) const = default;
};

enum class ValueKind { integer, boolean, name };

/// A tunable parameter: a name and a non-empty list of distinct values.
struct Parameter {
  std::string name;
  ValueKind kind = ValueKind::integer;
  /// Numeric value of each choice as seen by expressions and as emitted to
  /// the compiler: the integer itself, 0/1 for booleans, the index for names.
  std::vector<std::int64_t> numeric;
  /// Text of each value as written in the YAML ("4", "true", "absorbed").
  std::vector<std::string> text;
  SourceLocation where;
};

enum class ElementType { float32, float64, int32, int64 };
std::size_t element_size(ElementType);
std::string_view element_type_name(ElementType);

/// An expression over parameters and shape variables, compiled once
/// (muParser).  Supports + - * / % ^, comparisons, && || !, ?:, and the
/// functions min max ceil floor sqrt abs bucket.  Booleans are 0/1.
class Expression {
 public:
  Expression();
  ~Expression();
  Expression(const Expression&);
  Expression& operator=(const Expression&);
  Expression(Expression&&) noexcept;
  Expression& operator=(Expression&&) noexcept;

  const std::string& text() const;
  const SourceLocation& where() const;
  /// Names of the shape variables and parameters the expression reads; a
  /// compiled value SHAPE_<name> counts as the names its own expression reads.
  const std::vector<std::string>& variables() const;

  class Impl;
 private:
  std::unique_ptr<Impl> impl_;
  friend class SearchSpace;
};

/// workspace: scratch a prologue fills and the main kernel reads; allocated
/// by the framework only for configs whose prologue runs (else a null
/// pointer), never validated, contents undefined on entry.
enum class ArgumentRole { input, output, scalar, workspace };
/// "input", "output", "scalar", "workspace".
std::string_view argument_role_name(ArgumentRole);

/// One kernel argument, in launch order.
struct Argument {
  std::string name;
  ElementType type = ElementType::float32;
  ArgumentRole role = ArgumentRole::input;
  std::vector<Expression> shape;   // buffers: extent of each dimension
  std::optional<Expression> value; // scalars: the value
  SourceLocation where;
};

/// Grid, block (x, y, z) and dynamic shared memory in bytes.
struct LaunchGeometry {
  std::int64_t grid[3] = {1, 1, 1};
  std::int64_t block[3] = {1, 1, 1};
  std::int64_t shared_bytes = 0;
  /// Empty when every grid and block value is a positive integer and the
  /// shared memory a non-negative integer; otherwise which value is not (that
  /// config cannot be launched at that shape: a value, not an exception).
  std::string invalid_reason;
  bool valid() const { return invalid_reason.empty(); }
};

/// A kernel's source file (resolved relative to the space file), entry point
/// and launch geometry expressions.
struct KernelSource {
  std::filesystem::path path;
  std::string entry;
  Expression grid[3];
  Expression block[3];
  Expression shared_bytes;
  SourceLocation where;
};

/// A second kernel of the same template (same cubin) launched before the
/// main one, on the same stream with the same arguments, for the configs
/// where `when` holds: e.g. one that expands data once into a workspace.
struct PrologueSource {
  KernelSource kernel;             // path: the main template; entry and geometry its own
  std::optional<Expression> when;  // unset: always
  /// `apart:`: for the configs where `when` holds, the prologue is compiled
  /// in a program of its own (the template compiled with
  /// MLATUNE_PART_PROLOGUE, the main kernel's with MLATUNE_PART_MAIN), as
  /// the config that `as` makes of the config: each listed parameter takes
  /// its expression's value, the others keep theirs.  Configs that `as` maps
  /// to one config share one prologue binary, so a sweep compiles it once
  /// (see SearchSpace::prologue_apart_config).
  struct Apart {
    std::optional<Expression> when;                    // unset: wherever the prologue runs
    std::vector<std::pair<std::size_t, Expression>> as;  // parameter index, its value
    SourceLocation where;
  };
  std::optional<Apart> apart;
};

/// One entry of the `requires:` section: the configs where `when` holds (at
/// a shape) need architecture `arch`; they compile for it and are invalid on
/// a device that lacks it (SearchSpace::for_device).
struct ArchitectureRequirement {
  Architecture arch;
  Expression when;
  SourceLocation where;  // the entry's key
};

struct Tolerance {
  double relative_l2 = 1e-5;
  std::optional<double> max_abs;  // unset: not checked
};

/// A fully evaluated argument for one shape.
struct BoundArgument {
  const Argument* argument = nullptr;
  std::vector<std::int64_t> extents;  // buffers
  std::int64_t element_count = 0;     // buffers: product of extents
  double scalar = 0.0;                // scalars
};

/// Outcome of checking a config against a shape: valid, or the first
/// constraint (text and location) that rejects it.  A value, not an exception.
struct Validity {
  bool valid = true;
  std::string failed_constraint;
  SourceLocation where;
  explicit operator bool() const { return valid; }
};

/// A count from raw_count() or count() as text: the number, or "at least
/// 18446744073709551615" where it saturated (the true count may be larger).
std::string count_text(std::uint64_t count);

/// Thread safety: a SearchSpace is immutable after load; every const member
/// function may be called from many threads at once.
class SearchSpace {
 public:
  /// Reads and checks a space file.  Throws InputError (with file:line:col)
  /// for anything malformed; EnvironmentError if the file cannot be read.
  static SearchSpace load(const std::filesystem::path& file);
  /// Same, from text; `file_name` is used in messages and `base_dir` to
  /// resolve the template paths.
  static SearchSpace parse(std::string_view text, const std::string& file_name,
                           const std::filesystem::path& base_dir);
  /// Checks `text` as a constraint of this space (syntax, names it reads).
  /// Throws InputError "'<text>': column N: <what is wrong>", without a file
  /// location: the text comes from a command line, not the file.
  void check_constraint(const std::string& text) const;
  /// This space with extra constraints (same parameters, so configs carry
  /// over): a subspace to search.  Its default shapes may have no valid
  /// config.  Throws InputError for a bad expression (as check_constraint).
  SearchSpace restrict(const std::vector<std::string>& constraints) const;

  SearchSpace(SearchSpace&&) noexcept;
  SearchSpace& operator=(SearchSpace&&) noexcept;
  SearchSpace(const SearchSpace&);  // deep copy (expressions recompiled)
  ~SearchSpace();

  // ---- what the file says ------------------------------------------------
  const std::string& kernel_name() const;
  const std::string& file_name() const;
  const std::string& text() const;  // the file's bytes, as read
  const KernelSource& kernel() const;
  const KernelSource& reference() const;
  const std::vector<std::string>& shape_variables() const;
  /// Names of the values compiled into the kernel as SHAPE_<name> (the
  /// list form of `shape.compiled`: shape variables; the map form: its keys),
  /// in file order.
  const std::vector<std::string>& compiled_shape_variables() const;
  const std::vector<Shape>& default_shapes() const;
  const std::vector<Argument>& arguments() const;
  const std::vector<Parameter>& parameters() const;
  const std::vector<Expression>& constraints() const;
  const Tolerance& tolerance() const;
  /// The `prologue:` section, if the file has one.
  const std::optional<PrologueSource>& prologue() const;
  /// The `requires:` section, in file order.
  const std::vector<ArchitectureRequirement>& requirements() const;
  /// The space's default config (the `default:` map).
  const Config& default_config() const;
  /// The `fallbacks:` list: configs the dispatcher tries, in order, at a
  /// shape where nothing tuned fits, before the default config.  Each names
  /// a value of every parameter; one may be invalid at some shapes (a value).
  const std::vector<Config>& fallbacks() const;

  // ---- versions: what a stored result depends on -----------------------------
  /// Text of the kernel / reference template, read at load time (from disk,
  /// else the copy embedded in the binary: see core/embedded.h).
  const std::string& template_text() const;
  const std::string& reference_text() const;
  /// content_hash of the kernel template text.
  std::string template_hash() const;
  /// Hash of everything in the file that determines results, in canonical
  /// form: parameters and values, constraints, launch and reference geometry,
  /// arguments, compiled shape variables, tolerance.  Comments, layout and the
  /// default shapes do not change it.
  std::string definition_hash() const;

  // ---- shapes and configs as text ----------------------------------------
  /// "B=2,T=32,H=4,D=16,R=24" (any order, all variables required, positive).
  /// Throws InputError naming the missing/unknown variable, without a file
  /// location (the text is not from the space file).
  Shape parse_shape(std::string_view text) const;
  /// Canonical form, in declaration order: "B=2,T=32,H=4,D=16,R=24".
  std::string shape_string(const Shape&) const;
  /// "ALGORITHM=absorbed,THREADS_PER_QUERY=4,..." (all parameters required).
  Config parse_config(std::string_view text) const;
  /// The same, except that a parameter the text does not name takes the
  /// default config's value: for a config written before the parameter was
  /// added to the space (carry-over, whose code identity then says whether
  /// that value gives the code that was measured).
  Config parse_config_or_default(std::string_view text) const;
  std::string config_string(const Config&) const;

  // ---- expression evaluators ---------------------------------------------
  /// Every check, geometry and enumeration call borrows an evaluator (all the
  /// space's expressions compiled: milliseconds for the fused MLA space) from
  /// a pool, building one when the pool is empty.  This builds evaluators
  /// until the pool holds `count`, so that later calls nesting up to `count`
  /// borrows (a dispatcher's first use of a shape does) build none.
  void prepare_evaluators(std::size_t count) const;
  /// Evaluators built so far by this object (not its copies).
  std::uint64_t evaluators_built() const;

  // ---- enumeration (lazy) --------------------------------------------------
  /// Product of the value counts (saturates at UINT64_MAX).
  std::uint64_t raw_count() const;
  /// Number of configs that satisfy every constraint for `shape` (saturates
  /// at UINT64_MAX).
  std::uint64_t count(const Shape& shape) const;
  /// Calls `visit` for each valid config in lexicographic order of choice
  /// indices; stops early when `visit` returns false.
  void for_each_valid(const Shape& shape, const std::function<bool(const Config&)>& visit) const;
  /// A valid config drawn uniformly at random among all valid configs;
  /// nullopt when there is none.
  std::optional<Config> sample(const Shape& shape, std::mt19937_64& rng) const;
  /// `n` independent uniform draws among the valid configs (repeats
  /// possible), in random order: distributed as `n` calls of sample(), but
  /// one walk of the constrained tree serves them all, so the cost does not
  /// grow with how rare valid configs are in the raw product (sample()'s
  /// rejection can take thousands of attempts a draw in a space restricted
  /// by --where).  Empty when no config is valid.
  std::vector<Config> sample_many(const Shape& shape, std::mt19937_64& rng, std::size_t n) const;
  /// The constraint that removes the most configs for `shape` (for the
  /// "no valid config" message); empty when there are no constraints.
  std::string most_restrictive_constraint(const Shape& shape) const;

  // ---- architectures ----------------------------------------------------------
  /// What `config` needs at `shape`: the first `requires:` entry whose `when`
  /// holds; nullopt when none does (it runs wherever the space does).
  std::optional<Architecture> required_architecture(const Config& config, const Shape& shape) const;
  /// The architecture to compile `config` for when the caller targets
  /// `base` (the device's, or --arch): see compile_target().
  std::string target_architecture(const Config& config, const Shape& shape, std::string_view base) const;
  /// This space as a device of architecture `device_arch` ("sm_80") sees it:
  /// each `requires:` entry the device lacks becomes a constraint (its text
  /// says what is needed and what the device is), so enumeration, check(),
  /// repair and the dispatcher skip those configs.  Same parameters and
  /// definition hash.  Without a device (counts, lists, compile-only runs)
  /// use the space as loaded: every config stays valid there.  An empty or
  /// unreadable `device_arch` gives the space unchanged.
  SearchSpace for_device(std::string_view device_arch) const;
  /// The architecture given to for_device(); empty for a space as loaded.
  const std::string& device_architecture() const;

  // ---- evaluation of one config at one shape ---------------------------------
  /// Invalid where a compiled value is not an integer in [0, 2^31) (e.g.
  /// bucket() beyond its last bucket) or a constraint does not hold.
  Validity check(const Config& config, const Shape& shape) const;
  /// The main kernel's launch.  Invalid also when the config's prologue runs
  /// at `shape` and its own geometry is invalid (the config cannot run).
  LaunchGeometry geometry(const Config& config, const Shape& shape) const;
  /// Whether the prologue runs for this config at this shape (there is one
  /// and its `when` holds; NaN does not hold).
  bool prologue_runs(const Config& config, const Shape& shape) const;
  /// The prologue's launch where it runs; nullopt where it does not.
  std::optional<LaunchGeometry> prologue_geometry(const Config& config, const Shape& shape) const;
  /// The config whose prologue part `config` compiles at `shape`, where the
  /// space compiles the prologue apart (`prologue.apart`): the config `as`
  /// makes of it.  nullopt, and the prologue is compiled with the main
  /// kernel as usual, where there is no `apart`, its `when` does not hold,
  /// the prologue does not run, a value of `as` is none of its parameter's
  /// values, the config made is invalid at `shape`, or its prologue would
  /// launch with another grid, block or shared memory than the config's.
  std::optional<Config> prologue_apart_config(const Config& config, const Shape& shape) const;
  LaunchGeometry reference_geometry(const Shape& shape) const;
  /// Preprocessor definitions for the compiler: every parameter as NAME=value
  /// (named values also as NAME_<value>=index) and every compiled value as
  /// SHAPE_<NAME>=value (evaluated for the config and shape: shapes of one
  /// bucket give equal lists).  Sorted by name, so equal configs give equal
  /// lists.  Throws InputError where a compiled value is not a non-negative
  /// integer (a config that check() rejects at this shape).
  std::vector<std::pair<std::string, std::string>> definitions(const Config& config,
                                                               const Shape& shape) const;
  /// The reference's definitions: SHAPE_<v>=value for every compiled name
  /// that is a shape variable (the reference is always compiled exactly).
  std::vector<std::pair<std::string, std::string>> reference_definitions(const Shape& shape) const;
  /// Arguments with their shapes and scalar values evaluated for `shape`.
  std::vector<BoundArgument> bind_arguments(const Shape& shape) const;

  /// Evaluates any expression of this space (one of its own) for a config
  /// and shape; config may be empty when the expression uses no parameter.
  double evaluate(const Expression& expr, const Config* config, const Shape& shape) const;

  class Impl;
 private:
  SearchSpace();
  std::unique_ptr<Impl> impl_;
};

}  // namespace mlatune
