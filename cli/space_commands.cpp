// mlatune space ...: check, count, list and edit search-space files.
#include <algorithm>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "cli/option_checks.h"
#include "core/embedded.h"
#include "core/error.h"
#include "core/space.h"
#include "core/space_edit.h"

namespace mlatune::cli {
namespace {

namespace fs = std::filesystem;

struct SpaceOptions {
  std::string file;
  std::optional<std::string> shape;  // unset: the default shapes
  std::size_t limit = 0;  // 0: no limit
  bool json = false;
  std::string parameter;
  std::string value;
  std::string expression;
};

// The shapes a command works on: the one given with --shape, else the
// space's default shapes.
std::vector<Shape> shapes_for(const SearchSpace& space, const std::optional<std::string>& option) {
  if (option) return {shape_option(space, "--shape", *option)};
  return space.default_shapes();
}

std::string counts_summary(const SearchSpace& space) {
  std::vector<std::string> parts;
  for (const Shape& shape : space.default_shapes())
    parts.push_back(
        fmt::format("{} valid at {}", count_text(space.count(shape)), space.shape_string(shape)));
  return fmt::format("{} parameters, {} raw configs; {}", space.parameters().size(),
                     count_text(space.raw_count()), fmt::join(parts, "; "));
}

// When no config is valid, which constraint is to blame.
std::string none_left_note(const SearchSpace& space, const Shape& shape, std::uint64_t valid) {
  if (valid > 0) return {};
  std::string worst = space.most_restrictive_constraint(shape);
  if (worst.empty()) return {};
  auto it = std::find_if(space.constraints().begin(), space.constraints().end(),
                         [&](const Expression& c) { return c.text() == worst; });
  return fmt::format(" (constraint '{}' at {} removes the most)", worst, it->where().str());
}

void run_validate(const SpaceOptions& o) {
  SearchSpace space = SearchSpace::load(o.file);
  fmt::print("{}: ok: kernel {}, {}\n", o.file, space.kernel_name(), counts_summary(space));
}

void run_count(const SpaceOptions& o) {
  SearchSpace space = SearchSpace::load(o.file);
  for (const Shape& shape : shapes_for(space, o.shape)) {
    std::uint64_t valid = space.count(shape);
    fmt::print("{} valid of {} raw configs at {}{}\n", count_text(valid),
               count_text(space.raw_count()),
               space.shape_string(shape), none_left_note(space, shape, valid));
  }
}

nlohmann::ordered_json config_json(const SearchSpace& space, const Config& config) {
  nlohmann::ordered_json object = nlohmann::ordered_json::object();
  for (std::size_t i = 0; i < space.parameters().size(); ++i) {
    const Parameter& p = space.parameters()[i];
    std::uint32_t c = config.choice[i];
    switch (p.kind) {
      case ValueKind::integer: object[p.name] = p.numeric[c]; break;
      case ValueKind::boolean: object[p.name] = p.numeric[c] != 0; break;
      case ValueKind::name: object[p.name] = p.text[c]; break;
    }
  }
  return object;
}

void run_list(const SpaceOptions& o) {
  SearchSpace space = SearchSpace::load(o.file);
  Shape shape = shapes_for(space, o.shape).front();
  nlohmann::ordered_json all = nlohmann::ordered_json::array();
  std::size_t listed = 0;
  space.for_each_valid(shape, [&](const Config& config) {
    if (o.json)
      all.push_back(config_json(space, config));
    else
      fmt::print("{}\n", space.config_string(config));
    ++listed;
    return o.limit == 0 || listed < o.limit;
  });
  if (o.json) fmt::print("{}\n", all.dump(2));
  if (listed == 0)
    fmt::print(stderr, "mlatune: no valid config at {}{}\n", space.shape_string(shape),
               none_left_note(space, shape, 0));
}

std::string read_space_text(const std::string& file) {
  std::error_code ec;
  if (!fs::exists(file, ec))
    throw InputError(SourceLocation{file}, "no such file; expected a search-space YAML file");
  if (std::string why = unreadable_text_file_reason(file); !why.empty())
    throw InputError(SourceLocation{file}, why + "; expected a search-space YAML file");
  std::ifstream in(file, std::ios::binary);
  if (!in) throw EnvironmentError(fmt::format("cannot open {} for reading", file));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw EnvironmentError(fmt::format("error while reading {}", file));
  return buffer.str();
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines;
  for (std::size_t start = 0; start < text.size();) {
    std::size_t end = std::min(text.find('\n', start), text.size());
    lines.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

// The line of the user's file that holds line `line` of the edited text:
// the same above the edit, shifted below it; none inside the edited lines,
// which the file does not have yet.
std::optional<int> line_before_edit(std::string_view old_text, std::string_view new_text, int line) {
  const auto before = lines_of(old_text), after = lines_of(new_text);
  std::size_t prefix = 0;
  while (prefix < before.size() && prefix < after.size() && before[prefix] == after[prefix]) ++prefix;
  std::size_t suffix = 0;
  while (suffix < before.size() - prefix && suffix < after.size() - prefix &&
         before[before.size() - 1 - suffix] == after[after.size() - 1 - suffix])
    ++suffix;
  const auto at = static_cast<std::size_t>(line);
  if (at <= prefix) return line;
  if (at > after.size() - suffix) return static_cast<int>(at - after.size() + before.size());
  return std::nullopt;
}

// Every edit is validated as a whole space before the file is replaced.  An
// error is reported where the user can find it: at a line of the file as it
// is, or else against the command (`what`: "space add THREADS 512").
void write_edit(const std::string& file, const std::string& old_text, const std::string& new_text,
                const std::string& command, const std::string& what) {
  fs::path base = fs::path(file).parent_path();
  if (base.empty()) base = ".";
  auto validate = [&](std::string_view text) {
    try {
      SearchSpace::parse(text, file, base);
    } catch (const InputError& error) {
      const SourceLocation& where = error.where();
      const std::string message = fmt::format("{} would make it invalid: {}", command, error.message());
      std::optional<int> line;
      if (where.file == file && where.line > 0) line = line_before_edit(old_text, text, where.line);
      if (line) throw InputError(SourceLocation{file, *line, where.column}, message);
      throw InputError(message);
    }
  };
  replace_file_validated(file, new_text, validate);
  SearchSpace space = SearchSpace::parse(new_text, file, base);
  fmt::print("{}: {}; {}\n", file, what, counts_summary(space));
}

std::vector<std::string> split_values(const std::string& text) {
  std::vector<std::string> out;
  std::size_t start = 0;
  while (start <= text.size()) {
    std::size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    std::string item = text.substr(start, comma - start);
    item.erase(0, item.find_first_not_of(' '));
    item.erase(item.find_last_not_of(' ') + 1);
    if (item.empty())
      throw InputError(
          fmt::format("empty value in '{}'; expected values separated by commas", text));
    out.push_back(item);
    start = comma + 1;
  }
  return out;
}

CLI::App* file_command(CLI::App& space, const char* name, const char* help,
                       const std::shared_ptr<SpaceOptions>& o) {
  CLI::App* command = space.add_subcommand(name, help);
  command->add_option("file", o->file, "search-space YAML file")->required();
  return command;
}

}  // namespace

void add_space_commands(CLI::App& app) {
  auto o = std::make_shared<SpaceOptions>();
  CLI::App* space = app.add_subcommand("space", "check, count, list and edit search-space files");
  space->require_subcommand(1);

  file_command(*space, "validate", "check a space file; print its parameters and counts", o)
      ->callback([o] { run_validate(*o); });

  CLI::App* count = file_command(*space, "count", "count the valid configs for a shape", o);
  count->add_option("--shape", o->shape,
                    "e.g. B=2,T=32,H=4,D=16,R=24 (default: the space's default shapes)");
  count->callback([o] { run_count(*o); });

  CLI::App* list = file_command(*space, "list", "list the valid configs for a shape", o);
  list->add_option("--shape", o->shape,
                   "e.g. B=2,T=32,H=4,D=16,R=24 (default: the first default shape)");
  list->add_option("--limit", o->limit, "list at most N configs (0: all)")
      ->check(whole_number(0, UINT64_MAX));
  list->add_flag("--json", o->json, "print a JSON array of objects");
  list->callback([o] { run_list(*o); });

  CLI::App* set = file_command(*space, "set", "replace a parameter's values", o);
  set->add_option("parameter", o->parameter, "parameter name")->required();
  set->add_option("values", o->value, "comma-separated values, e.g. 1,2,4")->required();
  set->callback([o] {
    std::string text = read_space_text(o->file);
    std::vector<std::string> values = split_values(o->value);
    write_edit(o->file, text, edit_set_values(text, o->file, o->parameter, values),
               fmt::format("space set {} {}", o->parameter, o->value),
               fmt::format("{} = [{}]", o->parameter, fmt::join(values, ", ")));
  });

  CLI::App* add = file_command(*space, "add", "add a value to a parameter", o);
  add->add_option("parameter", o->parameter, "parameter name")->required();
  add->add_option("value", o->value, "the value to add")->required();
  add->callback([o] {
    std::string text = read_space_text(o->file);
    write_edit(o->file, text, edit_add_value(text, o->file, o->parameter, o->value),
               fmt::format("space add {} {}", o->parameter, o->value),
               fmt::format("added {} to {}", o->value, o->parameter));
  });

  CLI::App* remove = file_command(*space, "remove", "remove a value from a parameter", o);
  remove->add_option("parameter", o->parameter, "parameter name")->required();
  remove->add_option("value", o->value, "the value to remove")->required();
  remove->callback([o] {
    std::string text = read_space_text(o->file);
    write_edit(o->file, text, edit_remove_value(text, o->file, o->parameter, o->value),
               fmt::format("space remove {} {}", o->parameter, o->value),
               fmt::format("removed {} from {}", o->value, o->parameter));
  });

  CLI::App* constrain = file_command(*space, "constrain", "add a constraint", o);
  constrain->add_option("expression", o->expression, "e.g. \"A * B <= 1024\"")->required();
  constrain->callback([o] {
    std::string text = read_space_text(o->file);
    // The expression alone first, so that its errors point into it rather
    // than at a line the file does not have yet.
    try {
      SearchSpace::load(o->file).check_constraint(o->expression);
    } catch (const InputError& error) {
      if (error.where().line > 0) throw;  // the file itself is broken
      throw InputError("space constrain " + error.message());
    }
    write_edit(o->file, text, edit_add_constraint(text, o->file, o->expression),
               fmt::format("space constrain '{}'", o->expression),
               fmt::format("added constraint '{}'", o->expression));
  });

  CLI::App* unconstrain = file_command(*space, "unconstrain", "remove a constraint", o);
  unconstrain->add_option("expression", o->expression, "the constraint's text")->required();
  unconstrain->callback([o] {
    std::string text = read_space_text(o->file);
    write_edit(o->file, text, edit_remove_constraint(text, o->file, o->expression),
               fmt::format("space unconstrain '{}'", o->expression),
               fmt::format("removed constraint '{}'", o->expression));
  });
}

}  // namespace mlatune::cli
