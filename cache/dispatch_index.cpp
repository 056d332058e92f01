#include "cache/dispatch_index.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include <fmt/format.h>

#include "cache/binary_record.h"
#include "core/architecture.h"

namespace mlatune {

std::string_view to_string(ChoiceReason reason) {
  switch (reason) {
    case ChoiceReason::hit: return "hit";
    case ChoiceReason::nearest: return "nearest";
    case ChoiceReason::repaired: return "repaired";
    case ChoiceReason::filled: return "filled";
    case ChoiceReason::fallback: return "fallback";
    case ChoiceReason::default_config: return "default";
    case ChoiceReason::first_valid: return "first_valid";
    case ChoiceReason::none: return "none";
  }
  return "none";
}

namespace {

// Shapes differ multiplicatively (T=1 vs T=2 matters as much as 1024 vs 2048).
double shape_distance(const Shape& a, const Shape& b) {
  double d = 0;
  for (std::size_t i = 0; i < a.values.size() && i < b.values.size(); ++i)
    d += std::abs(std::log(static_cast<double>(a.values[i]) / static_cast<double>(b.values[i])));
  return d;
}

std::int64_t blocks_of(const LaunchGeometry& geometry) {
  return geometry.grid[0] * geometry.grid[1] * geometry.grid[2];
}

}  // namespace

/// The choices collected so far for one shape (each config once, at most
/// `limit`), and what the selector learnt on the way for the explanations.
class DispatchIndex::Ranking {
 public:
  Ranking(const Shape& s, std::size_t l, std::size_t n) : shape(s), limit(l), neighbors(n) {}
  const Shape& shape;
  const std::size_t limit;
  const std::size_t neighbors;  // nearest tuned entries (distinct configs) repaired per device group
  std::vector<Choice> list;
  std::size_t unrepairable = 0;     // tuned entries no repair within the limits made valid
  std::string first_unrepairable;   // "<config> from <shape>: <why>"
  std::size_t invalid_fallbacks = 0;

  bool full() const { return list.size() >= limit; }
  bool has(const Config& config) const {
    return std::any_of(list.begin(), list.end(), [&](const Choice& c) { return c.config == config; });
  }
  void add(Choice choice) {
    if (!full() && !has(choice.config)) list.push_back(std::move(choice));
  }
};

DispatchIndex::DispatchIndex(const SearchSpace& space, DispatchTarget target, SelectorOptions options)
    : owned_(space.requirements().empty()
                 ? nullptr
                 : std::make_shared<const SearchSpace>(space.for_device(target.device.arch))),
      space_(owned_ ? owned_.get() : &space),
      target_(std::move(target)),
      options_(options),
      repairer_(*space_),
      template_hasher_(Compiler::source_hasher(space_->template_text())) {}

DispatchIndex DispatchIndex::build(Store& store, const SearchSpace& space, DispatchTarget target,
                                   SelectorOptions options) {
  DispatchIndex index(space, std::move(target), options);
  const std::string template_hash = space.template_hash();
  const std::string definition_hash = space.definition_hash();
  for (const BestRecord& record : store.all_best()) {
    if (record.kernel.name != space.kernel_name()) continue;  // another family: not ours to count
    if (record.kernel.template_hash != template_hash ||
        record.kernel.definition_hash != definition_hash ||
        !(record.toolchain == index.target_.toolchain)) {
      ++index.ignored_;
      continue;
    }
    Entry entry;
    try {
      entry.shape = space.parse_shape(record.entry.shape);
      entry.config = space.parse_config(record.entry.config);
    } catch (const InputError&) {
      ++index.ignored_;  // same hashes make this unlikely; never let it fail a dispatch
      continue;
    }
    entry.config_text = space.config_string(entry.config);
    entry.device_name = record.device.name;
    entry.this_device = record.device == index.target_.device.identity();
    entry.median_us = record.entry.median_us;
    index.entries_.push_back(std::move(entry));
  }
  std::stable_sort(index.entries_.begin(), index.entries_.end(), [](const Entry& a, const Entry& b) {
    if (a.this_device != b.this_device) return a.this_device;
    if (a.shape != b.shape) return a.shape < b.shape;
    return a.median_us < b.median_us;
  });
  index.space_->prepare_evaluators(first_use_evaluators);
  return index;
}

Choice DispatchIndex::choose(const Shape& shape) const { return ranked(shape, 1).front(); }

std::vector<Choice> DispatchIndex::ranked(const Shape& shape, std::size_t limit, std::size_t neighbors) const {
  // Finished (text, binary key, architecture) once ranked, not as each
  // candidate is found: one found twice or past the limit costs no key.
  std::vector<Choice> list = ranked_unfinished(shape, limit, neighbors);
  for (Choice& choice : list)
    if (choice.ok()) finish(choice, shape);
  return list;
}

std::vector<Choice> DispatchIndex::ranked_unfinished(const Shape& shape, std::size_t limit,
                                                     std::size_t neighbors) const {
  Ranking ranking(shape, limit, neighbors ? neighbors : options_.neighbors);
  if (limit == 0) return {};
  add_hit(ranking);
  for (bool this_device : {true, false}) add_neighbors(ranking, this_device);
  add_fallbacks(ranking);
  add_default(ranking);
  add_first_valid(ranking);
  if (ranking.list.empty()) ranking.list.push_back(none(shape));
  return std::move(ranking.list);
}

std::vector<Choice> DispatchIndex::filling_variants(const Choice& choice, const Shape& shape,
                                                    std::size_t limit) const {
  const std::int64_t sms = target_.device.sm_count;
  if (!choice.ok() || limit == 0 || sms <= 0) return {};
  const LaunchGeometry own = space_->geometry(choice.config, shape);
  if (!own.valid() || blocks_of(own) >= sms) return {};
  struct Variant {
    Config config;
    ParameterChange change;
    std::int64_t blocks;
  };
  std::vector<Variant> variants;
  const std::vector<Parameter>& parameters = space_->parameters();
  for (std::size_t p = 0; p < parameters.size(); ++p) {
    const std::uint32_t from = choice.config.choice[p];
    for (std::uint32_t to = 0; to < parameters[p].numeric.size(); ++to) {
      if (to == from) continue;
      Config config = choice.config;
      config.choice[p] = to;
      // Valid where the constraints hold and the geometry is: what
      // ConfigRepairer::rejection judges, without its second geometry or the
      // text of a rejection nobody reads.
      if (!space_->check(config, shape)) continue;
      const LaunchGeometry geometry = space_->geometry(config, shape);
      if (!geometry.valid() || blocks_of(geometry) <= blocks_of(own)) continue;
      variants.push_back(Variant{std::move(config), ParameterChange{p, from, to, {}}, blocks_of(geometry)});
    }
  }
  // Every SM busy with the least splitting first; short of that, the most blocks.
  const auto rank = [&](const Variant& v) {
    const bool fills = v.blocks >= sms;
    const std::uint32_t step = v.change.to > v.change.from ? v.change.to - v.change.from : v.change.from - v.change.to;
    return std::make_tuple(!fills, fills ? v.blocks : -v.blocks, step, v.change.parameter, v.change.to);
  };
  std::stable_sort(variants.begin(), variants.end(),
                   [&](const Variant& a, const Variant& b) { return rank(a) < rank(b); });
  std::vector<Choice> filled;
  for (Variant& v : variants) {
    if (filled.size() >= limit) break;
    v.change.why = fmt::format("{} blocks instead of {} on {} SMs", v.blocks, blocks_of(own), sms);
    Choice variant = choice;
    variant.reason = ChoiceReason::filled;
    variant.config = std::move(v.config);
    variant.changes = {v.change};
    variant.repair = repairer_.describe(variant.changes);
    variant.explanation = fmt::format("filled: the selector's choice with {}", variant.repair);
    finish(variant, shape);
    filled.push_back(std::move(variant));
  }
  return filled;
}

void DispatchIndex::add_hit(Ranking& ranking) const {
  for (const Entry& entry : entries_) {
    if (!entry.this_device) break;
    if (entry.shape != ranking.shape) continue;
    if (!repairer_.rejection(entry.config, ranking.shape).empty()) return;  // stored but unusable
    Choice choice;
    choice.reason = ChoiceReason::hit;
    choice.config = entry.config;
    choice.source_shape = entry.shape;
    choice.source_device = entry.device_name;
    choice.tuned_median_us = entry.median_us;
    choice.tuned_config_text = entry.config_text;
    choice.explanation = fmt::format("hit: tuned at this shape on {} ({:.2f} us)", entry.device_name,
                                     entry.median_us);
    ranking.add(std::move(choice));
    return;
  }
}

// The ranking's `neighbors` nearest entries of one device group with distinct configs,
// each repaired to the shape; fewest changes first, then nearest.
void DispatchIndex::add_neighbors(Ranking& ranking, bool this_device) const {
  if (ranking.full()) return;
  // Other devices' entries are guidance only where this device's gave nothing.
  if (!this_device && !ranking.list.empty()) return;
  std::vector<std::pair<double, std::size_t>> near;
  for (std::size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].this_device == this_device)
      near.emplace_back(shape_distance(entries_[i].shape, ranking.shape), i);
  std::stable_sort(near.begin(), near.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  struct Found {
    std::size_t entry;
    double distance;
    Repair repair;
  };
  std::vector<Found> found;
  std::vector<const Config*> seen;
  std::vector<double> considered;  // the distance of each entry repaired
  // Where only the head is kept (choose()), a farther entry wins only with
  // fewer changes than the fewest found so far: its repair stops a change
  // short of that, and a nearer entry valid as it is ends the search.  The
  // repair is breadth first, so the head is the one the full search finds.
  const bool head_only = ranking.limit == 1;
  std::optional<std::size_t> fewest;
  for (const auto& [distance, i] : near) {
    if (seen.size() >= ranking.neighbors) break;
    const Entry& entry = entries_[i];
    if (std::any_of(seen.begin(), seen.end(), [&](const Config* c) { return *c == entry.config; })) continue;
    RepairLimits limits = options_.repair;
    if (head_only && fewest) {
      if (*fewest == 0) break;
      limits.max_changes = std::min(limits.max_changes, *fewest - 1);
    }
    seen.push_back(&entry.config);
    considered.push_back(distance);
    Repair repair = repairer_.repair(entry.config, ranking.shape, limits);
    if (repair.ok()) {
      if (head_only) fewest = repair.changes.size();
      found.push_back(Found{i, distance, std::move(repair)});
      continue;
    }
    if (head_only && fewest) continue;  // not unrepairable: only no better than the head
    if (ranking.unrepairable++ == 0)
      ranking.first_unrepairable = fmt::format(
          "{} from {}: {} ({})", entry.config_text, space_->shape_string(entry.shape), repair.rejection,
          repair.exhausted ? fmt::format("gave up after {} checks", repair.evaluations)
                           : fmt::format("no valid config within {} changes", options_.repair.max_changes));
  }
  std::stable_sort(found.begin(), found.end(), [](const Found& a, const Found& b) {
    return a.repair.changes.size() < b.repair.changes.size();
  });
  for (const Found& f : found) {
    Choice choice = from_entry(entries_[f.entry], f.repair, f.distance);
    auto closer = std::count_if(considered.begin(), considered.end(), [&](double d) { return d < f.distance; });
    if (closer)
      choice.explanation +=
          fmt::format("; {} closer candidate(s) needed more changes or could not be repaired", closer);
    ranking.add(std::move(choice));
  }
}

Choice DispatchIndex::from_entry(const Entry& entry, const Repair& repair, double distance) const {
  Choice choice;
  choice.reason = repair.changes.empty() ? ChoiceReason::nearest : ChoiceReason::repaired;
  choice.config = *repair.config;
  choice.source_shape = entry.shape;
  choice.source_device = entry.device_name;
  choice.tuned_median_us = entry.median_us;
  choice.distance = distance;
  choice.tuned_config_text = entry.config_text;
  choice.changes = repair.changes;
  choice.repair = repairer_.describe(repair.changes);
  const std::string where = fmt::format("{} on {}{} (log distance {:.3f})", space_->shape_string(entry.shape),
                                        entry.device_name,
                                        entry.this_device ? "" : " (another device, used as guidance)", distance);
  choice.explanation = repair.changes.empty()
                           ? fmt::format("nearest: config tuned at {}, valid at this shape", where)
                           : fmt::format("repaired: config tuned at {}, changed {}", where, choice.repair);
  return choice;
}

std::string DispatchIndex::untuned_tail(const Ranking& ranking) const {
  if (entries_.empty()) return "no tuned shape of this kernel version and toolchain";
  return fmt::format("no tuned config could be repaired here ({} tried, first: {})", ranking.unrepairable,
                     ranking.first_unrepairable);
}

void DispatchIndex::add_fallbacks(Ranking& ranking) const {
  const std::vector<Config>& fallbacks = space_->fallbacks();
  for (std::size_t i = 0; i < fallbacks.size() && !ranking.full(); ++i) {
    std::string why_not = repairer_.rejection(fallbacks[i], ranking.shape);
    if (!why_not.empty()) {
      ++ranking.invalid_fallbacks;
      continue;
    }
    if (ranking.has(fallbacks[i])) continue;
    Choice choice;
    choice.reason = ChoiceReason::fallback;
    choice.config = fallbacks[i];
    choice.fallback_index = i;
    choice.explanation = fmt::format("fallback: the space's fallback #{} of {}", i + 1, fallbacks.size());
    if (ranking.list.empty()) {
      if (i) choice.explanation += fmt::format(" (the {} before it cannot run here)", i);
      choice.explanation += "; " + untuned_tail(ranking);
    }
    ranking.add(std::move(choice));
  }
}

void DispatchIndex::add_default(Ranking& ranking) const {
  const Config& config = space_->default_config();
  if (ranking.full() || ranking.has(config) || !repairer_.rejection(config, ranking.shape).empty()) return;
  Choice choice;
  choice.reason = ChoiceReason::default_config;
  choice.config = config;
  choice.explanation = "default: the space's default config";
  if (ranking.list.empty()) {
    if (ranking.invalid_fallbacks) choice.explanation += "; no fallback can run here";
    choice.explanation += "; " + untuned_tail(ranking);
  }
  ranking.add(std::move(choice));
}

void DispatchIndex::add_first_valid(Ranking& ranking) const {
  if (ranking.full()) return;
  const Shape& shape = ranking.shape;
  std::optional<Config> first;
  space_->for_each_valid(shape, [&](const Config& config) {
    if (ranking.has(config) || !space_->geometry(config, shape).valid()) return true;
    first = config;
    return false;
  });
  if (!first) return;
  Choice choice;
  choice.reason = ChoiceReason::first_valid;
  choice.config = *first;
  choice.explanation = "first_valid: the first valid config in enumeration order";
  if (ranking.list.empty())
    choice.explanation = fmt::format(
        "first_valid: the default config is invalid here ({}), so the first valid config; {}",
        repairer_.rejection(space_->default_config(), shape), untuned_tail(ranking));
  ranking.add(std::move(choice));
}

Choice DispatchIndex::none(const Shape& shape) const {
  Choice choice;
  choice.reason = ChoiceReason::none;
  std::string restrictive = space_->most_restrictive_constraint(shape);
  choice.explanation = fmt::format("none: no config of {} can run {}{}", space_->kernel_name(),
                                   space_->shape_string(shape),
                                   restrictive.empty() ? "" : " (most restrictive constraint: " +
                                                                  restrictive + ")");
  return choice;
}

BinaryKey DispatchIndex::binary_key(const Config& config, const Shape& shape) const {
  return compiler_.key(template_hasher_, compile_request_without_source(*space_, config, shape, target_.device.arch));
}

void DispatchIndex::finish(Choice& choice, const Shape& shape) const {
  choice.config_text = space_->config_string(choice.config);
  // One request for both: its architecture is what binary_key() would
  // evaluate the space's `requires:` for again.
  const CompileRequest request = compile_request_without_source(*space_, choice.config, shape, target_.device.arch);
  choice.binary = compiler_.key(template_hasher_, request);
  choice.arch = request.arch;
}

std::optional<BinaryRecord> DispatchIndex::stored_binary(Store& store, const Choice& choice) const {
  if (!choice.ok()) return std::nullopt;
  std::optional<BinaryRecord> record = store.get_binary(choice.binary.hash);
  if (!record) return std::nullopt;
  if (record->arch != choice.arch || record->nvrtc_version != target_.toolchain.nvrtc_version ||
      record->kernel_name != space_->kernel_name() || record->template_hash != space_->template_hash() ||
      record->cubin.empty())
    return std::nullopt;
  return record;
}

bool DispatchIndex::loads(std::string_view kernel_name, std::string_view template_hash,
                          std::string_view nvrtc_version, std::string_view arch) const {
  return kernel_name == space_->kernel_name() && template_hash == space_->template_hash() &&
         nvrtc_version == target_.toolchain.nvrtc_version && runs_binary(arch, target_.device.arch);
}

std::vector<std::string> DispatchIndex::runnable_binaries(Store& store) const {
  const std::string& kernel_name = space_->kernel_name();
  std::vector<std::string> keys;
  for (const Store::StoredBinary& b : store.binaries_of(kernel_name))
    if (loads(kernel_name, b.template_hash, b.nvrtc_version, b.arch)) keys.push_back(b.key);
  return keys;
}

BinaryRecord DispatchIndex::binary_record(const CompiledBinary& binary) const {
  BinaryRecord record = mlatune::binary_record(binary, space_->kernel_name(), space_->template_hash());
  record.nvrtc_version = target_.toolchain.nvrtc_version;
  return record;
}

}  // namespace mlatune
