#include "cache/dispatch_index.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "cache/binary_record.h"

namespace mlatune {

std::string_view to_string(ChoiceReason reason) {
  switch (reason) {
    case ChoiceReason::hit: return "hit";
    case ChoiceReason::nearest: return "nearest";
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

// A config can run a shape when every constraint holds and its launch
// geometry evaluates to positive sizes there.
std::string rejection(const SearchSpace& space, const Config& config, const Shape& shape) {
  Validity validity = space.check(config, shape);
  if (!validity) return "constraint " + validity.failed_constraint;
  LaunchGeometry geometry = space.geometry(config, shape);
  if (!geometry.valid()) return "geometry: " + geometry.invalid_reason;
  return {};
}

}  // namespace

DispatchIndex::DispatchIndex(const SearchSpace& space, DispatchTarget target)
    : space_(&space), target_(std::move(target)) {}

DispatchIndex DispatchIndex::build(Store& store, const SearchSpace& space, DispatchTarget target) {
  DispatchIndex index(space, std::move(target));
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
  return index;
}

Choice DispatchIndex::choose(const Shape& shape) const {
  Choice choice;
  const SearchSpace& space = *space_;
  for (const Entry& entry : entries_) {
    if (!entry.this_device) break;
    if (entry.shape != shape) continue;
    if (!rejection(space, entry.config, shape).empty()) break;  // stored but unusable: look further
    choice.reason = ChoiceReason::hit;
    choice.config = entry.config;
    choice.source_shape = entry.shape;
    choice.source_device = entry.device_name;
    choice.tuned_median_us = entry.median_us;
    choice.explanation = fmt::format("hit: tuned at this shape on {} ({:.2f} us)", entry.device_name,
                                     entry.median_us);
    finish(choice, shape);
    return choice;
  }

  // Nearest: this device's entries first; other devices only when none of
  // this device's configs is valid here.
  std::size_t rejected = 0;
  std::string first_rejection;
  for (bool this_device : {true, false}) {
    const Entry* best = nullptr;
    double best_distance = std::numeric_limits<double>::infinity();
    for (const Entry& entry : entries_) {
      if (entry.this_device != this_device) continue;
      double distance = shape_distance(entry.shape, shape);
      if (distance >= best_distance) continue;
      std::string why_not = rejection(space, entry.config, shape);
      if (!why_not.empty()) {
        ++rejected;
        if (first_rejection.empty())
          first_rejection = fmt::format("{} from {}: {}", entry.config_text,
                                        space.shape_string(entry.shape), why_not);
        continue;
      }
      best = &entry;
      best_distance = distance;
    }
    if (best) {
      choice.reason = ChoiceReason::nearest;
      choice.config = best->config;
      choice.source_shape = best->shape;
      choice.source_device = best->device_name;
      choice.tuned_median_us = best->median_us;
      choice.explanation = fmt::format(
          "nearest: config tuned at {} on {}{} (log distance {:.3f}), valid at this shape",
          space.shape_string(best->shape), best->device_name,
          this_device ? "" : " (another device, used as guidance)", best_distance);
      if (rejected) choice.explanation += fmt::format("; {} closer candidate(s) rejected", rejected);
      finish(choice, shape);
      return choice;
    }
  }

  std::string tail = entries_.empty()
                         ? std::string("no tuned shape of this kernel version and toolchain")
                         : fmt::format("no tuned config is valid here ({} rejected, first: {})",
                                       rejected, first_rejection);
  std::string default_rejection = rejection(space, space.default_config(), shape);
  if (default_rejection.empty()) {
    choice.reason = ChoiceReason::default_config;
    choice.config = space.default_config();
    choice.explanation = "default: the space's default config; " + tail;
    finish(choice, shape);
    return choice;
  }
  std::optional<Config> first;
  space.for_each_valid(shape, [&](const Config& config) {
    if (!space.geometry(config, shape).valid()) return true;
    first = config;
    return false;
  });
  if (first) {
    choice.reason = ChoiceReason::first_valid;
    choice.config = *first;
    choice.explanation = fmt::format(
        "first_valid: the default config is invalid here ({}), so the first valid config; {}",
        default_rejection, tail);
    finish(choice, shape);
    return choice;
  }
  choice.reason = ChoiceReason::none;
  std::string restrictive = space.most_restrictive_constraint(shape);
  choice.explanation = fmt::format("none: no config of {} can run {}{}", space.kernel_name(),
                                   space.shape_string(shape),
                                   restrictive.empty() ? "" : " (most restrictive constraint: " +
                                                                  restrictive + ")");
  return choice;
}

void DispatchIndex::finish(Choice& choice, const Shape& shape) const {
  choice.config_text = space_->config_string(choice.config);
  choice.binary = compiler_.key(compile_request(*space_, choice.config, shape, target_.device.arch));
}

std::optional<BinaryRecord> DispatchIndex::stored_binary(Store& store, const Choice& choice) const {
  if (!choice.ok()) return std::nullopt;
  std::optional<BinaryRecord> record = store.get_binary(choice.binary.hash);
  if (!record) return std::nullopt;
  if (record->arch != target_.device.arch || record->nvrtc_version != target_.toolchain.nvrtc_version ||
      record->kernel_name != space_->kernel_name() || record->template_hash != space_->template_hash() ||
      record->cubin.empty())
    return std::nullopt;
  return record;
}

BinaryRecord DispatchIndex::binary_record(const CompiledBinary& binary) const {
  BinaryRecord record = mlatune::binary_record(binary, space_->kernel_name(), space_->template_hash());
  record.nvrtc_version = target_.toolchain.nvrtc_version;
  return record;
}

}  // namespace mlatune
