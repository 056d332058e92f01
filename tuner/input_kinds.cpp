#include "tuner/input_kinds.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "core/error.h"
#include "core/space.h"

namespace mlatune {

namespace {

constexpr const char* query_buffer = "q";
constexpr const char* key_buffer = "kv_latent";
constexpr const char* value_weights = "w_up_v";

/// A well-mixed 64-bit hash: one independent draw per (seed, row).
std::uint64_t mix(std::uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

std::int64_t row_length(const HostInput& input) { return input.extents.empty() ? 1 : input.extents.back(); }

void scale_all(const HostInput& input, int exponent) {
  for (float& x : input.data) x = std::ldexp(x, exponent);
}

/// Calls scale(row) -> exponent for every row and applies it.
template <typename Exponent>
void scale_rows(const HostInput& input, Exponent exponent) {
  const std::int64_t length = row_length(input);
  const std::int64_t rows = static_cast<std::int64_t>(input.data.size()) / length;
  for (std::int64_t r = 0; r < rows; ++r) {
    const int e = exponent(r);
    if (e == 0) continue;
    for (std::int64_t i = 0; i < length; ++i) input.data[r * length + i] = std::ldexp(input.data[r * length + i], e);
  }
}

void tensor_scaled(const HostInput& input) {
  if (input.name == query_buffer) scale_all(input, 20);
  if (input.name == key_buffer || input.name == value_weights) scale_all(input, -20);
}

void row_scaled(const HostInput& input, std::uint64_t seed) {
  if (input.name != query_buffer && input.name != key_buffer) return;
  scale_rows(input, [seed](std::int64_t r) { return -static_cast<int>(mix(seed ^ mix(r)) % 21); });
}

void outlier_rows(const HostInput& input, std::uint64_t seed) {
  if (input.name != key_buffer) return;
  // kv_latent is [B, T, R]: row r is position r % T of sequence r / T.
  const std::int64_t positions = input.extents.size() >= 2 ? input.extents[input.extents.size() - 2] : 1;
  scale_rows(input, [seed, positions](std::int64_t r) {
    return r % positions == 0 || mix(seed ^ mix(r)) % 64 == 0 ? 3 : 0;
  });
}

void near_ties(const HostInput& input, std::uint64_t seed) {
  if (input.name != key_buffer) return;
  const std::int64_t length = row_length(input);
  const std::int64_t rows = static_cast<std::int64_t>(input.data.size()) / length;
  const float up = 1.0f + std::ldexp(1.0f, -20), down = 1.0f - std::ldexp(1.0f, -20);
  for (std::int64_t r = 1; r < rows; r += 2)
    for (std::int64_t i = 0; i < length; ++i) {
      const bool sign = mix(seed ^ mix(r * length + i)) & 1;
      input.data[r * length + i] = input.data[(r - 1) * length + i] * (sign ? up : down);
    }
}

}  // namespace

std::string_view to_string(InputKind kind) {
  switch (kind) {
    case InputKind::normal: return "normal";
    case InputKind::tensor_scaled: return "tensor_scaled";
    case InputKind::row_scaled: return "row_scaled";
    case InputKind::outlier_rows: return "outlier_rows";
    case InputKind::near_ties: return "near_ties";
  }
  return "?";
}

const std::vector<InputKind>& all_input_kinds() {
  static const std::vector<InputKind> kinds = {InputKind::normal, InputKind::tensor_scaled,
                                               InputKind::row_scaled, InputKind::outlier_rows,
                                               InputKind::near_ties};
  return kinds;
}

std::optional<InputKind> input_kind_named(std::string_view name) {
  for (InputKind kind : all_input_kinds())
    if (to_string(kind) == name) return kind;
  return std::nullopt;
}

std::vector<InputKind> parse_input_kinds(std::string_view text) {
  std::vector<InputKind> kinds;
  std::vector<std::string_view> names;
  for (InputKind kind : all_input_kinds()) names.push_back(to_string(kind));
  while (!text.empty()) {
    const std::size_t comma = text.find(',');
    const std::string_view name = text.substr(0, comma);
    const std::optional<InputKind> named = input_kind_named(name);
    if (!named)
      throw InputError(fmt::format("unknown input kind '{}'; expected a comma-separated list of {}", name,
                                   fmt::join(names, ", ")));
    const InputKind kind = *named;
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
    text = comma == std::string_view::npos ? std::string_view() : text.substr(comma + 1);
  }
  if (kinds.empty())
    throw InputError(fmt::format("no input kind given; expected a comma-separated list of {}", fmt::join(names, ", ")));
  return kinds;
}

bool attention_shaped(const SearchSpace& space) {
  int found = 0;
  for (const Argument& a : space.arguments())
    if (a.role == ArgumentRole::input && a.type == ElementType::float32 &&
        (a.name == query_buffer || a.name == key_buffer || a.name == value_weights))
      ++found;
  return found == 3;
}

std::vector<InputKind> input_kinds_for(const SearchSpace& space) {
  if (const char* listed = std::getenv("MLATUNE_INPUT_KINDS"); listed && *listed) {
    try {
      return parse_input_kinds(listed);
    } catch (const InputError& error) {
      throw InputError("MLATUNE_INPUT_KINDS: " + error.message());
    }
  }
  if (attention_shaped(space)) return all_input_kinds();
  return {InputKind::normal};
}

void apply_input_kind(InputKind kind, const HostInput& input, std::uint64_t seed) {
  switch (kind) {
    case InputKind::normal: return;
    case InputKind::tensor_scaled: return tensor_scaled(input);
    case InputKind::row_scaled: return row_scaled(input, seed);
    case InputKind::outlier_rows: return outlier_rows(input, seed);
    case InputKind::near_ties: return near_ties(input, seed);
  }
}

}  // namespace mlatune
