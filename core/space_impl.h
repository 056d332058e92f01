// Internals of SearchSpace shared by space.cpp (accessors, text forms,
// evaluation), space_parse.cpp (reading the YAML) and space_enumerate.cpp
// (lazy counting, iteration and sampling).  Not part of the public API.
#pragma once
#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "core/expression.h"
#include "core/space.h"

namespace mlatune {

class Expression::Impl {
 public:
  std::string text;
  SourceLocation where;
  std::vector<std::string> variables;
  std::size_t id = 0;                        // index into SpaceData::expression_texts
  const SearchSpace::Impl* owner = nullptr;  // the space whose evaluators know `id`
};

/// How a walk over the parameters is organized: the order in which they are
/// bound, and at each depth d the constraints whose last variable is bound
/// there (checked once order[0..d) are bound).  Below `deepest` no
/// constraint remains, so a subtree's size is a product of list lengths.
struct EnumerationPlan {
  std::vector<std::size_t> order;                // parameter indices
  std::vector<std::vector<std::size_t>> checks;  // size P+1: expression ids
  std::size_t deepest = 0;
  std::vector<std::uint64_t> suffix_product;  // size P+1, saturating
};

/// One value compiled into the kernel as -DSHAPE_<name>=value: the list form
/// of `shape.compiled` (SHAPE_<v> = v) or an entry of its map form.  Other
/// expressions read it as SHAPE_<name>: their evaluated text holds the value
/// expression inlined in parentheses, so enumeration, sampling and checks see
/// the shape variables and parameters it really depends on.
struct CompiledValue {
  std::string name;  // without the SHAPE_ prefix
  Expression value;  // over shape variables and parameters
  /// Holds when the value is an integer in [0, 2^31): a config whose value is
  /// not (bucket() beyond its last bucket gives NaN) cannot run the shape.
  /// Unset for the list form, whose values are shape variables.
  std::optional<Expression> check;
  bool reads_parameters = false;
};

/// Everything read from the file (copyable).
struct SpaceData {
  std::string file_name;
  std::filesystem::path base_dir;  // template paths are relative to it
  std::string text;
  std::string kernel_name;
  KernelSource kernel;
  KernelSource reference;
  std::vector<std::string> shape_variables;
  SourceLocation shape_variables_where;  // `shape.variables`, for shape errors
  SourceLocation parameters_where;       // `parameters:`, for config errors
  std::vector<std::string> compiled_shape_variables;  // names of `compiled`, in file order
  std::vector<CompiledValue> compiled;
  bool compiled_as_map = false;  // `shape.compiled` is a map (else a list, or absent)
  std::vector<Shape> default_shapes;
  std::vector<Argument> arguments;
  std::vector<Parameter> parameters;
  /// The file's constraints, then those for_device() adds (one per
  /// `requires:` entry the device lacks).
  std::vector<Expression> constraints;
  std::size_t declared_constraints = 0;  // how many of `constraints` the file has
  std::vector<ArchitectureRequirement> requirements;
  /// Per requirement: `!(when)`, the constraint a device without its arch
  /// adds (its text is set then, naming the device).
  std::vector<Expression> requirement_constraints;
  std::string device_arch;  // for_device()'s argument; empty as loaded
  Tolerance tolerance;
  std::optional<PrologueSource> prologue;
  Config default_config;
  std::vector<Config> fallbacks;
  std::string template_text;
  std::string reference_text;

  /// Variables of every expression: shape variables, then parameters.
  ExpressionSymbols symbols;
  std::vector<std::string> expression_texts;  // indexed by Expression::Impl::id
  std::uint64_t raw_count = 1;
  EnumerationPlan lexical;   // declaration order: for_each_valid
  EnumerationPlan counting;  // constrained parameters first: count, sample
};

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b);
std::uint64_t saturating_multiply(std::uint64_t a, std::uint64_t b);

class SearchSpace::Impl : public SpaceData {
 public:
  Impl() = default;
  Impl(const Impl& other);  // copies the data, not the evaluator pool
  Impl& operator=(const Impl&) = delete;

  /// An evaluator borrowed from the pool for the duration of one call: this
  /// is what makes const member functions safe from many threads.
  class Lease {
   public:
    Lease(const Impl& owner, std::unique_ptr<ExpressionEvaluator> evaluator)
        : owner_(&owner), evaluator_(std::move(evaluator)) {}
    Lease(Lease&&) = default;
    ~Lease();
    ExpressionEvaluator& operator*() const { return *evaluator_; }
    ExpressionEvaluator* operator->() const { return evaluator_.get(); }

   private:
    const Impl* owner_;
    std::unique_ptr<ExpressionEvaluator> evaluator_;
  };
  Lease lease() const;
  /// A new evaluator (every expression compiled), counted in evaluators_built_.
  std::unique_ptr<ExpressionEvaluator> build_evaluator() const;

  /// An expression's internals (SearchSpace is Expression's friend; helpers
  /// outside its members reach them through here).
  static Expression::Impl& of(const Expression& e) { return *e.impl_; }

  void bind_shape(ExpressionEvaluator& evaluator, const Shape& shape) const;
  void bind_config(ExpressionEvaluator& evaluator, const Config& config) const;
  void check_shape(const Shape& shape) const;
  void check_config(const Config& config) const;
  /// SearchSpace::parse_config (fill_default false) and parse_config_or_default.
  Config parse_config(std::string_view text, bool fill_default) const;
  /// A constraint holds when it is non-zero (NaN does not hold).
  static bool holds(double value) { return value != 0.0 && value == value; }

  /// Points every expression at this space (after a copy).
  void adopt_expressions();
  void plan_enumeration();

  // space_enumerate.cpp
  std::uint64_t count_below(const EnumerationPlan& plan, ExpressionEvaluator& evaluator,
                            std::size_t depth) const;
  std::uint64_t cached_count(const Shape& shape) const;
  /// Whether `shape` has a valid config: stops at the first one found, so
  /// reading a space does not take time proportional to its size.
  bool any_valid(const Shape& shape) const;
  /// Index of the constraint that alone rejects the most raw configs at
  /// `shape` (and how many), or npos when there are no constraints.
  std::size_t most_restrictive(const Shape& shape, std::uint64_t* removed) const;

 private:
  friend class SearchSpace;  // prepare_evaluators and evaluators_built reach the pool
  mutable std::mutex pool_mutex_;
  mutable std::vector<std::unique_ptr<ExpressionEvaluator>> pool_;
  mutable std::atomic<std::uint64_t> evaluators_built_{0};
  mutable std::mutex count_mutex_;
  mutable std::map<Shape, std::uint64_t> count_cache_;
};

/// A kernel's launch for the config and shape bound in `evaluator`; when it
/// is invalid and `culprit` is given, *culprit is the expression at fault.
LaunchGeometry evaluate_launch(const KernelSource& source, ExpressionEvaluator& evaluator,
                               const Expression** culprit = nullptr);
/// Why `value` cannot be passed as scalar argument `argument` (not an
/// integer or out of range for an integer type, not finite or out of range
/// for a float type); empty when it can.
std::string scalar_value_problem(const Argument& argument, double value);

/// Reads a space (space_parse.cpp).  `check_defaults`: require a valid
/// config at every default shape (off for a subspace made by restrict()).
std::unique_ptr<SearchSpace::Impl> parse_space(std::string_view text, const std::string& file_name,
                                               const std::filesystem::path& base_dir,
                                               bool check_defaults = true);

}  // namespace mlatune
