// Kinds of validation input beyond N(0, 1): data with a wide dynamic range,
// where split-precision arithmetic (3xTF32, FP16 splits) and online softmax
// break first.  Every kind only multiplies N(0, 1) data by powers of two
// (exact in float32, so kernel and float64 reference see the same numbers)
// or by 1 + 2^-20 (near ties), and each is chosen so that the problem stays
// well-conditioned in float32: a correct float32 kernel meets rel-L2 1e-5 on
// it, so a failure is the kernel's, not the data's.
//
// The kinds (for attention-shaped spaces: inputs q[..., D], kv_latent[..., R]
// and w_up_v, the flagship's names; rows are the last dimension):
//  - normal: everything N(0, 1).
//  - tensor_scaled: q x 2^20, kv_latent x 2^-20, w_up_v x 2^-20.  Logits are
//    unchanged, the output is ~2^-40.  Hazard: tensors whose scales differ
//    by orders of magnitude (unnormalized activations, dequantization
//    scales); an FP16 split without scaling underflows, an absolute epsilon
//    anywhere shows.
//  - row_scaled: every row of q and of kv_latent x 2^-e, e uniform in
//    [0, 20] per row.  Hazard: tokens whose magnitudes differ by 10^6 within
//    one tile (per-tile rather than per-element splits lose the small ones;
//    queries near zero give near-uniform softmax).  Rows are scaled down
//    only: a row scaled up by 2^20 multiplies its logits by 2^20, and a
//    float32 logit of magnitude ~10^7 is off by ~1 in absolute terms, which
//    changes softmax weights by e^1: no float32 kernel could pass, so that
//    direction is covered by tensor_scaled, where the scales cancel.
//  - outlier_rows: the first key row of every sequence and about 1 in 64
//    others x 2^3.  Hazard: attention sinks and massive activations (a few
//    tokens with large norms dominate softmax and the value sum).
//  - near_ties: every odd key row is the even row before it times
//    (1 +- 2^-20) per element, so pairs of logits differ by tiny amounts.
//    Hazard: the running max and rescaling of online softmax with equal
//    maxima across tiles, tie-breaking by index.  Well-conditioned, because
//    tied keys carry nearly equal values.
// Other spaces validate on normal only.
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <optional>
#include <string_view>
#include <vector>

namespace mlatune {

class SearchSpace;

enum class InputKind { normal, tensor_scaled, row_scaled, outlier_rows, near_ties };

std::string_view to_string(InputKind kind);
/// Every kind, in the order above.
const std::vector<InputKind>& all_input_kinds();
/// The kind of this name, or nullopt.
std::optional<InputKind> input_kind_named(std::string_view name);
/// "normal,row_scaled": a comma-separated list of kind names; InputError
/// naming the unknown one and the known ones, or for an empty list.
std::vector<InputKind> parse_input_kinds(std::string_view text);

/// The kinds `space` is validated on: MLATUNE_INPUT_KINDS when set (the
/// configurable list; the worker inherits the tuner's environment), else
/// every kind for an attention-shaped space, else normal.  A kind that a
/// space has no buffers for changes nothing.
std::vector<InputKind> input_kinds_for(const SearchSpace& space);
/// Whether the space has the inputs the attention kinds reshape.
bool attention_shaped(const SearchSpace& space);

/// One float32 input buffer on the host: its argument name and extents.
struct HostInput {
  std::string_view name;
  std::vector<std::int64_t> extents;
  std::span<float> data;
};

/// Turns N(0, 1) data of `input` into data of `kind` in place (unchanged for
/// normal and for buffers the kind does not touch).  Deterministic in `seed`.
void apply_input_kind(InputKind kind, const HostInput& input, std::uint64_t seed);

}  // namespace mlatune
