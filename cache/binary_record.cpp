#include "cache/binary_record.h"

#include <nlohmann/json.hpp>

#include "cache/store.h"
#include "core/compiler.h"

namespace mlatune {

CompiledBinary binary_from_record(const BinaryRecord& record) {
  CompiledBinary binary;
  binary.key = BinaryKey{record.key};
  binary.cubin.assign(record.cubin.begin(), record.cubin.end());
  binary.arch = record.arch;
  nlohmann::json j = nlohmann::json::parse(record.resources_json, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    ResourceUsage& u = binary.usage;
    u.registers = j.value("registers", 0);
    u.barriers = j.value("barriers", 0);
    u.shared_bytes = j.value("shared_bytes", std::int64_t{0});
    u.constant_bytes = j.value("constant_bytes", std::int64_t{0});
    u.stack_frame_bytes = j.value("stack_frame_bytes", std::int64_t{0});
    u.spill_store_bytes = j.value("spill_store_bytes", std::int64_t{0});
    u.spill_load_bytes = j.value("spill_load_bytes", std::int64_t{0});
    binary.entry = j.value("entry", std::string());
    binary.options = j.value("options", std::vector<std::string>{});
  }
  binary.log = "(loaded from the database; not compiled in this process)";
  return binary;
}


BinaryRecord binary_record(const CompiledBinary& binary, const std::string& kernel_name,
                           const std::string& template_hash) {
  BinaryRecord record;
  record.key = binary.key.hash;
  record.kernel_name = kernel_name;
  record.template_hash = template_hash;
  record.nvrtc_version = nvrtc_version();
  record.arch = binary.arch;
  record.cubin.assign(binary.cubin.begin(), binary.cubin.end());
  const ResourceUsage& u = binary.usage;
  nlohmann::json j = {{"registers", u.registers},
                      {"barriers", u.barriers},
                      {"shared_bytes", u.shared_bytes},
                      {"constant_bytes", u.constant_bytes},
                      {"stack_frame_bytes", u.stack_frame_bytes},
                      {"spill_store_bytes", u.spill_store_bytes},
                      {"spill_load_bytes", u.spill_load_bytes},
                      {"entry", binary.entry},
                      {"options", binary.options}};
  record.resources_json = j.dump();
  return record;
}

}  // namespace mlatune
