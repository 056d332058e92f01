#include "core/space.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include <fmt/format.h>

#include "core/embedded.h"
#include "core/expression.h"
#include "core/hash.h"
#include "core/space_edit.h"
#include "core/space_impl.h"

namespace mlatune {

// ---- element types -----------------------------------------------------------

std::size_t element_size(ElementType type) {
  switch (type) {
    case ElementType::float32: return 4;
    case ElementType::float64: return 8;
    case ElementType::int32: return 4;
    case ElementType::int64: return 8;
  }
  return 0;
}

std::string_view element_type_name(ElementType type) {
  switch (type) {
    case ElementType::float32: return "float32";
    case ElementType::float64: return "float64";
    case ElementType::int32: return "int32";
    case ElementType::int64: return "int64";
  }
  return "?";
}

std::string_view argument_role_name(ArgumentRole role) {
  switch (role) {
    case ArgumentRole::input: return "input";
    case ArgumentRole::output: return "output";
    case ArgumentRole::scalar: return "scalar";
    case ArgumentRole::workspace: return "workspace";
  }
  return "?";
}

// ---- Expression ----------------------------------------------------------------

Expression::Expression() : impl_(std::make_unique<Impl>()) {}
Expression::~Expression() = default;
Expression::Expression(const Expression& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
Expression& Expression::operator=(const Expression& other) {
  if (this != &other) impl_ = std::make_unique<Impl>(*other.impl_);
  return *this;
}
// A moved-from expression stays usable (empty), as the accessors promise.
Expression::Expression(Expression&& other) noexcept : impl_(std::move(other.impl_)) {
  other.impl_ = std::unique_ptr<Impl>(new (std::nothrow) Impl());
}
Expression& Expression::operator=(Expression&& other) noexcept {
  if (this != &other) {
    impl_ = std::move(other.impl_);
    other.impl_ = std::unique_ptr<Impl>(new (std::nothrow) Impl());
  }
  return *this;
}

namespace {
const std::string empty_string;
const SourceLocation no_location;
const std::vector<std::string> no_names;
}  // namespace

const std::string& Expression::text() const { return impl_ ? impl_->text : empty_string; }
const SourceLocation& Expression::where() const { return impl_ ? impl_->where : no_location; }
const std::vector<std::string>& Expression::variables() const {
  return impl_ ? impl_->variables : no_names;
}

// ---- SearchSpace::Impl -------------------------------------------------------------

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) {
  return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

std::uint64_t saturating_multiply(std::uint64_t a, std::uint64_t b) {
  if (a == 0 || b == 0) return 0;
  return a > UINT64_MAX / b ? UINT64_MAX : a * b;
}

std::string count_text(std::uint64_t count) {
  if (count == UINT64_MAX) return fmt::format("at least {}", count);
  return std::to_string(count);
}

SearchSpace::Impl::Impl(const Impl& other) : SpaceData(other) { adopt_expressions(); }

void SearchSpace::Impl::adopt_expressions() {
  auto adopt = [this](Expression& e) { SearchSpace::Impl::of(e).owner = this; };
  for (KernelSource* source : {&kernel, &reference}) {
    for (Expression& e : source->grid) adopt(e);
    for (Expression& e : source->block) adopt(e);
    adopt(source->shared_bytes);
  }
  for (Argument& argument : arguments) {
    for (Expression& e : argument.shape) adopt(e);
    if (argument.value) adopt(*argument.value);
  }
  for (Expression& e : constraints) adopt(e);
  for (ArchitectureRequirement& r : requirements) adopt(r.when);
  for (Expression& e : requirement_constraints) adopt(e);
  for (CompiledValue& c : compiled) {
    adopt(c.value);
    if (c.check) adopt(*c.check);
  }
  if (prologue) {
    for (Expression& e : prologue->kernel.grid) adopt(e);
    for (Expression& e : prologue->kernel.block) adopt(e);
    adopt(prologue->kernel.shared_bytes);
    if (prologue->when) adopt(*prologue->when);
    if (prologue->apart) {
      if (prologue->apart->when) adopt(*prologue->apart->when);
      for (auto& [index, e] : prologue->apart->as) adopt(e);
    }
  }
}

SearchSpace::Impl::Lease::~Lease() {
  if (!evaluator_) return;
  try {
    std::lock_guard lock(owner_->pool_mutex_);
    owner_->pool_.push_back(std::move(evaluator_));
  } catch (...) {
    // Out of memory while returning it: the evaluator is simply freed.
  }
}

SearchSpace::Impl::Lease SearchSpace::Impl::lease() const {
  {
    std::lock_guard lock(pool_mutex_);
    if (!pool_.empty()) {
      auto evaluator = std::move(pool_.back());
      pool_.pop_back();
      return Lease(*this, std::move(evaluator));
    }
  }
  // Built outside the lock: compiling every expression takes a while.
  return Lease(*this, build_evaluator());
}

std::unique_ptr<ExpressionEvaluator> SearchSpace::Impl::build_evaluator() const {
  ++evaluators_built_;
  return std::make_unique<ExpressionEvaluator>(symbols, expression_texts);
}

void SearchSpace::prepare_evaluators(std::size_t count) const {
  for (;;) {
    {
      std::lock_guard lock(impl_->pool_mutex_);
      if (impl_->pool_.size() >= count) return;
    }
    auto evaluator = impl_->build_evaluator();  // outside the lock, as in lease()
    std::lock_guard lock(impl_->pool_mutex_);
    impl_->pool_.push_back(std::move(evaluator));
  }
}

std::uint64_t SearchSpace::evaluators_built() const { return impl_->evaluators_built_; }

void SearchSpace::Impl::check_shape(const Shape& shape) const {
  if (shape.values.size() != shape_variables.size())
    throw InputError(fmt::format("a shape of {} needs {} values ({}), got {}", file_name,
                                 shape_variables.size(), fmt::join(shape_variables, ","),
                                 shape.values.size()));
}

void SearchSpace::Impl::check_config(const Config& config) const {
  if (config.choice.size() != parameters.size())
    throw InputError(fmt::format("a config of {} needs {} choices, got {}", file_name,
                                 parameters.size(), config.choice.size()));
  for (std::size_t i = 0; i < parameters.size(); ++i)
    if (config.choice[i] >= parameters[i].numeric.size())
      throw InputError(
          fmt::format("config choice {} is out of range for parameter '{}' ({} values)",
                      config.choice[i], parameters[i].name, parameters[i].numeric.size()));
}

void SearchSpace::Impl::bind_shape(ExpressionEvaluator& evaluator, const Shape& shape) const {
  check_shape(shape);
  double* slots = evaluator.variables();
  for (std::size_t i = 0; i < shape.values.size(); ++i)
    slots[i] = static_cast<double>(shape.values[i]);
}

void SearchSpace::Impl::bind_config(ExpressionEvaluator& evaluator, const Config& config) const {
  check_config(config);
  double* slots = evaluator.variables() + shape_variables.size();
  for (std::size_t i = 0; i < parameters.size(); ++i)
    slots[i] = static_cast<double>(parameters[i].numeric[config.choice[i]]);
}

// ---- SearchSpace: construction -------------------------------------------------------

SearchSpace::SearchSpace() = default;
SearchSpace::SearchSpace(SearchSpace&&) noexcept = default;
SearchSpace& SearchSpace::operator=(SearchSpace&&) noexcept = default;
SearchSpace::SearchSpace(const SearchSpace& other) : impl_(std::make_unique<Impl>(*other.impl_)) {}
SearchSpace::~SearchSpace() = default;

SearchSpace SearchSpace::parse(std::string_view text, const std::string& file_name,
                               const std::filesystem::path& base_dir) {
  SearchSpace space;
  space.impl_ = parse_space(text, file_name, base_dir);
  return space;
}

void SearchSpace::check_constraint(const std::string& text) const {
  auto fail = [&](std::size_t offset, const std::string& message) {
    throw InputError(fmt::format("'{}': column {}: {}", text, offset + 1, message));
  };
  std::vector<std::string> used;
  try {
    used = analyze_expression(text, impl_->symbols);
  } catch (const ExpressionSyntaxError& error) {
    fail(error.offset, error.what());
  }
  std::vector<std::string> known = impl_->shape_variables;
  for (const Parameter& p : impl_->parameters) known.push_back(p.name);
  for (const std::string& name : impl_->compiled_shape_variables) known.push_back("SHAPE_" + name);
  for (const std::string& name : used)
    if (std::find(known.begin(), known.end(), name) == known.end())
      fail(find_identifier(text, name),
           fmt::format("unknown name '{}'; expected a shape variable or parameter ({}) or a named "
                       "value",
                       name, fmt::join(known, ", ")));
}

SearchSpace SearchSpace::restrict(const std::vector<std::string>& constraints) const {
  const std::string name = impl_->file_name + " (restricted)";
  std::string text = impl_->text;
  for (const std::string& expression : constraints) {
    // Checked here, so that no error points into the text generated below.
    check_constraint(expression);
    try {
      text = edit_add_constraint(text, name, expression);
    } catch (const InputError& error) {
      throw InputError(fmt::format("'{}': {}", expression, error.message()));
    }
  }
  SearchSpace space;
  // The original's base directory: parse() may have been given one that is
  // not the file name's parent.
  space.impl_ = parse_space(text, name, impl_->base_dir, false);
  return impl_->device_arch.empty() ? std::move(space) : space.for_device(impl_->device_arch);
}

SearchSpace SearchSpace::load(const std::filesystem::path& file) {
  std::error_code ec;
  if (std::filesystem::exists(file, ec) && !std::filesystem::is_regular_file(file, ec))
    throw InputError(SourceLocation{file.string()},
                     "not a regular file; expected a search-space YAML file");
  // Not on disk: the copy embedded in this build, if any (spaces shipped with
  // mlatune work from any directory); InputError when there is none.
  LoadedText loaded = load_text_file(file);
  std::filesystem::path base = file.parent_path();
  if (base.empty()) base = ".";
  return parse(loaded.text, file.string(), base);
}

// ---- accessors --------------------------------------------------------------------

const std::string& SearchSpace::kernel_name() const { return impl_->kernel_name; }
const std::string& SearchSpace::file_name() const { return impl_->file_name; }
const std::string& SearchSpace::text() const { return impl_->text; }
const KernelSource& SearchSpace::kernel() const { return impl_->kernel; }
const KernelSource& SearchSpace::reference() const { return impl_->reference; }
const std::vector<std::string>& SearchSpace::shape_variables() const {
  return impl_->shape_variables;
}
const std::vector<std::string>& SearchSpace::compiled_shape_variables() const {
  return impl_->compiled_shape_variables;
}
const std::vector<Shape>& SearchSpace::default_shapes() const { return impl_->default_shapes; }
const std::vector<Argument>& SearchSpace::arguments() const { return impl_->arguments; }
const std::vector<Parameter>& SearchSpace::parameters() const { return impl_->parameters; }
const std::vector<Expression>& SearchSpace::constraints() const { return impl_->constraints; }
const Tolerance& SearchSpace::tolerance() const { return impl_->tolerance; }
const std::optional<PrologueSource>& SearchSpace::prologue() const { return impl_->prologue; }
const Config& SearchSpace::default_config() const { return impl_->default_config; }
const std::vector<ArchitectureRequirement>& SearchSpace::requirements() const {
  return impl_->requirements;
}
const std::string& SearchSpace::device_architecture() const { return impl_->device_arch; }
const std::vector<Config>& SearchSpace::fallbacks() const { return impl_->fallbacks; }
const std::string& SearchSpace::template_text() const { return impl_->template_text; }
const std::string& SearchSpace::reference_text() const { return impl_->reference_text; }
std::string SearchSpace::template_hash() const { return content_hash(impl_->template_text); }

namespace {

// Expressions in canonical form: blanks do not change their meaning.
std::string canonical(const Expression& e) {
  std::string out;
  for (char c : e.text())
    if (c != ' ' && c != '\t' && c != '\n' && c != '\r') out += c;
  return out;
}

void serialize_source(std::string& out, const char* what, const KernelSource& source) {
  out += fmt::format("{}.entry={}\n", what, source.entry);
  for (int i = 0; i < 3; ++i)
    out += fmt::format("{}.grid[{}]={}\n", what, i, canonical(source.grid[i]));
  for (int i = 0; i < 3; ++i)
    out += fmt::format("{}.block[{}]={}\n", what, i, canonical(source.block[i]));
  out += fmt::format("{}.shared_memory={}\n", what, canonical(source.shared_bytes));
}

}  // namespace

std::string SearchSpace::definition_hash() const {
  const Impl& s = *impl_;
  std::string out = "mlatune space v1\n";
  out += fmt::format("kernel={}\n", s.kernel_name);
  out += fmt::format("shape.variables={}\n", fmt::join(s.shape_variables, ","));
  // The list form hashes as it always has, so that stored results of such
  // spaces stay theirs.
  if (!s.compiled_as_map)
    out += fmt::format("shape.compiled={}\n", fmt::join(s.compiled_shape_variables, ","));
  else
    for (const CompiledValue& c : s.compiled)
      out += fmt::format("shape.compiled.{}={}\n", c.name, canonical(c.value));
  for (const Parameter& p : s.parameters)
    out += fmt::format("parameter {}={}\n", p.name, fmt::join(p.text, ","));
  // A device's constraints (for_device) are not the file's: same hash.
  for (std::size_t c = 0; c < s.declared_constraints; ++c)
    out += fmt::format("constraint {}\n", canonical(s.constraints[c]));
  for (const ArchitectureRequirement& r : s.requirements)
    out += fmt::format("requires {} {}\n", r.arch.str(), canonical(r.when));
  serialize_source(out, "launch", s.kernel);
  serialize_source(out, "reference", s.reference);
  // Only present when the file has one: hashes of older spaces stay the same.
  if (s.prologue) {
    serialize_source(out, "prologue", s.prologue->kernel);
    out += fmt::format("prologue.when={}\n", s.prologue->when ? canonical(*s.prologue->when) : "");
    // Only where the section has one, so that the hash of every space without
    // it (and of every stored result under one) stays what it was.
    if (s.prologue->apart) {
      out += fmt::format("prologue.apart.when={}\n",
                         s.prologue->apart->when ? canonical(*s.prologue->apart->when) : "");
      for (const auto& [index, e] : s.prologue->apart->as)
        out += fmt::format("prologue.apart.as.{}={}\n", s.parameters[index].name, canonical(e));
    }
  }
  for (const Argument& a : s.arguments) {
    out += fmt::format("argument {} {} {}", a.name, element_type_name(a.type), argument_role_name(a.role));
    for (const Expression& e : a.shape) out += " [" + canonical(e) + "]";
    if (a.value) out += " = " + canonical(*a.value);
    out += "\n";
  }
  out += fmt::format("tolerance.relative_l2={:a}\n", s.tolerance.relative_l2);
  if (s.tolerance.max_abs) out += fmt::format("tolerance.max_abs={:a}\n", *s.tolerance.max_abs);
  return content_hash(out);
}

// ---- shapes and configs as text ---------------------------------------------------------

namespace {

std::vector<std::pair<std::string, std::string>> split_assignments(std::string_view text,
                                                                   const char* what,
                                                                   const SourceLocation& where) {
  std::vector<std::pair<std::string, std::string>> out;
  auto trim = [](std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
    return std::string(s);
  };
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    if (comma == std::string_view::npos) comma = text.size();
    std::string_view item = text.substr(start, comma - start);
    std::size_t eq = item.find('=');
    if (eq == std::string_view::npos || trim(item.substr(0, eq)).empty())
      throw InputError(where,
                       fmt::format("malformed {} '{}': item '{}' is not NAME=VALUE; expected "
                                   "NAME=VALUE,NAME=VALUE,...",
                                   what, text, trim(item)));
    out.emplace_back(trim(item.substr(0, eq)), trim(item.substr(eq + 1)));
    start = comma + 1;
  }
  return out;
}

}  // namespace

Shape SearchSpace::parse_shape(std::string_view text) const {
  const auto& names = impl_->shape_variables;
  // A shape comes from a command line or a database, never from the space
  // file: its errors carry no file location.
  const SourceLocation nowhere;
  if (text.find_first_not_of(" \t") == std::string_view::npos)
    throw InputError(fmt::format("empty shape; expected NAME=VALUE for each of {}",
                                 fmt::join(names, ", ")));
  Shape shape;
  shape.values.assign(names.size(), 0);
  std::vector<bool> seen(names.size(), false);
  for (const auto& [name, value] : split_assignments(text, "shape", nowhere)) {
    auto it = std::find(names.begin(), names.end(), name);
    if (it == names.end())
      throw InputError(nowhere,
                       fmt::format("shape '{}': unknown shape variable '{}'; expected {}", text,
                                   name, fmt::join(names, ", ")));
    std::size_t index = static_cast<std::size_t>(it - names.begin());
    if (seen[index])
      throw InputError(nowhere,
                       fmt::format("shape '{}': variable '{}' is given twice", text, name));
    std::int64_t number = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), number);
    if (ec != std::errc() || end != value.data() + value.size() || number <= 0)
      throw InputError(
          nowhere,
          fmt::format("shape '{}': {}={} is not a positive integer", text, name, value));
    shape.values[index] = number;
    seen[index] = true;
  }
  for (std::size_t i = 0; i < names.size(); ++i)
    if (!seen[i])
      throw InputError(nowhere,
                       fmt::format("shape '{}' lacks variable '{}'; expected every one of {}", text,
                                   names[i], fmt::join(names, ", ")));
  return shape;
}

std::string SearchSpace::shape_string(const Shape& shape) const {
  impl_->check_shape(shape);
  std::string out;
  for (std::size_t i = 0; i < shape.values.size(); ++i)
    out += fmt::format("{}{}={}", i ? "," : "", impl_->shape_variables[i], shape.values[i]);
  return out;
}

Config SearchSpace::parse_config(std::string_view text) const { return impl_->parse_config(text, false); }

Config SearchSpace::parse_config_or_default(std::string_view text) const {
  return impl_->parse_config(text, true);
}

Config SearchSpace::Impl::parse_config(std::string_view text, bool fill_default) const {
  Config config;
  config.choice.assign(parameters.size(), 0);
  std::vector<bool> seen(parameters.size(), false);
  if (!parameters.empty() || !text.empty()) {
    for (const auto& [name, value] : split_assignments(text, "config", parameters_where)) {
      // An init-capture: clang before 16 cannot capture a structured binding
      // itself, and the fuzz build (scripts/fuzz) compiles with clang.
      auto it = std::find_if(parameters.begin(), parameters.end(),
                             [&wanted = name](const Parameter& p) { return p.name == wanted; });
      if (it == parameters.end())
        throw InputError(parameters_where,
                         fmt::format("config '{}': unknown parameter '{}'", text, name));
      std::size_t index = static_cast<std::size_t>(it - parameters.begin());
      if (seen[index])
        throw InputError(it->where,
                         fmt::format("config '{}': parameter '{}' is given twice", text, name));
      auto v = std::find(it->text.begin(), it->text.end(), value);
      if (v == it->text.end())
        throw InputError(it->where,
                         fmt::format("config '{}': {}={} is not one of its values; expected one "
                                     "of {}",
                                     text, name, value, fmt::join(it->text, ", ")));
      config.choice[index] = static_cast<std::uint32_t>(v - it->text.begin());
      seen[index] = true;
    }
  }
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    if (seen[i]) continue;
    if (!fill_default)
      throw InputError(parameters[i].where,
                       fmt::format("config '{}' lacks parameter '{}'", text, parameters[i].name));
    config.choice[i] = default_config.choice[i];
  }
  return config;
}

std::string SearchSpace::config_string(const Config& config) const {
  impl_->check_config(config);
  std::string out;
  for (std::size_t i = 0; i < config.choice.size(); ++i) {
    const Parameter& p = impl_->parameters[i];
    out += fmt::format("{}{}={}", i ? "," : "", p.name, p.text[config.choice[i]]);
  }
  return out;
}

// ---- evaluation ----------------------------------------------------------------------

double SearchSpace::evaluate(const Expression& expr, const Config* config,
                             const Shape& shape) const {
  if (!expr.impl_ || expr.impl_->owner != impl_.get())
    throw std::invalid_argument("SearchSpace::evaluate: the expression belongs to another space");
  auto evaluator = impl_->lease();
  impl_->bind_shape(*evaluator, shape);
  if (config) {
    impl_->bind_config(*evaluator, *config);
  } else {
    for (const std::string& name : expr.variables())
      for (const Parameter& p : impl_->parameters)
        if (p.name == name)
          throw InputError(expr.where(), fmt::format("expression '{}' uses parameter '{}' but no "
                                                     "config was given",
                                                     expr.text(), name));
  }
  return evaluator->evaluate(expr.impl_->id);
}

Validity SearchSpace::check(const Config& config, const Shape& shape) const {
  auto evaluator = impl_->lease();
  impl_->bind_shape(*evaluator, shape);
  impl_->bind_config(*evaluator, config);
  // Compiled values first: a constraint that reads a NaN SHAPE_<name> would
  // fail with a less telling message.
  for (const CompiledValue& c : impl_->compiled)
    if (c.check && !Impl::holds(evaluator->evaluate(SearchSpace::Impl::of(*c.check).id)))
      return Validity{false, c.check->text(), c.check->where()};
  for (const Expression& constraint : impl_->constraints)
    if (!Impl::holds(evaluator->evaluate(SearchSpace::Impl::of(constraint).id)))
      return Validity{false, constraint.text(), constraint.where()};
  return Validity{};
}

// ---- architectures ------------------------------------------------------------------

std::optional<Architecture> SearchSpace::required_architecture(const Config& config,
                                                               const Shape& shape) const {
  if (impl_->requirements.empty()) return std::nullopt;
  auto evaluator = impl_->lease();
  impl_->bind_shape(*evaluator, shape);
  impl_->bind_config(*evaluator, config);
  for (const ArchitectureRequirement& r : impl_->requirements)
    if (Impl::holds(evaluator->evaluate(Impl::of(r.when).id))) return r.arch;
  return std::nullopt;
}

std::string SearchSpace::target_architecture(const Config& config, const Shape& shape,
                                             std::string_view base) const {
  return compile_target(base, required_architecture(config, shape));
}

SearchSpace SearchSpace::for_device(std::string_view device_arch) const {
  SearchSpace space(*this);
  Impl& s = *space.impl_;
  const std::optional<Architecture> device = Architecture::parse(device_arch);
  if (!device || s.device_arch == device_arch) return space;
  s.constraints.resize(s.declared_constraints);  // another device's, if any
  s.device_arch = std::string(device_arch);
  for (std::size_t i = 0; i < s.requirements.size(); ++i) {
    const ArchitectureRequirement& r = s.requirements[i];
    const std::string missing = missing_architecture(r.arch, *device);
    if (missing.empty()) continue;
    Expression constraint = s.requirement_constraints[i];
    Impl::of(constraint).text = fmt::format("{} {}", r.when.text(), missing);
    s.constraints.push_back(std::move(constraint));
  }
  s.adopt_expressions();
  s.plan_enumeration();
  return space;
}

namespace {

// Limits of every CUDA device since compute capability 3.0.
constexpr std::int64_t max_grid[3] = {2147483647, 65535, 65535};
constexpr std::int64_t max_block[3] = {1024, 1024, 64};
constexpr std::int64_t max_threads_per_block = 1024;

}  // namespace

LaunchGeometry evaluate_launch(const KernelSource& source, ExpressionEvaluator& evaluator,
                               const Expression** culprit) {
  LaunchGeometry g;
  auto invalid = [&](const Expression& e, std::string reason) {
    if (!g.invalid_reason.empty()) return;
    g.invalid_reason = fmt::format("{} ('{}' at {})", reason, e.text(), e.where().str());
    if (culprit) *culprit = &e;
  };
  auto integer = [&](const Expression& e, const char* what, std::int64_t minimum,
                     std::int64_t maximum, std::int64_t& out) {
    double v = evaluator.evaluate(SearchSpace::Impl::of(e).id);
    out = 0;
    if (!std::isfinite(v) || v != std::floor(v) || v < static_cast<double>(minimum))
      return invalid(e, fmt::format("{} = {} is not {}", what, v,
                                    minimum > 0 ? "a positive integer" : "a non-negative integer"));
    if (v > static_cast<double>(maximum))
      return invalid(e, fmt::format("{} = {} is above the CUDA limit of {}", what, v, maximum));
    out = static_cast<std::int64_t>(v);
  };
  static const char* grid_names[] = {"grid.x", "grid.y", "grid.z"};
  static const char* block_names[] = {"block.x", "block.y", "block.z"};
  for (int i = 0; i < 3; ++i) integer(source.grid[i], grid_names[i], 1, max_grid[i], g.grid[i]);
  for (int i = 0; i < 3; ++i) integer(source.block[i], block_names[i], 1, max_block[i], g.block[i]);
  integer(source.shared_bytes, "shared_memory", 0, std::int64_t{1} << 53, g.shared_bytes);
  if (g.valid() && g.block[0] * g.block[1] * g.block[2] > max_threads_per_block)
    invalid(source.block[0], fmt::format("block = {} x {} x {} is {} threads, above the CUDA "
                                         "limit of {} per block",
                                         g.block[0], g.block[1], g.block[2],
                                         g.block[0] * g.block[1] * g.block[2],
                                         max_threads_per_block));
  return g;
}

namespace {

/// Whether the space's prologue runs for the config and shape bound in `evaluator`.
bool prologue_holds(const SearchSpace::Impl& space, ExpressionEvaluator& evaluator) {
  if (!space.prologue) return false;
  if (!space.prologue->when) return true;
  return SearchSpace::Impl::holds(evaluator.evaluate(SearchSpace::Impl::of(*space.prologue->when).id));
}

}  // namespace

LaunchGeometry SearchSpace::geometry(const Config& config, const Shape& shape) const {
  auto evaluator = impl_->lease();
  impl_->bind_shape(*evaluator, shape);
  impl_->bind_config(*evaluator, config);
  LaunchGeometry g = evaluate_launch(impl_->kernel, *evaluator);
  // A config whose prologue cannot launch cannot run, however good its main launch.
  if (g.valid() && prologue_holds(*impl_, *evaluator)) {
    LaunchGeometry p = evaluate_launch(impl_->prologue->kernel, *evaluator);
    if (!p.valid()) g.invalid_reason = "prologue " + p.invalid_reason;
  }
  return g;
}

bool SearchSpace::prologue_runs(const Config& config, const Shape& shape) const {
  if (!impl_->prologue) return false;
  auto evaluator = impl_->lease();
  impl_->bind_shape(*evaluator, shape);
  impl_->bind_config(*evaluator, config);
  return prologue_holds(*impl_, *evaluator);
}

std::optional<LaunchGeometry> SearchSpace::prologue_geometry(const Config& config,
                                                             const Shape& shape) const {
  if (!impl_->prologue) return std::nullopt;
  auto evaluator = impl_->lease();
  impl_->bind_shape(*evaluator, shape);
  impl_->bind_config(*evaluator, config);
  if (!prologue_holds(*impl_, *evaluator)) return std::nullopt;
  return evaluate_launch(impl_->prologue->kernel, *evaluator);
}

std::optional<Config> SearchSpace::prologue_apart_config(const Config& config, const Shape& shape) const {
  if (!impl_->prologue || !impl_->prologue->apart) return std::nullopt;
  const PrologueSource::Apart& apart = *impl_->prologue->apart;
  Config as = config;
  LaunchGeometry mine;
  {
    auto evaluator = impl_->lease();
    impl_->bind_shape(*evaluator, shape);
    impl_->bind_config(*evaluator, config);
    if (!prologue_holds(*impl_, *evaluator)) return std::nullopt;
    if (apart.when && !Impl::holds(evaluator->evaluate(Impl::of(*apart.when).id))) return std::nullopt;
    for (const auto& [index, e] : apart.as) {
      const double value = evaluator->evaluate(Impl::of(e).id);
      const std::vector<std::int64_t>& numeric = impl_->parameters[index].numeric;
      auto it = std::find_if(numeric.begin(), numeric.end(),
                             [&](std::int64_t n) { return static_cast<double>(n) == value; });
      if (it == numeric.end()) return std::nullopt;  // NaN too
      as.choice[index] = static_cast<std::uint32_t>(it - numeric.begin());
    }
    mine = evaluate_launch(impl_->prologue->kernel, *evaluator);
  }
  if (as == config) return as;
  if (!check(as, shape)) return std::nullopt;
  // The part is compiled for the launch that `as` gets; the binary is
  // launched as `config` says.  A kernel may rely on its launch (the
  // flagship traps on another block or too little shared memory).
  const std::optional<LaunchGeometry> theirs = prologue_geometry(as, shape);
  if (!theirs || !mine.valid() || !theirs->valid() || theirs->shared_bytes != mine.shared_bytes ||
      !std::equal(std::begin(mine.grid), std::end(mine.grid), std::begin(theirs->grid)) ||
      !std::equal(std::begin(mine.block), std::end(mine.block), std::begin(theirs->block)))
    return std::nullopt;
  return as;
}

LaunchGeometry SearchSpace::reference_geometry(const Shape& shape) const {
  auto evaluator = impl_->lease();
  impl_->bind_shape(*evaluator, shape);
  return evaluate_launch(impl_->reference, *evaluator);
}

std::vector<std::pair<std::string, std::string>> SearchSpace::reference_definitions(
    const Shape& shape) const {
  impl_->check_shape(shape);
  // The reference is always exact: each compiled name that is a shape
  // variable gets the shape's value, whatever a map form would compile.
  std::vector<std::pair<std::string, std::string>> out;
  const auto& variables = impl_->shape_variables;
  for (const std::string& name : impl_->compiled_shape_variables) {
    auto it = std::find(variables.begin(), variables.end(), name);
    if (it == variables.end()) continue;
    out.emplace_back("SHAPE_" + name,
                     std::to_string(shape.values[static_cast<std::size_t>(it - variables.begin())]));
  }
  std::sort(out.begin(), out.end());
  return out;
}

namespace {

// A compiled value as the integer the kernel gets; a value that is not one
// means the caller compiles a config that cannot run the shape.
std::string compiled_integer(const SearchSpace& space, const CompiledValue& c, double value,
                             const Config& config, const Shape& shape) {
  if (!std::isfinite(value) || value != std::floor(value) || value < 0 || value > 2147483647.0)
    throw InputError(c.value.where(),
                     fmt::format("compiled value SHAPE_{} = '{}' is {} for config {} at shape {}; "
                                 "expected a non-negative integer (the config cannot run this "
                                 "shape: check() says so)",
                                 c.name, c.value.text(), value, space.config_string(config),
                                 space.shape_string(shape)));
  return std::to_string(static_cast<std::int64_t>(value));
}

}  // namespace

std::vector<std::pair<std::string, std::string>> SearchSpace::definitions(
    const Config& config, const Shape& shape) const {
  std::vector<std::pair<std::string, std::string>> out;
  {
    auto evaluator = impl_->lease();
    impl_->bind_shape(*evaluator, shape);
    impl_->bind_config(*evaluator, config);
    for (const CompiledValue& c : impl_->compiled)
      out.emplace_back("SHAPE_" + c.name,
                       compiled_integer(*this, c, evaluator->evaluate(Impl::of(c.value).id),
                                        config, shape));
  }
  for (std::size_t i = 0; i < impl_->parameters.size(); ++i) {
    const Parameter& p = impl_->parameters[i];
    out.emplace_back(p.name, std::to_string(p.numeric[config.choice[i]]));
    if (p.kind == ValueKind::name)
      for (std::size_t v = 0; v < p.text.size(); ++v)
        out.emplace_back(p.name + "_" + p.text[v], std::to_string(v));
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string scalar_value_problem(const Argument& argument, double value) {
  auto integer = [&](double lowest, double highest) -> std::string {
    if (!std::isfinite(value) || value != std::floor(value))
      return fmt::format("is {}, not an integer", value);
    if (value < lowest || value > highest)
      return fmt::format("is {}, out of range for {}", value, element_type_name(argument.type));
    return {};
  };
  switch (argument.type) {
    case ElementType::int32: return integer(-2147483648.0, 2147483647.0);
    case ElementType::int64: return integer(-0x1p63, 0x1p63 - 1024);  // the largest double below 2^63
    case ElementType::float32:
      if (!std::isfinite(value) || std::fabs(value) > 3.4028234663852886e38)
        return fmt::format("is {}, not a finite float32", value);
      return {};
    case ElementType::float64:
      if (!std::isfinite(value)) return fmt::format("is {}, not a finite number", value);
      return {};
  }
  return {};
}

std::vector<BoundArgument> SearchSpace::bind_arguments(const Shape& shape) const {
  auto evaluator = impl_->lease();
  impl_->bind_shape(*evaluator, shape);
  std::vector<BoundArgument> out;
  for (const Argument& argument : impl_->arguments) {
    BoundArgument bound;
    bound.argument = &argument;
    if (argument.value) {
      // Bound as evaluated: whether it fits its type is the launch plan's
      // question (core/launch_plan.h), answered there as a refusal value so
      // that the evaluator and the dispatcher refuse such a shape alike.
      bound.scalar = evaluator->evaluate(SearchSpace::Impl::of(*argument.value).id);
    } else {
      bound.element_count = 1;
      for (const Expression& e : argument.shape) {
        double v = evaluator->evaluate(SearchSpace::Impl::of(e).id);
        if (!std::isfinite(v) || v != std::floor(v) || v < 0 || v > 9.0e18)
          throw InputError(e.where(), fmt::format("extent '{}' of argument '{}' is {} at shape {}; "
                                                  "expected a non-negative integer",
                                                  e.text(), argument.name, v, shape_string(shape)));
        bound.extents.push_back(static_cast<std::int64_t>(v));
        bound.element_count = static_cast<std::int64_t>(saturating_multiply(
            static_cast<std::uint64_t>(bound.element_count), static_cast<std::uint64_t>(v)));
      }
    }
    out.push_back(std::move(bound));
  }
  return out;
}

}  // namespace mlatune
