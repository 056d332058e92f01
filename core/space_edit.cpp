#include "core/space_edit.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <utility>

#include "core/error.h"

namespace mlatune {
namespace {

constexpr std::string_view kByteOrderMark = "\xEF\xBB\xBF";

bool is_blank(char c) { return c == ' ' || c == '\t'; }
bool is_newline(char c) { return c == '\n' || c == '\r'; }
bool is_flow_indicator(char c) { return c == ',' || c == '[' || c == ']' || c == '{' || c == '}'; }

/// One change to the original text: bytes [begin, end) become `replacement`.
struct Splice {
  std::size_t begin;
  std::size_t end;
  std::string replacement;
};

/// A search-space file's text with its parsed tree.  Offsets are into `body`
/// (the text after a byte order mark, which yaml-cpp does not count).
class SpaceText {
 public:
  SpaceText(std::string_view text, const std::string& file_name) : file_(file_name) {
    if (text.starts_with(kByteOrderMark)) {
      bom_ = kByteOrderMark;
      text.remove_prefix(kByteOrderMark.size());
    }
    body_ = text;
    std::size_t first_newline = body_.find('\n');
    newline_ = (first_newline != std::string_view::npos && first_newline > 0 && body_[first_newline - 1] == '\r')
                   ? "\r\n"
                   : "\n";
    try {
      root_ = YAML::Load(std::string(body_));
    } catch (const YAML::Exception& e) {
      throw InputError(at(e.mark), fmt::format("not valid YAML: {}; expected a search-space file", e.msg));
    }
    if (!root_.IsMap()) {
      throw InputError(SourceLocation{file_, 1, 1},
                       "the file is not a map of keys; expected a search space (kernel:, parameters:, ...)");
    }
  }

  std::string_view body() const { return body_; }
  const std::string& newline() const { return newline_; }
  const std::string& file() const { return file_; }
  const YAML::Node& root() const { return root_; }

  SourceLocation at(const YAML::Mark& mark) const {
    if (mark.is_null() || mark.line < 0) return SourceLocation{file_};
    return SourceLocation{file_, mark.line + 1, mark.column + 1};
  }

  /// The top-level key `name` and its value, if present.
  std::optional<std::pair<YAML::Node, YAML::Node>> top_level(const std::string& name) const {
    for (auto it = root_.begin(); it != root_.end(); ++it) {
      if (it->first.IsScalar() && it->first.Scalar() == name) return std::make_pair(it->first, it->second);
    }
    return std::nullopt;
  }

  /// Applies non-overlapping splices and restores what the edit must not
  /// change: the byte order mark and the absence of a final newline.
  std::string apply(std::vector<Splice> splices) const {
    std::sort(splices.begin(), splices.end(),
              [](const Splice& a, const Splice& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
    std::string out = bom_;
    std::size_t copied = 0;
    for (const Splice& s : splices) {
      if (s.begin < copied || s.end < s.begin || s.end > body_.size()) {
        throw InternalError("space_edit: overlapping text changes");
      }
      out.append(body_.substr(copied, s.begin - copied));
      out.append(s.replacement);
      copied = s.end;
    }
    out.append(body_.substr(copied));
    bool had_final_newline = !body_.empty() && is_newline(body_.back());
    if (!had_final_newline && out.size() > bom_.size()) {
      if (out.ends_with("\r\n")) {
        out.resize(out.size() - 2);
      } else if (is_newline(out.back())) {
        out.pop_back();
      }
    }
    return out;
  }

 private:
  std::string file_;
  std::string bom_;
  std::string_view body_;
  std::string newline_;
  YAML::Node root_;
};

// ---- scanning the text around a node -----------------------------------------

std::size_t line_begin(std::string_view t, std::size_t pos) {
  while (pos > 0 && !is_newline(t[pos - 1])) --pos;
  return pos;
}

std::size_t line_end(std::string_view t, std::size_t pos) {
  while (pos < t.size() && !is_newline(t[pos])) ++pos;
  return pos;
}

/// The offset just after the newline that ends the line containing `pos`.
std::size_t after_line(std::string_view t, std::size_t pos) {
  pos = line_end(t, pos);
  if (pos < t.size() && t[pos] == '\r') ++pos;
  if (pos < t.size() && t[pos] == '\n') ++pos;
  return pos;
}

/// End of a quoted scalar starting at `pos` (just past the closing quote).
std::size_t quoted_end(std::string_view t, std::size_t pos) {
  const char quote = t[pos];
  for (std::size_t i = pos + 1; i < t.size(); ++i) {
    if (quote == '"' && t[i] == '\\') {
      ++i;
    } else if (t[i] == quote) {
      if (quote == '\'' && i + 1 < t.size() && t[i + 1] == '\'') {
        ++i;
      } else {
        return i + 1;
      }
    }
  }
  return std::string_view::npos;
}

/// End of a plain scalar inside `[...]`: it stops at a flow indicator, a
/// comment or a `: `; it may run over several lines.
std::size_t plain_end_in_flow(std::string_view t, std::size_t pos) {
  std::size_t end = pos;
  for (std::size_t i = pos; i < t.size(); ++i) {
    const char c = t[i];
    if (is_flow_indicator(c)) break;
    if (c == '#' && i > pos && (is_blank(t[i - 1]) || is_newline(t[i - 1]))) break;
    if (c == ':' && (i + 1 == t.size() || is_blank(t[i + 1]) || is_newline(t[i + 1]) || is_flow_indicator(t[i + 1]))) {
      break;
    }
    if (!is_blank(c) && !is_newline(c)) end = i + 1;
  }
  return end;
}

/// End of a plain scalar that is an item of a block sequence whose `-` sits
/// at column `dash_column`: it stops at a comment or at the end of the line,
/// unless the next non-blank line is indented further (a continuation).
std::size_t plain_end_in_block(std::string_view t, std::size_t pos, std::size_t dash_column) {
  std::size_t end = pos;
  std::size_t i = pos;
  for (;;) {
    for (; i < t.size() && !is_newline(t[i]); ++i) {
      if (t[i] == '#' && i > pos && is_blank(t[i - 1])) return end;
      if (!is_blank(t[i])) end = i + 1;
    }
    std::size_t next = std::string_view::npos;
    std::size_t j = i;
    while (j < t.size()) {
      j = after_line(t, j);
      std::size_t k = j;
      while (k < t.size() && t[k] == ' ') ++k;
      std::size_t content = k;
      while (content < t.size() && is_blank(t[content])) ++content;
      if (content == t.size()) break;
      if (is_newline(t[content])) {
        j = content;
        continue;
      }
      if (k - j > dash_column && t[content] != '#') next = k;
      break;
    }
    if (next == std::string_view::npos) return end;
    i = next;
  }
}

/// The comma between two flow items (skipping comments, which may hold commas).
std::size_t separator_comma(std::string_view t, std::size_t from, std::size_t to) {
  for (std::size_t i = from; i < to; ++i) {
    if (t[i] == '#') i = line_end(t, i);
    if (i < to && t[i] == ',') return i;
  }
  throw InternalError("space_edit: no comma between two items of a flow list");
}

// ---- lists ---------------------------------------------------------------------

/// One scalar item of a sequence and where its text lies.
struct ListItem {
  std::size_t begin = 0;       // first byte of the scalar (a quote for quoted ones)
  std::size_t end = 0;         // one past its last byte
  std::size_t line_start = 0;  // block lists: the start of the `- value` line
  std::string value;           // the parsed scalar
  YAML::Mark mark;
};

/// A sequence node located in the text.
struct ListText {
  bool flow = false;
  std::size_t open = 0;  // flow lists: the offset of '['
  std::vector<ListItem> items;
  YAML::Mark mark;
};

/// Whether `raw` (the located text of a scalar) reads back as `value`.
bool reads_as(std::string_view raw, const std::string& value) {
  try {
    YAML::Node node = YAML::Load(std::string(raw));
    return node.IsScalar() && node.Scalar() == value;
  } catch (const YAML::Exception&) {
    return false;
  }
}

ListText locate_list(const SpaceText& doc, const YAML::Node& seq, const std::string& what) {
  std::string_view t = doc.body();
  ListText list;
  list.mark = seq.Mark();
  list.flow = seq.Style() == YAML::EmitterStyle::Flow;
  if (list.flow) {
    list.open = static_cast<std::size_t>(list.mark.pos);
    if (list.open >= t.size() || t[list.open] != '[') {
      throw InputError(doc.at(list.mark), fmt::format("cannot find the '[' that opens {}; expected a list "
                                                      "written as [a, b] or as '- a' lines",
                                                      what));
    }
  }
  std::size_t previous_end = list.flow ? list.open + 1 : 0;
  for (auto it = seq.begin(); it != seq.end(); ++it) {
    const YAML::Node& node = *it;
    ListItem item;
    item.mark = node.Mark();
    if (!node.IsScalar()) {
      throw InputError(doc.at(item.mark),
                       fmt::format("an item of {} is not a single value; expected a plain or quoted value", what));
    }
    item.value = node.Scalar();
    item.begin = static_cast<std::size_t>(item.mark.pos);
    const char first = item.begin < t.size() ? t[item.begin] : '\0';
    if (item.begin < previous_end || first == '&' || first == '*' || first == '!') {
      throw InputError(doc.at(item.mark),
                       fmt::format("an item of {} uses a tag, anchor or alias, which an edit cannot keep; "
                                   "expected a plain or quoted value",
                                   what));
    }
    std::size_t dash_column = 0;
    if (!list.flow) {
      std::size_t dash = item.begin;
      while (dash > 0 && is_blank(t[dash - 1])) --dash;
      item.line_start = line_begin(t, dash > 0 ? dash - 1 : 0);
      bool dash_alone = dash > 0 && t[dash - 1] == '-';
      for (std::size_t k = item.line_start; dash_alone && k + 1 < dash; ++k) dash_alone = t[k] == ' ';
      if (!dash_alone) {
        throw InputError(
            doc.at(item.mark),
            fmt::format("an item of {} is not on its own '- value' line; expected one item per line", what));
      }
      dash_column = dash - 1 - item.line_start;
    }
    if (first == '"' || first == '\'') {
      item.end = quoted_end(t, item.begin);
    } else {
      item.end = list.flow ? plain_end_in_flow(t, item.begin) : plain_end_in_block(t, item.begin, dash_column);
    }
    if (item.end == std::string_view::npos || item.end <= item.begin ||
        !reads_as(t.substr(item.begin, item.end - item.begin), item.value)) {
      throw InputError(doc.at(item.mark),
                       fmt::format("cannot find where the value '{}' of {} ends in the text; expected a plain "
                                   "or quoted value",
                                   item.value, what));
    }
    if (!list.flow) {
      std::size_t k = item.end;
      while (k < t.size() && is_blank(t[k])) ++k;
      if (k < t.size() && !is_newline(t[k]) && t[k] != '#') {
        throw InputError(
            doc.at(item.mark),
            fmt::format("unexpected text after the value '{}' of {}; expected one item per line", item.value, what));
      }
    }
    previous_end = item.end;
    list.items.push_back(std::move(item));
  }
  return list;
}

/// A value to be written into a list: its text and the scalar it reads as.
struct NewItem {
  std::string text;
  std::string value;
};

/// The scalar that `text` reads as when written as a list item.
std::string scalar_of(const std::string& text) {
  try {
    YAML::Node node = YAML::Load(text);
    if (node.IsScalar()) return node.Scalar();
  } catch (const YAML::Exception&) {
  }
  return text;
}

std::string join(const std::vector<NewItem>& items, std::size_t first, std::string_view separator) {
  std::string out;
  for (std::size_t k = first; k < items.size(); ++k) {
    if (k > first) out += separator;
    out += items[k].text;
  }
  return out;
}

/// Plans the splices that turn `list` into `wanted`, touching as little as
/// possible: items common to both (a longest common subsequence) keep their
/// bytes, comments and neighbours; the rest are replaced in place, removed
/// with their own line (block) or separator (flow), or inserted in the style
/// of their neighbours.
std::vector<Splice> plan_list_edit(const SpaceText& doc, const ListText& list, const std::vector<NewItem>& wanted) {
  std::string_view t = doc.body();
  const auto& items = list.items;
  const std::size_t n = items.size();
  const std::size_t m = wanted.size();

  std::vector<std::vector<std::size_t>> common(n + 1, std::vector<std::size_t>(m + 1, 0));
  for (std::size_t i = n; i-- > 0;) {
    for (std::size_t j = m; j-- > 0;) {
      common[i][j] =
          items[i].value == wanted[j].value ? common[i + 1][j + 1] + 1 : std::max(common[i + 1][j], common[i][j + 1]);
    }
  }

  auto flow_separator = [&](std::size_t after) {
    // The text between items `after - 1` and `after`, when it is a plain
    // separator (no comment), so new items follow the list's own layout.
    if (n >= 2) {
      std::size_t k = std::clamp<std::size_t>(after, 1, n - 1);
      std::string_view sep = t.substr(items[k - 1].end, items[k].begin - items[k - 1].end);
      if (sep.find('#') == std::string_view::npos && sep.find(',') != std::string_view::npos) {
        return std::string(sep);
      }
    }
    return std::string(", ");
  };

  std::vector<Splice> splices;
  auto insert_before = [&](std::size_t p, const std::vector<NewItem>& values) {
    if (values.empty()) return;
    if (n == 0) {
      splices.push_back({list.open + 1, list.open + 1, join(values, 0, ", ")});
    } else if (list.flow) {
      if (p < n) {
        std::string sep = flow_separator(p);
        splices.push_back({items[p].begin, items[p].begin, join(values, 0, sep) + sep});
      } else {
        std::string sep = flow_separator(n);
        splices.push_back({items[n - 1].end, items[n - 1].end, sep + join(values, 0, sep)});
      }
    } else {
      // New lines go right after the item they follow: comment lines above
      // the next item usually describe that item and stay with it.
      const ListItem& model = items[p > 0 ? p - 1 : 0];
      std::string prefix(t.substr(model.line_start, model.begin - model.line_start));
      std::string lines;
      if (p == 0) {
        for (const NewItem& v : values) lines += prefix + v.text + doc.newline();
        splices.push_back({model.line_start, model.line_start, lines});
      } else {
        std::size_t at = after_line(t, model.end);
        bool ends_file_without_newline = at == t.size() && line_end(t, model.end) == t.size();
        for (const NewItem& v : values) {
          lines += ends_file_without_newline ? doc.newline() + prefix + v.text : prefix + v.text + doc.newline();
        }
        splices.push_back({at, at, lines});
      }
    }
  };
  auto remove_run = [&](std::size_t a, std::size_t b) {
    if (list.flow) {
      if (b + 1 < n) {
        splices.push_back({items[a].begin, items[b + 1].begin, ""});
      } else if (a > 0) {
        // The tail goes with the comma before it; a comment after that comma
        // belongs to the item that stays, so only the comma and the removed
        // items go then.
        std::size_t kept_end = items[a - 1].end;
        std::string_view between = t.substr(kept_end, items[a].begin - kept_end);
        if (between.find('#') == std::string_view::npos) {
          splices.push_back({kept_end, items[b].end, ""});
        } else {
          std::size_t comma = separator_comma(t, kept_end, items[a].begin);
          splices.push_back({comma, comma + 1, ""});
          splices.push_back({items[a].begin, items[b].end, ""});
        }
      } else {
        splices.push_back({items[a].begin, items[b].end, ""});
      }
    } else {
      for (std::size_t k = a; k <= b; ++k) splices.push_back({items[k].line_start, after_line(t, items[k].end), ""});
    }
  };

  std::size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && items[i].value == wanted[j].value && common[i][j] == common[i + 1][j + 1] + 1) {
      ++i, ++j;
      continue;
    }
    // A gap between kept items: old items [a, i) go, new values [first, j) come.
    const std::size_t a = i, first = j;
    while ((i < n || j < m) &&
           !(i < n && j < m && items[i].value == wanted[j].value && common[i][j] == common[i + 1][j + 1] + 1)) {
      if (j < m && (i == n || common[i][j + 1] >= common[i + 1][j])) {
        ++j;
      } else {
        ++i;
      }
    }
    const std::size_t removed = i - a, added = j - first, replaced = std::min(removed, added);
    for (std::size_t k = 0; k < replaced; ++k) {
      splices.push_back({items[a + k].begin, items[a + k].end, wanted[first + k].text});
    }
    if (removed > replaced) remove_run(a + replaced, i - 1);
    if (added > replaced) {
      insert_before(a + replaced, std::vector<NewItem>(wanted.begin() + first + replaced, wanted.begin() + j));
    }
  }
  return splices;
}

// ---- parameters ----------------------------------------------------------------

struct ParameterList {
  YAML::Node key;
  ListText list;
};

ParameterList find_parameter(const SpaceText& doc, const std::string& parameter) {
  auto parameters = doc.top_level("parameters");
  if (!parameters) {
    throw InputError(SourceLocation{doc.file()},
                     "the file has no 'parameters:' key; expected a map of parameter names to value lists");
  }
  const auto& [parameters_key, parameters_map] = *parameters;
  if (!parameters_map.IsMap()) {
    throw InputError(doc.at(parameters_key.Mark()),
                     "'parameters' is not a map; expected 'NAME: [values]' entries under it");
  }
  std::vector<std::string> names;
  for (auto it = parameters_map.begin(); it != parameters_map.end(); ++it) {
    if (!it->first.IsScalar()) continue;
    if (it->first.Scalar() == parameter) {
      if (!it->second.IsSequence()) {
        throw InputError(
            doc.at(it->first.Mark()),
            fmt::format("parameter '{}' has no list of values; expected '{}: [v1, v2, ...]'", parameter, parameter));
      }
      return {it->first, locate_list(doc, it->second, fmt::format("parameter '{}'", parameter))};
    }
    names.push_back(it->first.Scalar());
  }
  throw InputError(
      doc.at(parameters_key.Mark()),
      fmt::format("unknown parameter '{}'; expected one of: {}", parameter,
                  names.empty() ? std::string("(none declared)") : fmt::format("{}", fmt::join(names, ", "))));
}

std::string list_values(const ListText& list) {
  std::vector<std::string> values;
  for (const ListItem& item : list.items) values.push_back(item.value);
  return fmt::format("{}", fmt::join(values, ", "));
}

/// Re-reads the edited text and checks that the edited list holds exactly
/// the wanted values, so that a value written as given that YAML reads
/// differently (one containing ", " in a flow list, say) is refused here.
void check_parameter_result(const SpaceText& before, const std::string& after, const std::string& parameter,
                            const std::vector<NewItem>& wanted) {
  const ParameterList original = find_parameter(before, parameter);
  std::vector<std::string> got;
  std::string problem;
  try {
    const SpaceText edited(after, before.file());
    for (const ListItem& item : find_parameter(edited, parameter).list.items) got.push_back(item.value);
  } catch (const InputError& e) {
    problem = e.message();
  } catch (const YAML::Exception& e) {
    problem = e.msg;
  }
  std::vector<std::string> expected;
  for (const NewItem& item : wanted) expected.push_back(item.value);
  if (problem.empty() && got == expected) return;
  auto quoted = [](const std::vector<std::string>& values) {
    std::vector<std::string> out;
    for (const std::string& v : values) out.push_back("'" + v + "'");
    return fmt::format("{}", fmt::join(out, ", "));
  };
  if (problem.empty()) problem = fmt::format("the list would read as {}", quoted(got));
  throw InputError(before.at(original.list.mark),
                   fmt::format("the values {} cannot be written into parameter '{}' as given: {}; expected "
                               "plain values such as 4, true or absorbed",
                               quoted(expected), parameter, problem));
}

std::vector<NewItem> current_items(const ListText& list, std::string_view text) {
  std::vector<NewItem> out;
  for (const ListItem& item : list.items) {
    out.push_back({std::string(text.substr(item.begin, item.end - item.begin)), item.value});
  }
  return out;
}

std::string edit_parameter(const SpaceText& doc, const std::string& parameter, const std::vector<NewItem>& wanted) {
  const ParameterList found = find_parameter(doc, parameter);
  std::string out = doc.apply(plan_list_edit(doc, found.list, wanted));
  check_parameter_result(doc, out, parameter, wanted);
  return out;
}

// ---- constraints ---------------------------------------------------------------

std::string without_whitespace(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (!is_blank(c) && !is_newline(c)) out += c;
  }
  return out;
}

std::string trimmed(std::string_view s) {
  while (!s.empty() && (is_blank(s.front()) || is_newline(s.front()))) s.remove_prefix(1);
  while (!s.empty() && (is_blank(s.back()) || is_newline(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

/// Whether `text` written as a list item (flow or block) reads back as
/// exactly `value`.
bool round_trips(const std::string& text, const std::string& value, bool flow) {
  try {
    YAML::Node node = YAML::Load(flow ? "[" + text + "]" : "- " + text);
    return node.IsSequence() && node.size() == 1 && node[0].IsScalar() && node[0].Scalar() == value;
  } catch (const YAML::Exception&) {
    return false;
  }
}

std::string double_quoted(const std::string& value) {
  std::string out = "\"";
  for (unsigned char c : value) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\r':
        out += "\\r";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += fmt::format("\\x{:02x}", c);
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

/// The expression as list-item text: plain when YAML reads it back
/// unchanged, double-quoted otherwise (`: `, ` #`, a leading `!` or `*`, ...).
std::string constraint_text(const std::string& expression, bool flow) {
  if (expression.find_first_of("\r\n") == std::string::npos && round_trips(expression, expression, flow)) {
    return expression;
  }
  std::string quoted = double_quoted(expression);
  if (!round_trips(quoted, expression, flow)) {
    throw InputError(fmt::format("the constraint '{}' cannot be written as YAML; expected an expression", expression));
  }
  return quoted;
}

std::string checked_expression(const std::string& expression) {
  std::string e = trimmed(expression);
  if (e.empty()) throw InputError("the constraint is empty; expected an expression such as 'A * B <= 1024'");
  return e;
}

/// Indentation for a list created by an edit: that of the parameters' names,
/// so the new block looks like the rest of the file.
std::string new_list_indent(const SpaceText& doc) {
  auto parameters = doc.top_level("parameters");
  if (parameters && parameters->second.IsMap() && parameters->second.size() > 0) {
    int column = parameters->second.begin()->first.Mark().column;
    if (column > 0 && column <= 8) return std::string(static_cast<std::size_t>(column), ' ');
  }
  return "  ";
}

/// The end of the `key:` line when the key's value is empty (an implicit
/// null), or npos when something else follows the colon.
std::size_t empty_value_line(const SpaceText& doc, const YAML::Node& key) {
  std::string_view t = doc.body();
  std::size_t k = static_cast<std::size_t>(key.Mark().pos);
  if (k < t.size() && (t[k] == '"' || t[k] == '\'')) {
    k = quoted_end(t, k);
  } else {
    while (k < t.size() && t[k] != ':' && !is_newline(t[k])) ++k;
  }
  if (k == std::string_view::npos) return k;
  while (k < t.size() && is_blank(t[k])) ++k;
  if (k >= t.size() || t[k] != ':') return std::string_view::npos;
  ++k;
  while (k < t.size() && is_blank(t[k])) ++k;
  if (k < t.size() && !is_newline(t[k]) && t[k] != '#') return std::string_view::npos;
  return line_end(t, k);
}

[[noreturn]] void throw_not_a_constraint_list(const SpaceText& doc, const YAML::Node& key) {
  throw InputError(doc.at(key.Mark()),
                   "'constraints' is not a list; expected '- expression' lines or [expression, ...]");
}

}  // namespace

std::string edit_set_values(std::string_view text, const std::string& file_name, const std::string& parameter,
                            const std::vector<std::string>& values) {
  const SpaceText doc(text, file_name);
  if (values.empty()) {
    throw InputError(doc.at(find_parameter(doc, parameter).list.mark),
                     fmt::format("no values given for parameter '{}'; expected at least one value", parameter));
  }
  std::vector<NewItem> wanted;
  for (const std::string& v : values) wanted.push_back({v, scalar_of(v)});
  return edit_parameter(doc, parameter, wanted);
}

std::string edit_add_value(std::string_view text, const std::string& file_name, const std::string& parameter,
                           const std::string& value) {
  const SpaceText doc(text, file_name);
  const ParameterList found = find_parameter(doc, parameter);
  const std::string parsed = scalar_of(value);
  for (const ListItem& item : found.list.items) {
    if (item.value == parsed) {
      throw InputError(doc.at(item.mark),
                       fmt::format("parameter '{}' already has the value '{}'; expected a value not in [{}]", parameter,
                                   parsed, list_values(found.list)));
    }
  }
  std::vector<NewItem> wanted = current_items(found.list, doc.body());
  wanted.push_back({value, parsed});
  return edit_parameter(doc, parameter, wanted);
}

std::string edit_remove_value(std::string_view text, const std::string& file_name, const std::string& parameter,
                              const std::string& value) {
  const SpaceText doc(text, file_name);
  const ParameterList found = find_parameter(doc, parameter);
  const std::string parsed = scalar_of(value);
  const auto& items = found.list.items;
  auto hit = std::find_if(items.begin(), items.end(),
                          [&](const ListItem& item) { return item.value == parsed || item.value == value; });
  if (hit == items.end()) {
    throw InputError(doc.at(found.list.mark), fmt::format("parameter '{}' has no value '{}'; expected one of: {}",
                                                          parameter, value, list_values(found.list)));
  }
  if (items.size() == 1) {
    throw InputError(doc.at(hit->mark),
                     fmt::format("'{}' is the last value of parameter '{}' and cannot be removed; expected a "
                                 "parameter to keep at least one value (use set to replace it)",
                                 hit->value, parameter));
  }
  std::vector<NewItem> wanted;
  for (auto it = items.begin(); it != items.end(); ++it) {
    if (it != hit) wanted.push_back({std::string(doc.body().substr(it->begin, it->end - it->begin)), it->value});
  }
  return edit_parameter(doc, parameter, wanted);
}

std::string edit_add_constraint(std::string_view text, const std::string& file_name, const std::string& expression) {
  const SpaceText doc(text, file_name);
  const std::string e = checked_expression(expression);
  std::string_view t = doc.body();
  auto constraints = doc.top_level("constraints");

  if (!constraints) {
    // No list yet: a new block at the end of the file.
    std::string block;
    if (!t.empty() && !is_newline(t.back())) block += doc.newline();
    block += "constraints:" + doc.newline() + new_list_indent(doc) + "- " + constraint_text(e, false) + doc.newline();
    return doc.apply({{t.size(), t.size(), block}});
  }
  const auto& [key, value] = *constraints;
  if (value.IsNull()) {
    std::size_t end = empty_value_line(doc, key);
    if (end == std::string_view::npos) throw_not_a_constraint_list(doc, key);
    std::string item = new_list_indent(doc) + "- " + constraint_text(e, false);
    std::size_t at = after_line(t, end);
    return doc.apply({{at, at, at == end ? doc.newline() + item : item + doc.newline()}});
  }
  if (!value.IsSequence()) throw_not_a_constraint_list(doc, key);

  const ListText list = locate_list(doc, value, "'constraints'");
  const std::string compact = without_whitespace(e);
  for (const ListItem& item : list.items) {
    if (without_whitespace(item.value) == compact) {
      throw InputError(doc.at(item.mark),
                       fmt::format("the constraint '{}' is already there; expected a new constraint", item.value));
    }
  }
  std::vector<NewItem> wanted = current_items(list, t);
  wanted.push_back({constraint_text(e, list.flow), e});
  return doc.apply(plan_list_edit(doc, list, wanted));
}

std::string edit_remove_constraint(std::string_view text, const std::string& file_name, const std::string& expression) {
  const SpaceText doc(text, file_name);
  const std::string e = checked_expression(expression);
  auto constraints = doc.top_level("constraints");
  if (!constraints) {
    throw InputError(
        SourceLocation{doc.file()},
        fmt::format("no constraint '{}': the file has no 'constraints:' list; expected one of: (none)", e));
  }
  const auto& [key, value] = *constraints;
  if (value.IsNull()) {
    if (empty_value_line(doc, key) == std::string_view::npos) throw_not_a_constraint_list(doc, key);
    throw InputError(doc.at(key.Mark()),
                     fmt::format("no constraint '{}': the 'constraints:' list is empty; expected one of: (none)", e));
  }
  if (!value.IsSequence()) throw_not_a_constraint_list(doc, key);

  const ListText list = locate_list(doc, value, "'constraints'");
  const std::string compact = without_whitespace(e);
  std::vector<NewItem> wanted;
  std::vector<std::string> all;
  bool found = false;
  for (const ListItem& item : list.items) {
    all.push_back("'" + item.value + "'");
    if (!found && without_whitespace(item.value) == compact) {
      found = true;
    } else {
      wanted.push_back({std::string(doc.body().substr(item.begin, item.end - item.begin)), item.value});
    }
  }
  if (!found) {
    throw InputError(doc.at(key.Mark()),
                     fmt::format("no constraint '{}'; expected one of: {}", e,
                                 all.empty() ? std::string("(none)") : fmt::format("{}", fmt::join(all, ", "))));
  }
  return doc.apply(plan_list_edit(doc, list, wanted));
}

// ---- replacing the file ----------------------------------------------------------

namespace {

[[noreturn]] void throw_system_error(const std::string& call, const std::filesystem::path& path, int error) {
  throw EnvironmentError(fmt::format("{} failed for '{}': {}", call, path.string(), std::strerror(error)));
}

/// A temporary file being written; removed unless it was renamed into place.
class TemporaryFile {
 public:
  explicit TemporaryFile(const std::filesystem::path& target) {
    std::string pattern = (target.parent_path() / ("." + target.filename().string() + ".mlatune-XXXXXX")).string();
    fd_ = ::mkstemp(pattern.data());  // O_CREAT | O_EXCL, mode 0600
    if (fd_ < 0) throw_system_error("mkstemp", pattern, errno);
    path_ = pattern;
  }
  TemporaryFile(const TemporaryFile&) = delete;
  TemporaryFile& operator=(const TemporaryFile&) = delete;
  ~TemporaryFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!renamed_) ::unlink(path_.c_str());
  }

  void write_all(std::string_view bytes) {
    while (!bytes.empty()) {
      ssize_t written = ::write(fd_, bytes.data(), bytes.size());
      if (written < 0) {
        if (errno == EINTR) continue;
        throw_system_error("write", path_, errno);
      }
      bytes.remove_prefix(static_cast<std::size_t>(written));
    }
  }
  void set_mode(mode_t mode) {
    if (::fchmod(fd_, mode) != 0) throw_system_error("fchmod", path_, errno);
  }
  void sync_and_close() {
    if (::fsync(fd_) != 0) throw_system_error("fsync", path_, errno);
    int fd = std::exchange(fd_, -1);
    if (::close(fd) != 0) throw_system_error("close", path_, errno);
  }
  void rename_to(const std::filesystem::path& target) {
    if (::rename(path_.c_str(), target.c_str()) != 0)
      throw_system_error("rename to '" + target.string() + "'", path_, errno);
    renamed_ = true;
  }

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  bool renamed_ = false;
};

/// Flushes a directory entry change (the rename) to disk.
void sync_directory(const std::filesystem::path& directory) {
  int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) throw_system_error("open (directory)", directory, errno);
  int result = ::fsync(fd);
  int error = errno;
  ::close(fd);
  if (result != 0) throw_system_error("fsync (directory)", directory, error);
}

}  // namespace

void replace_file_validated(const std::filesystem::path& file, std::string_view new_text,
                            const std::function<void(std::string_view)>& validate) {
  // Edit the file a symbolic link points to, not the link.
  std::error_code error;
  std::filesystem::path target = std::filesystem::canonical(file, error);
  if (error) throw EnvironmentError(fmt::format("cannot resolve '{}': {}", file.string(), error.message()));
  struct stat original {};
  if (::stat(target.c_str(), &original) != 0) throw_system_error("stat", target, errno);
  if (!S_ISREG(original.st_mode)) {
    throw EnvironmentError(fmt::format("'{}' is not a regular file; expected a search-space file", target.string()));
  }
  // The rename below would replace a read-only file regardless of its mode
  // (it needs only the directory's permission), and root passes access():
  // a file nobody may write is refused by its mode bits.
  if ((original.st_mode & 0222) == 0 || ::access(target.c_str(), W_OK) != 0)
    throw EnvironmentError(fmt::format("'{}' is read-only (mode {:o}); make it writable to edit it",
                                       target.string(), original.st_mode & 07777));
  validate(new_text);

  TemporaryFile temporary(target);
  temporary.write_all(new_text);
  temporary.set_mode(original.st_mode & 07777);
  temporary.sync_and_close();
  temporary.rename_to(target);
  sync_directory(target.parent_path());
}

}  // namespace mlatune
