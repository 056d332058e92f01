// Reading a search-space YAML file into SpaceData: every check of the format
// (search_spaces/README.md) happens here, once, and every error names
// file:line:col, what is wrong and what was expected.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <map>
#include <set>

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include "core/embedded.h"
#include "core/space.h"
#include "core/space_impl.h"
#include "core/template_source.h"

namespace mlatune {
namespace {

namespace fs = std::filesystem;

// Longer names are refused where they are read: muParser, which evaluates every
// expression, rejects identifiers of more than 100 characters.
constexpr std::size_t kMaxNameLength = 64;

bool is_identifier(const std::string& s) {
  if (s.empty() || s.size() > kMaxNameLength || std::isdigit(static_cast<unsigned char>(s[0])))
    return false;
  return std::all_of(s.begin(), s.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

const char* node_kind(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Map: return "a map";
    case YAML::NodeType::Sequence: return "a list";
    case YAML::NodeType::Scalar: return "a single value";
    default: return "nothing";
  }
}

struct Entry {
  YAML::Node key;
  YAML::Node value;
};

bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }

// Why a parameter name cannot be a preprocessor definition (-DNAME=value)
// without breaking the kernel source, or empty when it can: a C++ keyword
// or alternative token, a name reserved to the implementation (__x, _X:
// __global__, __CUDA_ARCH__, ...), or a CUDA built-in.
std::string macro_name_conflict(const std::string& name) {
  static const std::set<std::string> keywords = {
      "alignas", "alignof", "and", "and_eq", "asm", "auto", "bitand", "bitor", "bool", "break",
      "case", "catch", "char", "char8_t", "char16_t", "char32_t", "class", "compl", "concept",
      "const", "consteval", "constexpr", "constinit", "const_cast", "continue", "co_await",
      "co_return", "co_yield", "decltype", "default", "delete", "do", "double", "dynamic_cast",
      "else", "enum", "explicit", "export", "extern", "false", "float", "for", "friend", "goto",
      "if", "inline", "int", "long", "mutable", "namespace", "new", "noexcept", "not", "not_eq",
      "nullptr", "operator", "or", "or_eq", "private", "protected", "public", "register",
      "reinterpret_cast", "requires", "return", "short", "signed", "sizeof", "static",
      "static_assert", "static_cast", "struct", "switch", "template", "this", "thread_local",
      "throw", "true", "try", "typedef", "typeid", "typename", "union", "unsigned", "using",
      "virtual", "void", "volatile", "wchar_t", "while", "xor", "xor_eq", "defined"};
  static const std::set<std::string> cuda = {"threadIdx", "blockIdx", "blockDim", "gridDim",
                                             "warpSize",  "dim3",     "NULL"};
  if (keywords.count(name)) return "a C++ keyword";
  if (name.starts_with("__") || (name.size() > 1 && name[0] == '_' && std::isupper(static_cast<unsigned char>(name[1]))))
    return "reserved to the compiler (names starting with __ or _ and a capital, such as "
           "__global__ and __CUDA_ARCH__)";
  if (cuda.count(name)) return "a CUDA built-in name";
  return {};
}

// Whether `source` declares `entry` as a kernel the driver can find by name:
// `extern "C" __global__ ... entry(`, or `__global__ ... entry(` inside an
// `extern "C" {` block.  A textual check (comments are not stripped): it
// catches a misspelt or missing entry, whose every compile would otherwise
// fail with a misleading message.
bool declares_kernel(std::string_view source, const std::string& entry) {
  for (std::size_t at = source.find(entry); at != std::string_view::npos;
       at = source.find(entry, at + 1)) {
    std::size_t end = at + entry.size();
    if ((at > 0 && is_name_char(source[at - 1])) || (end < source.size() && is_name_char(source[end])))
      continue;
    while (end < source.size() && std::isspace(static_cast<unsigned char>(source[end]))) ++end;
    if (end == source.size() || source[end] != '(') continue;
    std::size_t start = source.find_last_of(";{}", at);
    std::string_view declaration =
        source.substr(start == std::string_view::npos ? 0 : start + 1,
                      at - (start == std::string_view::npos ? 0 : start + 1));
    if (declaration.find("__global__") == std::string_view::npos) continue;
    if (declaration.find("extern \"C\"") != std::string_view::npos) return true;
    std::size_t block = source.rfind("extern \"C\"", at);
    if (block != std::string_view::npos && source.find_first_not_of(" \t\r\n", block + 10) == start &&
        source[start] == '{')
      return true;
  }
  return false;
}

// Scope of an expression: which names it may read.
enum class Scope { shape_only, full };

class Reader {
 public:
  Reader(std::string_view text, std::string file_name, fs::path base_dir, bool check_defaults)
      : text_(text), base_dir_(std::move(base_dir)), check_defaults_(check_defaults),
        space_(std::make_unique<SearchSpace::Impl>()) {
    space_->file_name = std::move(file_name);
    space_->base_dir = base_dir_;
    space_->text = std::string(text);
  }

  std::unique_ptr<SearchSpace::Impl> read();

 private:
  // ---- locations and errors ----
  SourceLocation at(const YAML::Mark& mark) const {
    if (mark.line < 0) return SourceLocation{space_->file_name, 1, 1};
    return SourceLocation{space_->file_name, mark.line + 1, mark.column + 1};
  }
  SourceLocation at(const YAML::Node& node) const { return at(node.Mark()); }
  // A value's location, or its key's when the value is empty (yaml-cpp puts
  // an empty value's mark on the next token).
  SourceLocation at(const Entry& entry) const {
    return entry.value.IsNull() ? at(entry.key) : at(entry.value);
  }
  [[noreturn]] void fail(const SourceLocation& where, const std::string& message) const {
    throw InputError(where, message);
  }
  static std::string line_col(const SourceLocation& where) {
    return fmt::format("line {}, column {}", where.line, where.column);
  }
  // The location of character `offset` of a scalar's value, when the scalar
  // is written verbatim (plain or simply quoted) on its line.
  SourceLocation inside(const YAML::Node& node, std::size_t offset) const {
    SourceLocation where = at(node);
    const YAML::Mark mark = node.Mark();
    if (mark.pos < 0 || static_cast<std::size_t>(mark.pos) >= text_.size()) return where;
    std::size_t pos = static_cast<std::size_t>(mark.pos);
    int quote = (text_[pos] == '"' || text_[pos] == '\'') ? 1 : 0;
    const std::string& scalar = node.Scalar();
    if (text_.compare(pos + quote, scalar.size(), scalar) == 0 &&
        scalar.find('\n') == std::string::npos)
      where.column += quote + static_cast<int>(offset);
    return where;
  }

  // ---- structure ----
  std::map<std::string, Entry> map(const YAML::Node& node, const SourceLocation& where,
                                   const std::string& what, const std::vector<std::string>& allowed,
                                   const std::vector<std::string>& required) const {
    if (!node.IsMap())
      fail(where, fmt::format("{} must be a map (key: value); found {}", what, node_kind(node)));
    std::map<std::string, Entry> out;
    for (auto it = node.begin(); it != node.end(); ++it) {
      const YAML::Node key = it->first;  // copies: the iterator yields temporaries
      if (!key.IsScalar())
        fail(at(key), fmt::format("a key of {} must be a name; found {}", what, node_kind(key)));
      const std::string name = key.Scalar();
      if (auto previous = out.find(name); previous != out.end())
        fail(at(key), fmt::format("duplicate key '{}' in {} (first at {}); expected each key once",
                                  name, what, line_col(at(previous->second.key))));
      if (!allowed.empty() && std::find(allowed.begin(), allowed.end(), name) == allowed.end())
        fail(at(key), fmt::format("unknown key '{}' in {}; expected one of: {}", name, what,
                                  fmt::join(allowed, ", ")));
      out.emplace(name, Entry{key, it->second});
    }
    for (const std::string& name : required)
      if (!out.count(name)) fail(where, fmt::format("missing required key '{}' in {}", name, what));
    return out;
  }

  const YAML::Node& list(const Entry& entry, const std::string& what) const {
    if (!entry.value.IsSequence())
      fail(at(entry),
           fmt::format("{} must be a list [a, b, ...]; found {}", what, node_kind(entry.value)));
    return entry.value;
  }

  std::string scalar(const YAML::Node& node, const SourceLocation& where,
                     const std::string& what) const {
    if (!node.IsScalar())
      fail(where, fmt::format("{} must be a single value; found {}", what, node_kind(node)));
    return node.Scalar();
  }
  std::string scalar(const Entry& entry, const std::string& what) const {
    return scalar(entry.value, at(entry), what);
  }

  std::string identifier(const YAML::Node& node, const SourceLocation& where,
                         const std::string& what) const {
    std::string name = scalar(node, where, what);
    if (!is_identifier(name))
      fail(where, fmt::format("{} '{}' is not a valid name; expected letters, digits and '_', "
                              "not starting with a digit, at most {} characters",
                              what, name, kMaxNameLength));
    return name;
  }

  std::int64_t positive_integer(const YAML::Node& node, const std::string& what) const {
    std::string text = scalar(node, at(node), what);
    std::int64_t value = 0;
    auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
    if (ec != std::errc() || end != text.data() + text.size() || value <= 0)
      fail(at(node), fmt::format("{} is '{}'; expected a positive integer", what, text));
    return value;
  }

  double positive_number(const Entry& entry, const std::string& what) const {
    std::string text = scalar(entry, what);
    char* end = nullptr;
    double value = text.empty() ? 0.0 : std::strtod(text.c_str(), &end);
    if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value) || value <= 0)
      fail(at(entry),
           fmt::format("{} is '{}'; expected a positive number such as 1e-5", what, text));
    return value;
  }

  // ---- names ----
  void claim_name(const std::string& name, const std::string& kind, const SourceLocation& where) {
    static const std::set<std::string> reserved = {"min",  "max", "ceil",   "floor", "sqrt",
                                                   "abs",  "bucket", "true", "false"};
    if (reserved.count(name))
      fail(where, fmt::format("{} '{}' is a reserved word (functions min max ceil floor sqrt abs "
                              "bucket, true, false); expected another name",
                              kind, name));
    if (auto it = names_.find(name); it != names_.end())
      fail(where,
           fmt::format("{} '{}' collides with the {} '{}' at {}; shape variables, parameters "
                       "and named values need distinct names",
                       kind, name, it->second.first, name, line_col(it->second.second)));
    names_.emplace(name, std::make_pair(kind, where));
  }

  // ---- expressions ----
  Expression expression(const YAML::Node& node, const SourceLocation& where,
                        const std::string& what, Scope scope) {
    std::string text = scalar(node, where, what);
    std::vector<std::string> used;
    try {
      used = analyze_expression(text, space_->symbols);
    } catch (const ExpressionSyntaxError& error) {
      fail(node.IsNull() ? where : inside(node, error.offset),
           fmt::format("in {} '{}': {}", what, text, error.what()));
    }
    const auto& shape_vars = space_->shape_variables;
    std::string evaluated = text;
    std::vector<std::string> depends;
    for (const std::string& name : used) {
      SourceLocation name_at = inside(node, find_identifier(text, name));
      if (const CompiledValue* c = compiled_named(name)) {
        if (scope == Scope::shape_only && c->reads_parameters)
          fail(name_at, fmt::format("{} '{}' reads {}, which depends on parameters ({}); it may "
                                    "use shape variables only ({})",
                                    what, text, name, c->value.text(), fmt::join(shape_vars, ", ")));
        evaluated = inline_identifier(evaluated, name, "(" + c->value.text() + ")");
        for (const std::string& v : c->value.variables()) depends.push_back(v);
        continue;
      }
      depends.push_back(name);
      bool is_shape = std::find(shape_vars.begin(), shape_vars.end(), name) != shape_vars.end();
      bool is_parameter = std::any_of(space_->parameters.begin(), space_->parameters.end(),
                                      [&](const Parameter& p) { return p.name == name; });
      if (!is_shape && !is_parameter) {
        if (scope == Scope::shape_only)
          fail(name_at, fmt::format("unknown name '{}' in {} '{}'; expected a shape variable ({})",
                                    name, what, text, fmt::join(shape_vars, ", ")));
        std::vector<std::string> parameter_names;
        for (const Parameter& p : space_->parameters) parameter_names.push_back(p.name);
        std::string compiled_names;
        for (const CompiledValue& c : space_->compiled) compiled_names += ", SHAPE_" + c.name;
        fail(name_at, fmt::format("unknown name '{}' in {} '{}'; expected a shape variable ({}), a "
                                  "parameter ({}){}{} or a named value",
                                  name, what, text, fmt::join(shape_vars, ", "),
                                  fmt::join(parameter_names, ", "),
                                  compiled_names.empty() ? "" : ", a compiled value",
                                  compiled_names.empty() ? "" : " (" + compiled_names.substr(2) + ")"));
      }
      if (is_parameter && scope == Scope::shape_only)
        fail(name_at,
             fmt::format("{} '{}' uses parameter '{}'; it may use shape variables only ({})", what,
                         text, name, fmt::join(shape_vars, ", ")));
    }
    // Variables as the evaluator sees them: a compiled value counts as what
    // its expression reads.
    std::vector<std::string> variables;
    for (const std::string& v : depends)
      if (std::find(variables.begin(), variables.end(), v) == variables.end()) variables.push_back(v);
    return make_expression(text, evaluated, where, std::move(variables));
  }

  Expression make_expression(const std::string& text, const std::string& evaluated,
                             const SourceLocation& where, std::vector<std::string> variables) {
    Expression e;
    SearchSpace::Impl::of(e).text = text;
    SearchSpace::Impl::of(e).where = where;
    SearchSpace::Impl::of(e).variables = std::move(variables);
    SearchSpace::Impl::of(e).id = space_->expression_texts.size();
    space_->expression_texts.push_back(evaluated);
    return e;
  }

  // The compiled value an expression names as SHAPE_<name>, if any.
  const CompiledValue* compiled_named(const std::string& name) const {
    if (!name.starts_with("SHAPE_")) return nullptr;
    for (const CompiledValue& c : space_->compiled)
      if ("SHAPE_" + c.name == name) return &c;
    return nullptr;
  }

  // Offset of the first whole-word occurrence of `name` in `text`, if any.
  static std::optional<std::size_t> identifier_offset(const std::string& text,
                                                      const std::string& name) {
    std::size_t at = find_identifier(text, name);
    if (text.compare(at, name.size(), name) != 0) return std::nullopt;
    if (at + name.size() < text.size() && is_name_char(text[at + name.size()])) return std::nullopt;
    return at;
  }

  // `text` with every whole-word occurrence of identifier `name` replaced.
  static std::string inline_identifier(const std::string& text, const std::string& name,
                                       const std::string& replacement) {
    std::string out;
    std::size_t i = 0;
    while (i < text.size()) {
      if (!is_name_char(text[i])) {
        out += text[i++];
        continue;
      }
      std::size_t end = i;
      while (end < text.size() && is_name_char(text[end])) ++end;
      std::string word = text.substr(i, end - i);
      out += word == name ? replacement : word;
      i = end;
    }
    return out;
  }

  Expression constant_zero(const SourceLocation& where) {
    return make_expression("0", "0", where, {});
  }

  // ---- sections ----
  void read_shape(const Entry& entry);
  void read_compiled_list(const Entry& entry);
  void read_compiled_map();
  void add_compiled_check(CompiledValue& c);
  void read_parameters(const Entry& entry);
  void read_arguments(const Entry& entry);
  void read_constraints(const Entry& entry);
  void read_requires(const Entry& entry);
  void read_geometry(KernelSource& source, const std::map<std::string, Entry>& keys,
                     const std::string& section, const SourceLocation& where, Scope scope);
  void read_default(const Entry& entry);
  void read_fallbacks(const Entry& entry);
  Config config_map(const YAML::Node& node, const SourceLocation& where, const std::string& what,
                    const std::string& value_what) const;
  /// The index of parameter `name`; else fails at `entry`'s key: "<what>
  /// names unknown parameter ...".
  std::size_t parameter_named(const std::string& name, const Entry& entry, const std::string& what) const;
  void read_prologue(const Entry& entry);
  void read_tolerance(const Entry& entry);
  std::string read_template(const Entry& entry, fs::path* resolved);
  void check_default_shapes();
  void check_arguments_at(ExpressionEvaluator& evaluator, const std::string& shape_text);
  /// Why something cannot run at a default shape; `reads_shape`: whether
  /// the expression at fault depends on the shape at all.
  struct Failure {
    SourceLocation where;
    std::string message;
    bool reads_shape = true;
    bool fatal = false;  // wrong at any config and shape: a broken expression
  };
  bool reads_shape(const Expression& e) const;
  std::optional<Failure> launch_failure(const KernelSource& source, const std::string& what,
                                        ExpressionEvaluator& evaluator,
                                        const std::string& shape_text) const;
  std::optional<Failure> compiled_value_failure(ExpressionEvaluator& evaluator,
                                                const std::string& config_text,
                                                const std::string& shape_text) const;
  std::optional<Failure> default_config_failure(ExpressionEvaluator& evaluator,
                                                const std::string& shape_text) const;
  void check_entry(const std::string& entry, const std::string& what, const SourceLocation& where,
                   const std::string& source, const fs::path& path) const;
  YAML::Node load_single_document() const;
  int second_document_line() const;

  std::string_view text_;
  fs::path base_dir_;
  bool check_defaults_;
  std::unique_ptr<SearchSpace::Impl> space_;
  std::map<std::string, std::pair<std::string, SourceLocation>> names_;
  std::vector<std::pair<std::size_t, std::vector<SourceLocation>>> pending_values_;
  std::optional<SourceLocation> first_workspace_;  // the role of the first workspace argument
  SourceLocation reference_entry_at_;
  std::optional<Entry> compiled_map_;  // read once the parameters are known
};

void Reader::read_shape(const Entry& entry) {
  auto keys = map(entry.value, at(entry), "'shape'", {"variables", "compiled", "defaults"},
                  {"variables", "defaults"});
  const YAML::Node& variables = list(keys.at("variables"), "'shape.variables'");
  space_->shape_variables_where = at(keys.at("variables"));
  if (variables.size() == 0)
    fail(at(keys.at("variables")), "'shape.variables' is empty; expected at least one variable");
  for (const YAML::Node& v : variables) {
    std::string name = identifier(v, at(v), "shape variable");
    claim_name(name, "shape variable", at(v));
    space_->shape_variables.push_back(name);
  }
  if (auto it = keys.find("compiled"); it != keys.end() && !it->second.value.IsNull()) {
    if (it->second.value.IsMap())
      compiled_map_ = it->second;  // its expressions may read parameters, not read yet
    else
      read_compiled_list(it->second);
  }
  const Entry& defaults = keys.at("defaults");
  const YAML::Node& shapes = list(defaults, "'shape.defaults'");
  if (shapes.size() == 0)
    fail(at(defaults), "'shape.defaults' is empty; expected at least one shape");
  for (const YAML::Node& s : shapes) {
    auto values = map(s, at(s), "a default shape", space_->shape_variables, {});
    Shape shape;
    for (const std::string& name : space_->shape_variables) {
      auto it = values.find(name);
      if (it == values.end())
        fail(at(s), fmt::format("default shape lacks shape variable '{}'; expected a value for "
                                "each of: {}",
                                name, fmt::join(space_->shape_variables, ", ")));
      shape.values.push_back(
          positive_integer(it->second.value, fmt::format("shape variable '{}'", name)));
    }
    space_->default_shapes.push_back(std::move(shape));
  }
}

// `compiled: [H, D]`: SHAPE_H = H, SHAPE_D = D.
void Reader::read_compiled_list(const Entry& entry) {
  for (const YAML::Node& v : list(entry, "'shape.compiled' (a list of shape variables, or a map "
                                         "from name to expression)")) {
    std::string name = identifier(v, at(v), "compiled shape variable");
    const auto& vars = space_->shape_variables;
    if (std::find(vars.begin(), vars.end(), name) == vars.end())
      fail(at(v),
           fmt::format("compiled shape variable '{}' is not a shape variable; expected one "
                       "of: {}",
                       name, fmt::join(vars, ", ")));
    auto& compiled = space_->compiled_shape_variables;
    if (std::find(compiled.begin(), compiled.end(), name) != compiled.end())
      fail(at(v), fmt::format("shape variable '{}' is listed twice in 'shape.compiled'", name));
    compiled.push_back(name);
    claim_name("SHAPE_" + name, "compiled value", at(v));
    CompiledValue c;
    c.name = name;
    c.value = make_expression(name, name, at(v), {name});
    space_->compiled.push_back(std::move(c));
  }
}

// `compiled: {D: "expression"}`: SHAPE_D = the expression, over shape
// variables and parameters (not other compiled values, so none reads itself).
void Reader::read_compiled_map() {
  SearchSpace::Impl& s = *space_;
  s.compiled_as_map = true;
  auto keys = map(compiled_map_->value, at(*compiled_map_), "'shape.compiled'", {}, {});
  // File order (the map above is sorted by name); every name first, so that
  // a value that reads any of them is recognized.
  std::vector<Entry> entries;
  for (auto it = compiled_map_->value.begin(); it != compiled_map_->value.end(); ++it) {
    Entry e{it->first, it->second};
    std::string name = identifier(e.key, at(e.key), "compiled value name");
    claim_name("SHAPE_" + name, "compiled value", at(e.key));
    s.compiled_shape_variables.push_back(name);
    entries.push_back(e);
  }
  for (const Entry& e : entries) {
    const std::string name = e.key.Scalar();
    const std::string what = fmt::format("compiled value '{}'", name);
    const std::string text = scalar(e, what);
    for (const std::string& other : s.compiled_shape_variables)
      if (auto offset = identifier_offset(text, "SHAPE_" + other))
        fail(inside(e.value, *offset),
             fmt::format("{} '{}' reads SHAPE_{}; a compiled value may read shape variables "
                         "and parameters only{}",
                         what, text, other, other == name ? " (it would read itself)" : ""));
    CompiledValue c;
    c.name = name;
    c.value = expression(e.value, at(e), what, Scope::full);
    const auto& vars = c.value.variables();
    c.reads_parameters = std::any_of(vars.begin(), vars.end(), [&](const std::string& v) {
      return std::find(s.shape_variables.begin(), s.shape_variables.end(), v) ==
             s.shape_variables.end();
    });
    add_compiled_check(c);
    s.compiled.push_back(std::move(c));
  }
}

void Reader::add_compiled_check(CompiledValue& c) {
  const std::string v = "(" + c.value.text() + ")";
  c.check = make_expression(
      fmt::format("SHAPE_{} = {} is an integer in [0, 2147483647]", c.name, c.value.text()),
      fmt::format("{0} >= 0 && {0} <= 2147483647 && {0} == floor({0})", v), c.value.where(),
      c.value.variables());
}

void Reader::read_parameters(const Entry& entry) {
  map(entry.value, at(entry), "'parameters'", {}, {});  // a map without duplicate names
  space_->parameters_where = at(entry.key);
  // Keys in file order (the map above is sorted by name).
  for (auto it = entry.value.begin(); it != entry.value.end(); ++it) {
    const YAML::Node key = it->first;
    Parameter p;
    p.name = identifier(key, at(key), "parameter name");
    // Every parameter reaches the kernel as -DNAME=value.
    if (std::string conflict = macro_name_conflict(p.name); !conflict.empty())
      fail(at(key), fmt::format("parameter name '{}' is {}, so -D{}=... would break the kernel "
                                "source; expected another name",
                                p.name, conflict, p.name));
    p.where = at(key);
    claim_name(p.name, "parameter", p.where);
    Entry e{key, it->second};
    if (!e.value.IsSequence())
      fail(at(e), fmt::format("parameter '{}' must be a list of values like [1, 2, 4]; found {}",
                              p.name, node_kind(e.value)));
    if (e.value.size() == 0)
      fail(at(e), fmt::format("parameter '{}' has no values; expected a non-empty list", p.name));
    std::vector<SourceLocation> value_at;
    static const char* kind_names[] = {"an integer", "a boolean", "a name"};
    for (const YAML::Node& v : e.value) {
      std::string text = scalar(v, at(v), fmt::format("a value of parameter '{}'", p.name));
      ValueKind kind;
      std::int64_t numeric = 0;
      if (text == "true" || text == "false") {
        kind = ValueKind::boolean;
        numeric = text == "true";
      } else if (!text.empty() &&
                 (std::isdigit(static_cast<unsigned char>(text[0])) || text[0] == '-')) {
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), numeric);
        if (ec != std::errc() || end != text.data() + text.size())
          fail(at(v), fmt::format("value '{}' of parameter '{}' is not an integer (or is out of "
                                  "range); expected an integer, true/false or a name",
                                  text, p.name));
        kind = ValueKind::integer;
      } else if (is_identifier(text)) {
        kind = ValueKind::name;
        numeric = static_cast<std::int64_t>(p.text.size());
      } else {
        fail(at(v), fmt::format("value '{}' of parameter '{}' is not an integer, a boolean or a "
                                "name; expected one of those (a name of at most {} characters)",
                                text, p.name, kMaxNameLength));
      }
      if (p.text.empty()) {
        p.kind = kind;
      } else if (kind != p.kind) {
        fail(at(v), fmt::format("value '{}' of parameter '{}' is {} but its first value is {}; "
                                "expected all values of one kind",
                                text, p.name, kind_names[static_cast<int>(kind)],
                                kind_names[static_cast<int>(p.kind)]));
      }
      for (std::size_t i = 0; i < p.text.size(); ++i)
        if ((kind == ValueKind::name && p.text[i] == text) ||
            (kind != ValueKind::name && p.numeric[i] == numeric))
          fail(at(v), fmt::format("duplicate value '{}' in parameter '{}' (first at {}); expected "
                                  "distinct values",
                                  text, p.name, line_col(value_at[i])));
      p.text.push_back(text);
      p.numeric.push_back(numeric);
      value_at.push_back(at(v));
    }
    space_->parameters.push_back(std::move(p));
    // Named values are claimed after every parameter name (below), so that a
    // collision is reported at the value whichever comes first in the file.
    pending_values_.emplace_back(space_->parameters.size() - 1, value_at);
  }
  for (const auto& [index, locations] : pending_values_) {
    const Parameter& p = space_->parameters[index];
    if (p.kind != ValueKind::name) continue;
    for (std::size_t i = 0; i < p.text.size(); ++i)
      claim_name(p.text[i], fmt::format("named value of '{}'", p.name), locations[i]);
  }
}

void Reader::read_arguments(const Entry& entry) {
  const YAML::Node& arguments = list(entry, "'arguments'");
  if (arguments.size() == 0)
    fail(at(entry), "'arguments' is empty; expected the kernel's arguments");
  bool has_output = false;
  for (const YAML::Node& node : arguments) {
    auto keys = map(node, at(node), "an argument", {"name", "type", "role", "shape", "value"},
                    {"name", "type"});
    Argument a;
    a.where = at(node);
    a.name = identifier(keys.at("name").value, at(keys.at("name")), "argument name");
    for (const Argument& other : space_->arguments)
      if (other.name == a.name)
        fail(at(keys.at("name")),
             fmt::format("duplicate argument name '{}' (first at {}); expected "
                         "distinct names",
                         a.name, line_col(other.where)));
    const std::string what = fmt::format("argument '{}'", a.name);
    std::string type = scalar(keys.at("type"), what + " type");
    if (type == "float32")
      a.type = ElementType::float32;
    else if (type == "float64")
      a.type = ElementType::float64;
    else if (type == "int32")
      a.type = ElementType::int32;
    else if (type == "int64")
      a.type = ElementType::int64;
    else
      fail(at(keys.at("type")), fmt::format("unknown type '{}' of {}; expected one of: float32, "
                                            "float64, int32, int64",
                                            type, what));
    auto role = keys.find("role");
    auto shape = keys.find("shape");
    auto value = keys.find("value");
    if (value != keys.end()) {
      if (shape != keys.end())
        fail(at(shape->second.key), fmt::format("{} has both 'shape' and 'value'; expected 'value' "
                                                "for a scalar or 'shape' for a buffer",
                                                what));
      if (role != keys.end() && scalar(role->second, what + " role") != "scalar")
        fail(at(role->second), fmt::format("{} has a 'value', so it is a scalar; expected role "
                                           "'scalar' or no role",
                                           what));
      a.role = ArgumentRole::scalar;
      a.value =
          expression(value->second.value, at(value->second), what + " value", Scope::shape_only);
    } else {
      if (shape == keys.end())
        fail(a.where, fmt::format("{} has neither 'shape' (a buffer) nor 'value' (a scalar); "
                                  "expected one of them",
                                  what));
      if (role == keys.end())
        fail(a.where, fmt::format("missing required key 'role' in buffer {}; expected input or "
                                  "output",
                                  what));
      std::string r = scalar(role->second, what + " role");
      if (r == "input")
        a.role = ArgumentRole::input;
      else if (r == "output")
        a.role = ArgumentRole::output;
      else if (r == "workspace")
        a.role = ArgumentRole::workspace;
      else
        fail(at(role->second), fmt::format("unknown role '{}' of buffer {}; expected input, "
                                           "output or workspace",
                                           r, what));
      if (a.role == ArgumentRole::workspace && !first_workspace_)
        first_workspace_ = at(role->second);
      if (a.role == ArgumentRole::workspace && a.type != ElementType::float32)
        fail(at(keys.at("type")), fmt::format("workspace {} is {}; expected float32 (a workspace "
                                              "is filled with NaN before each check)",
                                              what, type));
      const YAML::Node& dims = list(shape->second, what + " shape");
      if (dims.size() == 0)
        fail(at(shape->second),
             fmt::format("{} shape is empty; expected at least one extent", what));
      for (const YAML::Node& d : dims)
        a.shape.push_back(expression(d, at(d), what + " shape", Scope::shape_only));
      has_output = has_output || a.role == ArgumentRole::output;
    }
    space_->arguments.push_back(std::move(a));
  }
  if (!has_output)
    fail(at(entry), "'arguments' has no output buffer; expected at least one (role: output)");
}

void Reader::read_constraints(const Entry& entry) {
  if (entry.value.IsNull()) return;
  for (const YAML::Node& node : list(entry, "'constraints'"))
    space_->constraints.push_back(expression(node, at(node), "constraint", Scope::full));
}

// `requires: {sm_90a: "ALGORITHM == wgmma"}`: architecture -> the configs
// that need it, in file order (the first entry that holds decides).
void Reader::read_requires(const Entry& entry) {
  if (entry.value.IsNull()) return;
  map(entry.value, at(entry), "'requires'", {}, {});  // a map, each key once
  for (auto it = entry.value.begin(); it != entry.value.end(); ++it) {
    const Entry e{it->first, it->second};
    const std::string name = e.key.Scalar();
    const std::optional<Architecture> arch = Architecture::parse(name);
    if (!arch)
      fail(at(e.key), fmt::format("'{}' in 'requires' is not a GPU architecture; expected sm_<number> with an "
                                  "optional a or f, such as sm_90a, mapped to the configs that need it",
                                  name));
    ArchitectureRequirement requirement{*arch, expression(e.value, at(e), "requires " + name, Scope::full),
                                        at(e.key)};
    const Expression::Impl& when = SearchSpace::Impl::of(requirement.when);
    space_->requirement_constraints.push_back(
        make_expression("", "!(" + space_->expression_texts[when.id] + ")", when.where, when.variables));
    space_->requirements.push_back(std::move(requirement));
  }
}

void Reader::read_geometry(KernelSource& source, const std::map<std::string, Entry>& keys,
                           const std::string& section, const SourceLocation& where, Scope scope) {
  for (const char* name : {"grid", "block"}) {
    const Entry& e = keys.at(name);
    const std::string what = fmt::format("{}.{}", section, name);
    const YAML::Node& dims = list(e, "'" + what + "'");
    if (dims.size() != 3)
      fail(at(e),
           fmt::format("'{}' has {} values; expected 3 expressions [x, y, z]", what, dims.size()));
    Expression* out = std::string(name) == "grid" ? source.grid : source.block;
    for (std::size_t i = 0; i < 3; ++i) out[i] = expression(dims[i], at(dims[i]), what, scope);
  }
  if (auto it = keys.find("shared_memory"); it != keys.end())
    source.shared_bytes =
        expression(it->second.value, at(it->second), section + ".shared_memory", scope);
  else
    source.shared_bytes = constant_zero(where);
}

void Reader::read_default(const Entry& entry) {
  space_->default_config = config_map(entry.value, at(entry), "'default'", "default value");
}

// Every fallback names a value of every parameter, like `default`; whether
// it can run a given shape is the dispatcher's question, not the file's.
void Reader::read_fallbacks(const Entry& entry) {
  for (const YAML::Node& item : list(entry, "'fallbacks'"))
    space_->fallbacks.push_back(config_map(item, at(item), "a fallback", "fallback value"));
}

// `what` names the map in messages ("'default'"), `value_what` one of its
// values ("default value").
std::size_t Reader::parameter_named(const std::string& name, const Entry& entry, const std::string& what) const {
  for (std::size_t i = 0; i < space_->parameters.size(); ++i)
    if (space_->parameters[i].name == name) return i;
  std::vector<std::string> names;
  for (const Parameter& p : space_->parameters) names.push_back(p.name);
  fail(at(entry.key), fmt::format("{} names unknown parameter '{}'; expected one of: {}", what, name,
                                  fmt::join(names, ", ")));
}

Config Reader::config_map(const YAML::Node& node, const SourceLocation& where,
                          const std::string& what, const std::string& value_what) const {
  std::vector<std::string> names;
  for (const Parameter& p : space_->parameters) names.push_back(p.name);
  auto keys = map(node, where, what, {}, {});
  Config config;
  config.choice.assign(space_->parameters.size(), 0);
  for (const auto& [name, e] : keys) {
    const std::size_t index = parameter_named(name, e, what);
    const Parameter& p = space_->parameters[index];
    std::string text = scalar(e, fmt::format("{} of '{}'", value_what, name));
    std::size_t choice = p.text.size();
    for (std::size_t i = 0; i < p.text.size(); ++i) {
      if (p.text[i] == text) choice = i;
      std::int64_t n = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
      if (p.kind == ValueKind::integer && ec == std::errc() && end == text.data() + text.size() &&
          n == p.numeric[i])
        choice = i;
    }
    if (choice == p.text.size())
      fail(at(e), fmt::format("{} '{}' of '{}' is not one of its values; expected one of: {}",
                              value_what, text, name, fmt::join(p.text, ", ")));
    config.choice[index] = static_cast<std::uint32_t>(choice);
  }
  for (const std::string& name : names)
    if (!keys.count(name))
      fail(where, fmt::format("{} lacks parameter '{}'; expected a value for every parameter", what,
                              name));
  return config;
}

void Reader::read_prologue(const Entry& entry) {
  auto keys = map(entry.value, at(entry), "'prologue'",
                  {"entry", "when", "grid", "block", "shared_memory", "apart"}, {"entry", "grid", "block"});
  PrologueSource prologue;
  prologue.kernel.entry =
      identifier(keys.at("entry").value, at(keys.at("entry")), "prologue entry point");
  prologue.kernel.where = at(keys.at("entry"));
  if (prologue.kernel.entry == space_->kernel.entry)
    fail(at(keys.at("entry")),
         fmt::format("prologue entry '{}' is the main entry point; expected another extern \"C\" "
                     "__global__ function of the same template",
                     prologue.kernel.entry));
  if (auto it = keys.find("when"); it != keys.end())
    prologue.when = expression(it->second.value, at(it->second), "prologue.when", Scope::full);
  read_geometry(prologue.kernel, keys, "prologue", at(entry), Scope::full);
  if (auto it = keys.find("apart"); it != keys.end()) {
    const Entry& apart_entry = it->second;
    auto apart_keys = map(apart_entry.value, at(apart_entry), "'prologue.apart'", {"when", "as"}, {});
    PrologueSource::Apart apart;
    apart.where = at(apart_entry);
    if (auto w = apart_keys.find("when"); w != apart_keys.end())
      apart.when = expression(w->second.value, at(w->second), "prologue.apart.when", Scope::full);
    if (auto a = apart_keys.find("as"); a != apart_keys.end() && !a->second.value.IsNull()) {
      auto values = map(a->second.value, at(a->second), "'prologue.apart.as'", {}, {});
      for (const auto& [name, e] : values) {
        apart.as.emplace_back(parameter_named(name, e, "prologue.apart.as"),
                              expression(e.value, at(e), fmt::format("prologue.apart.as value of '{}'", name),
                                         Scope::full));
      }
    }
    prologue.apart = std::move(apart);
  }
  space_->prologue = std::move(prologue);
}

void Reader::read_tolerance(const Entry& entry) {
  if (entry.value.IsNull()) return;
  auto keys = map(entry.value, at(entry), "'tolerance'", {"relative_l2", "max_abs"}, {});
  if (auto it = keys.find("relative_l2"); it != keys.end()) {
    space_->tolerance.relative_l2 = positive_number(it->second, "tolerance.relative_l2");
    // An error as large as the reference itself: an all-zero output passes.
    if (space_->tolerance.relative_l2 > 1)
      fail(at(it->second), fmt::format("tolerance.relative_l2 is '{}', which accepts an output "
                                       "as far from the reference as zero is; expected at most 1",
                                       it->second.value.Scalar()));
  }
  if (auto it = keys.find("max_abs"); it != keys.end())
    space_->tolerance.max_abs = positive_number(it->second, "tolerance.max_abs");
}

std::string Reader::read_template(const Entry& entry, fs::path* resolved) {
  std::string name = scalar(entry, "template path");
  if (name.empty()) fail(at(entry), "template path is empty; expected a .cu file");
  fs::path path = fs::path(name).is_absolute() ? fs::path(name) : base_dir_ / name;
  *resolved = path.lexically_normal();
  std::error_code ec;
  if (fs::exists(*resolved, ec))
    if (std::string why = unreadable_text_file_reason(*resolved); !why.empty())
      fail(at(entry), fmt::format("template '{}' ({}) {}; expected a .cu file", name,
                                  resolved->string(), why));
  std::string text;
  try {
    text = load_text_file(*resolved).text;
  } catch (const InputError&) {
    fail(at(entry), fmt::format("template file '{}' not found (looked for {}, and this mlatune "
                                "build has no embedded copy); expected a path relative to the "
                                "space file",
                                name, resolved->string()));
  } catch (const EnvironmentError& error) {
    throw EnvironmentError(
        fmt::format("{}: cannot read template '{}': {}", at(entry).str(), name, error.what()));
  }
  return inline_template_includes(text, *resolved);
}

void Reader::check_entry(const std::string& entry, const std::string& what,
                         const SourceLocation& where, const std::string& source,
                         const fs::path& path) const {
  if (!declares_kernel(source, entry))
    fail(where, fmt::format("{} '{}' is not declared in {}; expected extern \"C\" __global__ "
                            "void {}(...) there",
                            what, entry, path.string(), entry));
}

// What can be known before any config runs is checked at the default
// shapes: buffer extents, scalar values and the reference launch (shape only)
// at each; and that the default config can run.  The default may be invalid
// at some shapes (the dispatcher then falls back to the first valid config),
// but not at every default shape, nor by a constraint or launch expression
// that reads no shape variable (then it is invalid at every shape).
void Reader::check_default_shapes() {
  SearchSpace::Impl& s = *space_;
  std::optional<std::pair<SourceLocation, std::string>> first_default_failure;
  std::size_t default_failures = 0;
  for (const Shape& shape : s.default_shapes) {
    auto evaluator = s.lease();
    s.bind_shape(*evaluator, shape);
    std::string shape_text;
    for (std::size_t i = 0; i < shape.values.size(); ++i)
      shape_text += fmt::format("{}{}={}", i ? "," : "", s.shape_variables[i], shape.values[i]);
    check_arguments_at(*evaluator, shape_text);
    if (auto failure = launch_failure(s.reference, "reference", *evaluator, shape_text))
      fail(failure->where, failure->message);
    // A compiled value that is never an integer leaves no valid config:
    // report the expression rather than "no valid config" below.
    s.bind_config(*evaluator, s.default_config);
    if (auto failure = compiled_value_failure(*evaluator, "", shape_text); failure && failure->fatal)
      fail(failure->where, failure->message);
    if (!s.any_valid(shape)) {
      std::uint64_t removed = 0;
      std::size_t c = s.most_restrictive(shape, &removed);
      if (c == std::string::npos)  // only possible with a constraint-free space: cannot be empty
        fail(SourceLocation{s.file_name}, fmt::format("no valid config for shape {}", shape_text));
      const Expression& worst = s.constraints[c];
      fail(worst.where(), fmt::format("no valid config for default shape {}: the constraints leave "
                                      "none; '{}' removes the most ({} of {}); expected at least "
                                      "one valid config",
                                      shape_text, worst.text(), count_text(removed),
                                      count_text(s.raw_count)));
    }
    if (auto failure = default_config_failure(*evaluator, shape_text)) {
      if (!failure->reads_shape) fail(failure->where, failure->message);
      ++default_failures;
      if (!first_default_failure) first_default_failure.emplace(failure->where, failure->message);
    }
  }
  if (first_default_failure && default_failures == s.default_shapes.size())
    fail(first_default_failure->first,
         first_default_failure->second + " (and at every other default shape)");
}

void Reader::check_arguments_at(ExpressionEvaluator& evaluator, const std::string& shape_text) {
  for (const Argument& a : space_->arguments) {
    for (const Expression& e : a.shape) {
      double v = evaluator.evaluate(SearchSpace::Impl::of(e).id);
      if (!std::isfinite(v) || v != std::floor(v) || v < 0)
        fail(e.where(), fmt::format("extent '{}' of argument '{}' is {} at default shape {}; "
                                    "expected a non-negative integer",
                                    e.text(), a.name, v, shape_text));
    }
    if (!a.value) continue;
    double v = evaluator.evaluate(SearchSpace::Impl::of(*a.value).id);
    if (std::string problem = scalar_value_problem(a, v); !problem.empty())
      fail(a.value->where(), fmt::format("value '{}' of scalar argument '{}' {} at default shape {}",
                                         a.value->text(), a.name, problem, shape_text));
  }
}

bool Reader::reads_shape(const Expression& e) const {
  const auto& vars = space_->shape_variables;
  return std::any_of(e.variables().begin(), e.variables().end(), [&](const std::string& name) {
    return std::find(vars.begin(), vars.end(), name) != vars.end();
  });
}

std::optional<Reader::Failure> Reader::launch_failure(const KernelSource& source,
                                                      const std::string& what,
                                                      ExpressionEvaluator& evaluator,
                                                      const std::string& shape_text) const {
  const Expression* culprit = nullptr;
  LaunchGeometry g = evaluate_launch(source, evaluator, &culprit);
  if (g.valid()) return std::nullopt;
  return Failure{culprit->where(),
                 fmt::format("{} launch cannot run at default shape {}: {}; expected a launch that "
                             "is valid there",
                             what, shape_text, g.invalid_reason),
                 reads_shape(*culprit)};
}

std::optional<Reader::Failure> Reader::default_config_failure(ExpressionEvaluator& evaluator,
                                                              const std::string& shape_text) const {
  SearchSpace::Impl& s = *space_;
  s.bind_config(evaluator, s.default_config);
  std::string config_text;
  for (std::size_t i = 0; i < s.parameters.size(); ++i)
    config_text += fmt::format("{}{}={}", i ? "," : "", s.parameters[i].name,
                               s.parameters[i].text[s.default_config.choice[i]]);
  if (auto failure = compiled_value_failure(evaluator, config_text, shape_text)) return failure;
  for (const Expression& constraint : s.constraints)
    if (!SearchSpace::Impl::holds(evaluator.evaluate(SearchSpace::Impl::of(constraint).id)))
      return Failure{constraint.where(),
                     fmt::format("the default config ({}) breaks constraint '{}' at default shape "
                                 "{}; expected a 'default' that satisfies every constraint there",
                                 config_text, constraint.text(), shape_text),
                     reads_shape(constraint)};
  const std::string with = "default config (" + config_text + "): its";
  if (auto failure = launch_failure(s.kernel, with, evaluator, shape_text)) return failure;
  if (s.prologue && (!s.prologue->when || SearchSpace::Impl::holds(evaluator.evaluate(
                                              SearchSpace::Impl::of(*s.prologue->when).id))))
    return launch_failure(s.prologue->kernel, with + " prologue", evaluator, shape_text);
  return std::nullopt;
}

// A compiled value that is a finite non-integer (or negative) is a broken
// expression: fatal.  NaN (bucket() past its last bucket) only means that
// the default config cannot compile this shape.
std::optional<Reader::Failure> Reader::compiled_value_failure(ExpressionEvaluator& evaluator,
                                                              const std::string& config_text,
                                                              const std::string& shape_text) const {
  for (const CompiledValue& c : space_->compiled) {
    if (!c.check) continue;
    const double v = evaluator.evaluate(SearchSpace::Impl::of(c.value).id);
    if (SearchSpace::Impl::holds(evaluator.evaluate(SearchSpace::Impl::of(*c.check).id))) continue;
    if (std::isfinite(v))
      return Failure{c.value.where(),
                     fmt::format("compiled value SHAPE_{} = '{}' is {} for the default config at "
                                 "default shape {}; expected an integer in [0, 2147483647]",
                                 c.name, c.value.text(), v, shape_text),
                     false, true};
    return Failure{c.value.where(),
                   fmt::format("the default config ({}) cannot compile default shape {}: compiled "
                               "value SHAPE_{} = '{}' is {}; expected an integer there",
                               config_text, shape_text, c.name, c.value.text(), v),
                   reads_shape(c.value)};
  }
  return std::nullopt;
}

// Line (1-based) of the marker that starts the second YAML document: a
// `---` at the start of a line, not counting one that opens the file (before
// any content), or the first content after a `...` end marker.
int Reader::second_document_line() const {
  bool content = false, ended = false;
  int line = 0;
  std::size_t start = 0;
  while (start < text_.size()) {
    std::size_t end = text_.find('\n', start);
    if (end == std::string_view::npos) end = text_.size();
    std::string_view row = text_.substr(start, end - start);
    ++line;
    start = end + 1;
    auto marker = [&](std::string_view m) {
      return row.starts_with(m) && (row.size() == 3 || row[3] == ' ' || row[3] == '\t' ||
                                    row[3] == '\r');
    };
    std::size_t first = row.find_first_not_of(" \t\r");
    bool blank = first == std::string_view::npos || row[first] == '#';
    if (marker("---")) {
      if (content || ended) return line;
      content = true;  // an explicit start of the first document
    } else if (marker("...")) {
      ended = true;
    } else if (!blank && row[0] != '%') {
      if (ended) return line;
      content = true;
    }
  }
  return 0;  // one document
}

// The file's one YAML document.  yaml-cpp's Load would silently keep only
// the first of several, dropping whatever follows a stray `---`.
YAML::Node Reader::load_single_document() const {
  // YAML::LoadAll never returns on some malformed input (space_parse_fuzz
  // found one: tests/fuzz/regressions/space_parse/load_all_hang.yaml), so
  // the document is read with Load, and a second one is found in the text.
  YAML::Node document;
  try {
    document = YAML::Load(std::string(text_));
  } catch (const YAML::Exception& error) {
    std::string hint;
    if (error.msg.find("illegal map value") != std::string::npos)
      hint = " (a value that contains ': ', such as a ?: expression, must be quoted)";
    fail(at(error.mark), fmt::format("malformed YAML: {}{}", error.msg, hint));
  }
  if (int line = second_document_line(); line > 0)
    fail(SourceLocation{space_->file_name, line, 1},
         "a second YAML document starts here (after '---' or '...'); expected one document: "
         "remove the marker, or indent what follows it");
  return document;
}

std::unique_ptr<SearchSpace::Impl> Reader::read() {
  YAML::Node root = load_single_document();
  if (root.IsNull())
    fail(SourceLocation{space_->file_name, 1, 1},
         "the file is empty; expected a map with keys kernel, template, entry, reference, shape, "
         "arguments, parameters, default, launch");
  auto keys = map(root, at(root), "the space",
                  {"kernel", "template", "entry", "reference", "shape", "arguments", "parameters",
                   "default", "constraints", "launch", "prologue", "tolerance", "fallbacks",
                   "requires"},
                  {"kernel", "template", "entry", "reference", "shape", "arguments", "parameters",
                   "default", "launch"});
  SearchSpace::Impl& s = *space_;
  s.kernel_name = identifier(keys.at("kernel").value, at(keys.at("kernel")), "kernel name");
  s.kernel.entry = identifier(keys.at("entry").value, at(keys.at("entry")), "entry point");
  s.kernel.where = at(keys.at("entry"));

  read_shape(keys.at("shape"));
  read_parameters(keys.at("parameters"));
  for (const std::string& v : s.shape_variables) s.symbols.variables.push_back(v);
  for (const Parameter& p : s.parameters) s.symbols.variables.push_back(p.name);
  s.symbols.constants = {{"true", 1.0}, {"false", 0.0}};
  for (const Parameter& p : s.parameters)
    if (p.kind == ValueKind::name)
      for (std::size_t i = 0; i < p.text.size(); ++i)
        s.symbols.constants.emplace_back(p.text[i], static_cast<double>(i));

  if (compiled_map_) read_compiled_map();
  read_arguments(keys.at("arguments"));
  if (auto it = keys.find("constraints"); it != keys.end()) read_constraints(it->second);
  s.declared_constraints = s.constraints.size();
  if (auto it = keys.find("requires"); it != keys.end()) read_requires(it->second);

  const Entry& launch = keys.at("launch");
  read_geometry(s.kernel,
                map(launch.value, at(launch), "'launch'", {"grid", "block", "shared_memory"},
                    {"grid", "block"}),
                "launch", at(launch), Scope::full);

  if (auto it = keys.find("prologue"); it != keys.end()) read_prologue(it->second);
  if (first_workspace_ && !s.prologue)
    fail(*first_workspace_, "a workspace argument needs a 'prologue' section to fill it; expected "
                            "a prologue, or role input/output");

  const Entry& reference = keys.at("reference");
  auto ref = map(reference.value, at(reference), "'reference'",
                 {"template", "entry", "grid", "block", "shared_memory"},
                 {"template", "entry", "grid", "block"});
  s.reference.entry =
      identifier(ref.at("entry").value, at(ref.at("entry")), "reference entry point");
  s.reference.where = at(reference);
  reference_entry_at_ = at(ref.at("entry"));
  read_geometry(s.reference, ref, "reference", at(reference), Scope::shape_only);

  read_default(keys.at("default"));
  if (auto it = keys.find("fallbacks"); it != keys.end()) read_fallbacks(it->second);
  if (auto it = keys.find("tolerance"); it != keys.end()) read_tolerance(it->second);

  s.template_text = read_template(keys.at("template"), &s.kernel.path);
  s.reference_text = read_template(ref.at("template"), &s.reference.path);
  if (s.prologue) s.prologue->kernel.path = s.kernel.path;
  check_entry(s.kernel.entry, "entry point", s.kernel.where, s.template_text, s.kernel.path);
  check_entry(s.reference.entry, "reference entry point", reference_entry_at_, s.reference_text,
              s.reference.path);
  if (s.prologue)
    check_entry(s.prologue->kernel.entry, "prologue entry point", s.prologue->kernel.where,
                s.template_text, s.kernel.path);

  s.adopt_expressions();
  s.plan_enumeration();
  if (check_defaults_) check_default_shapes();
  return std::move(space_);
}

}  // namespace

std::unique_ptr<SearchSpace::Impl> parse_space(std::string_view text, const std::string& file_name,
                                               const std::filesystem::path& base_dir,
                                               bool check_defaults) {
  try {
    return Reader(text, file_name, base_dir, check_defaults).read();
  } catch (const YAML::Exception& error) {
    // Defensive: node accessors may throw on shapes of YAML not foreseen above.
    throw InputError(SourceLocation{file_name, error.mark.line + 1, error.mark.column + 1},
                     fmt::format("malformed space: {}", error.msg));
  }
}

}  // namespace mlatune
