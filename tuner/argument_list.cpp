#include "tuner/argument_list.h"

#include <cstring>

#include <fmt/format.h>

namespace mlatune {

ArgumentList::ArgumentList(const ArgumentLayout& layout, const std::vector<void*>& inputs,
                           const std::vector<void*>& outputs)
    : slots_(layout.slots.size()), pointers_(layout.slots.size(), nullptr) {
  if (inputs.size() + outputs.size() != layout.buffer_count)
    throw EnvironmentError(fmt::format("argument list: {} inputs and {} outputs for {} buffer "
                                       "arguments",
                                       inputs.size(), outputs.size(), layout.buffer_count));
  static_assert(sizeof(void*) <= sizeof(Slot) && sizeof(std::uint64_t) == sizeof(Slot));
  std::size_t input = 0, output = 0;
  for (std::size_t i = 0; i < layout.slots.size(); ++i) {
    const ArgumentSlot& slot = layout.slots[i];
    switch (slot.role) {
      case ArgumentRole::input:
        if (input == inputs.size()) throw EnvironmentError("argument list: too few inputs");
        std::memcpy(slots_[i].bytes, &inputs[input++], sizeof(void*));
        break;
      case ArgumentRole::output:
        if (output == outputs.size()) throw EnvironmentError("argument list: too few outputs");
        std::memcpy(slots_[i].bytes, &outputs[output++], sizeof(void*));
        break;
      case ArgumentRole::scalar:
        std::memcpy(slots_[i].bytes, &slot.packed, sizeof slot.packed);
        break;
      case ArgumentRole::workspace:
        workspace_positions_.push_back(i);  // null until set_workspaces
        break;
    }
    pointers_[i] = slots_[i].bytes;
  }
}

void ArgumentList::set_workspaces(const std::vector<void*>& pointers) {
  if (pointers.size() != workspace_positions_.size())
    throw EnvironmentError(fmt::format("set_workspace: {} pointers for {} workspace arguments",
                                       pointers.size(), workspace_positions_.size()));
  for (std::size_t k = 0; k < pointers.size(); ++k)
    std::memcpy(slots_[workspace_positions_[k]].bytes, &pointers[k], sizeof(void*));
}

}  // namespace mlatune
