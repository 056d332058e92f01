// The conversion between a compiled binary and the row the store keeps for it,
// shared by the dispatcher (which stores what it had to compile) and the
// tuner's binary cache.
#pragma once
#include <string>

namespace mlatune {

struct BinaryRecord;
struct CompiledBinary;

/// A compiled binary as the database keeps it: the cubin, what went into it
/// (kernel name, template hash, NVRTC version, architecture) and its ptxas
/// report with the entry and options as JSON.
BinaryRecord binary_record(const CompiledBinary& binary, const std::string& kernel_name,
                           const std::string& template_hash);

/// The reverse: a stored row as a CompiledBinary (its log says it was loaded).
CompiledBinary binary_from_record(const BinaryRecord& record);

}  // namespace mlatune
