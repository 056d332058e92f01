#include "tuner/code_identity.h"

#include <future>
#include <optional>

#include <fmt/format.h>

#include "core/compiler.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/space.h"

namespace mlatune {

std::string code_identity(std::string_view cubin, const LaunchPlan& plan) {
  return content_hash({"mlatune code identity v1", cubin, launch_plan_text(plan)});
}

std::vector<CodeIdentity> code_identities(const SearchSpace& space, const std::vector<CodeSubject>& subjects,
                                          CompilePool& pool) {
  std::vector<CodeIdentity> out(subjects.size());
  std::vector<std::optional<std::shared_future<CompileResult>>> compiling(subjects.size());
  std::vector<LaunchPlan> plans(subjects.size());
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
      const SearchSpace there = space.for_device(s.arch);
      const Config config = there.parse_config(s.config);
      const Shape shape = there.parse_shape(s.shape);
      if (const Validity v = there.check(config, shape); !v.valid) {
        out[i].refusal = "not a valid config at its shape under this version: " + v.failed_constraint;
        continue;
      }
      plans[i] = plan_launch(there, config, shape);
      if (!plans[i].ok()) {
        out[i].refusal = "cannot launch at its shape under this version: " + plans[i].refusal;
        continue;
      }
      compiling[i] = pool.submit(compile_request(there, config, shape, s.arch));
    } catch (const InputError& e) {
      out[i].refusal = fmt::format("not a config of this version: {}", e.what());
    }
  }
  for (std::size_t i = 0; i < subjects.size(); ++i) {
    if (!compiling[i]) continue;
    const CompileResult& result = compiling[i]->get();
    if (!result.ok()) {
      out[i].refusal = "does not compile under this version: " + result.failure().log;
      continue;
    }
    out[i].hash = code_identity(result.binary().cubin, plans[i]);
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
          e, fmt::format("its code changed: cubin or launch differ under this version (identity {} in the file, "
                         "{} here{})",
                         e.code->substr(0, 8), identities[i].hash.substr(0, 8),
                         e.toolchain.nvrtc_version == here
                             ? std::string()
                             : fmt::format("; measured with NVRTC {}, compiled here with {}", e.toolchain.nvrtc_version,
                                           here)));
    } else {
      PortableEntry carried = e;
      carried.kernel = {space.kernel_name(), space.template_hash(), space.definition_hash()};
      out.carried.push_back(std::move(carried));
    }
  }
  return out;
}

}  // namespace mlatune
