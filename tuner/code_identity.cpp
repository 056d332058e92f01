#include "tuner/code_identity.h"

#include <algorithm>
#include <cctype>
#include <future>
#include <map>
#include <optional>
#include <set>

#include <fmt/format.h>

#include "core/compiler.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/space.h"

namespace mlatune {

namespace {

bool identifier_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%';
}

/// The identifiers of a piece of PTX, comments left out.
std::set<std::string_view> identifiers(std::string_view text) {
  std::set<std::string_view> out;
  std::size_t i = 0;
  while (i < text.size()) {
    if (text.compare(i, 2, "//") == 0) {
      i = text.find('\n', i);
      if (i == std::string_view::npos) break;
    } else if (identifier_char(text[i])) {
      const std::size_t start = i;
      while (i < text.size() && identifier_char(text[i])) ++i;
      out.insert(text.substr(start, i - start));
    } else {
      ++i;
    }
  }
  return out;
}

/// The text of a statement without its leading blanks and comment lines.
std::string_view statement_body(std::string_view text) {
  for (;;) {
    const std::size_t start = text.find_first_not_of(" \t\r\n");
    if (start == std::string_view::npos) return {};
    text.remove_prefix(start);
    if (!text.starts_with("//")) return text;
    const std::size_t end = text.find('\n');
    if (end == std::string_view::npos) return {};
    text.remove_prefix(end);
  }
}

/// The name a module-scope variable declaration declares, or empty when the
/// statement declares no .global or .const variable.
std::string_view declared_variable(std::string_view statement) {
  const std::string_view body = statement_body(statement);
  const std::size_t open = body.find_first_of("({");
  const std::size_t assign = body.find('=');
  // A function has its parameter list or body before any initializer.
  if (open != std::string_view::npos && (assign == std::string_view::npos || open < assign)) return {};
  std::string_view head = body.substr(0, std::min(assign, body.find(';')));
  if (const std::size_t bracket = head.find('['); bracket != std::string_view::npos) head = head.substr(0, bracket);
  bool variable_space = false;
  std::string_view last;
  std::size_t i = 0;
  while (i < head.size()) {
    if (!identifier_char(head[i]) && head[i] != '.') {
      ++i;
      continue;
    }
    const std::size_t start = i;
    while (i < head.size() && (identifier_char(head[i]) || head[i] == '.')) ++i;
    const std::string_view token = head.substr(start, i - start);
    if (token == ".global" || token == ".const") variable_space = true;
    last = token;
  }
  return variable_space && !last.empty() && last.front() != '.' ? last : std::string_view{};
}

/// Whether the line at `i` is a module directive that ends with its line,
/// not with a ';' (.version 9.0, .target sm_90, .address_size 64, .file).
bool line_directive(std::string_view ptx, std::size_t i) {
  const std::size_t start = ptx.find_first_not_of(" \t", i);
  if (start == std::string_view::npos) return false;
  const std::string_view line = ptx.substr(start);
  for (std::string_view d : {".version", ".target", ".address_size", ".file"})
    if (line.starts_with(d) && line.size() > d.size() && (line[d.size()] == ' ' || line[d.size()] == '\t'))
      return true;
  return false;
}

/// Module-level statements: each runs from the end of the one before (so
/// blanks and comments belong to the next) through its ';', through the
/// '}' that closes a function body, or through the end of a line directive.
/// An initializer's braces ("= {1, 2};") stay inside their statement.
std::vector<std::string_view> statements(std::string_view ptx) {
  std::vector<std::string_view> out;
  std::size_t begin = 0, i = 0;
  int depth = 0;
  while (i < ptx.size()) {
    const char c = ptx[i];
    if (depth == 0 && (i == 0 || ptx[i - 1] == '\n') && line_directive(ptx, i)) {
      const std::size_t end = ptx.find('\n', i);
      i = end == std::string_view::npos ? ptx.size() : end + 1;
      out.push_back(ptx.substr(begin, i - begin));
      begin = i;
      continue;
    }
    if (ptx.compare(i, 2, "//") == 0) {
      const std::size_t end = ptx.find('\n', i);
      i = end == std::string_view::npos ? ptx.size() : end;
      continue;
    }
    if (ptx.compare(i, 2, "/*") == 0) {
      const std::size_t end = ptx.find("*/", i + 2);
      i = end == std::string_view::npos ? ptx.size() : end + 2;
      continue;
    }
    ++i;
    if (c == '{') {
      ++depth;
    } else if (c == '}') {
      if (--depth == 0) {
        const std::size_t next = ptx.find_first_not_of(" \t\r\n", i);
        if (next == std::string_view::npos || ptx[next] != ';') {
          out.push_back(ptx.substr(begin, i - begin));
          begin = i;
        }
      }
    } else if (c == ';' && depth == 0) {
      out.push_back(ptx.substr(begin, i - begin));
      begin = i;
    }
  }
  if (begin < ptx.size()) out.push_back(ptx.substr(begin));
  return out;
}

}  // namespace

std::string referenced_ptx(std::string_view ptx) {
  const std::vector<std::string_view> parts = statements(ptx);
  std::vector<std::string_view> names(parts.size());
  std::vector<std::set<std::string_view>> uses(parts.size());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    names[i] = declared_variable(parts[i]);
    uses[i] = identifiers(parts[i]);
    if (!names[i].empty()) uses[i].erase(names[i]);  // its own declaration is no use
  }
  std::vector<bool> kept(parts.size(), true);
  for (bool changed = true; changed;) {
    changed = false;
    for (std::size_t i = 0; i < parts.size(); ++i) {
      if (!kept[i] || names[i].empty()) continue;
      bool used = false;
      for (std::size_t j = 0; j < parts.size() && !used; ++j) used = j != i && kept[j] && uses[j].count(names[i]);
      if (!used) {
        kept[i] = false;
        changed = true;
      }
    }
  }
  // Canonical blanks: each statement's comment lines, then its text, one per
  // line; a dropped declaration leaves its comment lines (NVVM's "// .globl
  // k" before it belongs to the next kernel, not to the variable).
  std::string out;
  out.reserve(ptx.size());
  for (std::size_t i = 0; i < parts.size(); ++i) {
    const std::string_view body = statement_body(parts[i]);
    std::string_view prefix = parts[i].substr(0, parts[i].size() - body.size());
    while (!prefix.empty()) {
      const std::size_t end = prefix.find('\n');
      std::string_view line = prefix.substr(0, end);
      prefix = end == std::string_view::npos ? std::string_view{} : prefix.substr(end + 1);
      const std::size_t first = line.find_first_not_of(" \t\r");
      if (first == std::string_view::npos) continue;
      line.remove_prefix(first);
      out.append(line.substr(0, line.find_last_not_of(" \t\r") + 1));
      out += '\n';
    }
    if (kept[i] && !body.empty()) {
      out.append(body.substr(0, body.find_last_not_of(" \t\r\n") + 1));
      out += '\n';
    }
  }
  return out;
}

std::string entry_ptx(std::string_view ptx, std::string_view entry) {
  const std::string head = fmt::format(".entry {}(", entry);
  std::string module;
  bool found = false;
  for (std::string_view statement : statements(ptx)) {
    const std::string_view body = statement_body(statement);
    const bool function = declared_variable(statement).empty() &&
                          (body.find(".entry ") != std::string_view::npos || body.find(".func ") != std::string_view::npos) &&
                          body.find_first_of("({") != std::string_view::npos;
    if (function && body.find(head) == std::string_view::npos) continue;
    found = found || function;
    module += statement;
  }
  if (!found) throw InternalError(fmt::format("entry_ptx: the PTX has no entry '{}'", entry));
  // Comment lines are no code (NVVM's "// .globl k" lines move with the
  // functions around them).
  std::string kept;
  {
    const std::string all = referenced_ptx(module);
    std::size_t start = 0;
    while (start < all.size()) {
      std::size_t end = all.find('\n', start);
      end = end == std::string::npos ? all.size() : end + 1;
      if (all.compare(start, 2, "//") != 0) kept.append(all, start, end - start);
      start = end;
    }
  }
  // NVVM numbers block labels by the function's place in the module
  // ($L__BB<function>_<block>).
  std::string out;
  out.reserve(kept.size());
  constexpr std::string_view label = "$L__BB";
  for (std::size_t i = 0; i < kept.size();) {
    if (kept.compare(i, label.size(), label) == 0) {
      std::size_t j = i + label.size();
      while (j < kept.size() && std::isdigit(static_cast<unsigned char>(kept[j]))) ++j;
      if (j < kept.size() && kept[j] == '_' && j > i + label.size()) {
        out += label;
        i = j;
        continue;
      }
    }
    out += kept[i++];
  }
  return out;
}

std::string code_identity(const CompiledBinary& binary, const LaunchPlan& plan) {
  if (binary.ptx.empty())
    throw InternalError("code_identity: the binary was compiled without its PTX (CompileRequest::keep_ptx)");
  // The options that reach ptxas or change code generation; the definitions
  // and include paths act only through the PTX, which is hashed.
  std::string options;
  for (const std::string& o : binary.options)
    if (!o.starts_with("-D") && !o.starts_with("--include-path") && !o.starts_with("-I")) options += o + "\n";
  if (!binary.prologue_ptx.empty())
    return content_hash({"mlatune code identity v2, prologue apart", referenced_ptx(binary.ptx),
                         referenced_ptx(binary.prologue_ptx), options, launch_plan_text(plan)});
  return content_hash({"mlatune code identity v2", referenced_ptx(binary.ptx), options, launch_plan_text(plan)});
}

bool same_code_apart(const CompiledBinary& whole, const CompiledBinary& apart, std::string_view main_entry,
                     std::string_view prologue_entry) {
  if (whole.ptx.empty() || apart.ptx.empty() || apart.prologue_ptx.empty())
    throw InternalError("same_code_apart: a binary was compiled without its PTX (CompileRequest::keep_ptx)");
  return entry_ptx(whole.ptx, main_entry) == entry_ptx(apart.ptx, main_entry) &&
         entry_ptx(whole.ptx, prologue_entry) == entry_ptx(apart.prologue_ptx, prologue_entry);
}

std::vector<CodeIdentity> code_identities(const SearchSpace& space, const std::vector<CodeSubject>& subjects,
                                          CompilePool& pool) {
  std::vector<CodeIdentity> out(subjects.size());
  std::vector<std::optional<std::shared_future<CompileResult>>> compiling(subjects.size());
  // Where the prologue is compiled apart: the same config compiled whole.
  std::vector<std::optional<std::shared_future<CompileResult>>> whole(subjects.size());
  std::vector<LaunchPlan> plans(subjects.size());
  std::map<std::string, SearchSpace> per_device;  // the space as each device architecture sees it
  for (std::size_t i = 0; i < subjects.size(); ++i) {
    const CodeSubject& s = subjects[i];
    try {
      parse_architecture(s.arch);  // one this NVRTC compiles for, or InputError saying which it does
    } catch (const InputError& e) {
      out[i].refusal = e.what();
      continue;
    }
    try {
      // The device's view of the space: a config needing an architecture
      // that device lacks is invalid there, as in a sweep on it.
      auto found = per_device.find(s.arch);
      if (found == per_device.end()) found = per_device.emplace(s.arch, space.for_device(s.arch)).first;
      const SearchSpace& there = found->second;
      // (A parameter the space gained since the config was written takes
      // its default value; the identity says whether that is the same code.)
      const Config config = there.parse_config_or_default(s.config);
      const Shape shape = there.parse_shape(s.shape);
      out[i].config = there.config_string(config);
      if (const Validity v = there.check(config, shape); !v.valid) {
        out[i].refusal = "not a valid config at its shape under this version: " + v.failed_constraint;
        continue;
      }
      plans[i] = plan_launch(there, config, shape);
      if (!plans[i].ok()) {
        out[i].refusal = "cannot launch at its shape under this version: " + plans[i].refusal;
        continue;
      }
      CompileRequest request = compile_request(there, config, shape, s.arch);
      request.keep_ptx = true;
      if (request.prologue_part) {
        CompileRequest together = request;
        together.prologue_part.reset();
        whole[i] = pool.submit(std::move(together));
      }
      compiling[i] = pool.submit(std::move(request));
    } catch (const InputError& e) {
      out[i].refusal = fmt::format("its config or shape does not parse under this version: {}", e.what());
    }
  }
  for (std::size_t i = 0; i < subjects.size(); ++i) {
    if (!compiling[i]) continue;
    const CompileResult& result = compiling[i]->get();
    if (!result.ok()) {
      out[i].refusal = "does not compile under this version: " + result.failure().log;
      continue;
    }
    if (!whole[i]) {
      out[i].hash = code_identity(result.binary(), plans[i]);
      continue;
    }
    // Compiled apart: where each part's code is the one the whole template
    // gives, the identity is the whole compile's, as before the space
    // compiled the prologue apart (so results measured then carry over);
    // else the parts' own, and they do not.
    const CompileResult& together = whole[i]->get();
    if (!together.ok()) {
      out[i].refusal = "does not compile under this version: " + together.failure().log;
      continue;
    }
    const bool same = same_code_apart(together.binary(), result.binary(), space.kernel().entry,
                                      space.prologue()->kernel.entry);
    out[i].hash = code_identity(same ? together.binary() : result.binary(), plans[i]);
  }
  return out;
}

namespace {

/// Why an entry's measured error would not pass this version's validation;
/// empty when it would.
std::string outside_tolerance(const SearchSpace& space, const PortableEntry& e) {
  if (!e.error) return "no error figures, so this version's tolerance cannot be checked";
  const Tolerance& t = space.tolerance();
  if (!(e.error->relative_l2 <= t.relative_l2))
    return fmt::format("its relative L2 error {:.3g} is over this version's tolerance {:.3g}", e.error->relative_l2,
                       t.relative_l2);
  if (t.max_abs && !(e.error->max_abs <= *t.max_abs))
    return fmt::format("its max abs error {:.3g} is over this version's tolerance {:.3g}", e.error->max_abs,
                       *t.max_abs);
  return {};
}

}  // namespace

CarryOver carry_over(const SearchSpace& space, const std::vector<PortableEntry>& other_versions, CompilePool& pool) {
  CarryOver out;
  std::vector<const PortableEntry*> checked;
  std::vector<CodeSubject> subjects;
  for (const PortableEntry& e : other_versions) {
    if (e.kernel.name != space.kernel_name()) {
      out.refused.emplace_back(e, "another kernel: " + e.kernel.name);
    } else if (!e.code) {
      out.refused.emplace_back(e, "the file gives no code identity for it (written without `export-best --space`)");
    } else if (std::string why = outside_tolerance(space, e); !why.empty()) {
      out.refused.emplace_back(e, std::move(why));
    } else {
      checked.push_back(&e);
      subjects.push_back({e.shape, e.config, e.device.arch});
    }
  }
  const std::vector<CodeIdentity> identities = code_identities(space, subjects, pool);
  for (std::size_t i = 0; i < checked.size(); ++i) {
    const PortableEntry& e = *checked[i];
    if (!identities[i].ok()) {
      out.refused.emplace_back(e, identities[i].refusal);
    } else if (identities[i].hash != *e.code) {
      const std::string here = nvrtc_version();
      out.refused.emplace_back(
          e, fmt::format("its code changed: its PTX or launch differ under this version (identity {} in the file, "
                         "{} here{})",
                         e.code->substr(0, 8), identities[i].hash.substr(0, 8),
                         e.toolchain.nvrtc_version == here
                             ? std::string()
                             : fmt::format("; measured with NVRTC {}, compiled here with {}", e.toolchain.nvrtc_version,
                                           here)));
    } else {
      PortableEntry carried = e;
      carried.kernel = {space.kernel_name(), space.template_hash(), space.definition_hash()};
      carried.config = identities[i].config;
      out.carried.push_back(std::move(carried));
    }
  }
  return out;
}

}  // namespace mlatune
