#include "core/binary_image.h"

#include <cstdint>

#include <fmt/format.h>

#include "core/error.h"

namespace mlatune {
namespace {

constexpr std::string_view pack_magic = "MLTPACK1";
// More cubins than any space has kernels: a count beyond it is damage.
constexpr std::uint32_t max_cubins = 64;

void put(std::string& out, std::uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out += static_cast<char>((value >> (8 * i)) & 0xff);
}

std::uint64_t get(std::string_view in, std::size_t at, int bytes) {
  std::uint64_t value = 0;
  for (int i = 0; i < bytes; ++i) value |= std::uint64_t{static_cast<unsigned char>(in[at + i])} << (8 * i);
  return value;
}

}  // namespace

std::string pack_images(const std::vector<std::string_view>& cubins) {
  if (cubins.size() == 1) return std::string(cubins.front());
  if (cubins.empty() || cubins.size() > max_cubins)
    throw InternalError(fmt::format("pack_images: {} cubins; expected 1 to {}", cubins.size(), max_cubins));
  std::size_t total = pack_magic.size() + 4;
  for (std::string_view c : cubins) total += 8 + c.size();
  std::string out;
  out.reserve(total);
  out += pack_magic;
  put(out, cubins.size(), 4);
  for (std::string_view c : cubins) {
    put(out, c.size(), 8);
    out += c;
  }
  return out;
}

bool is_image_pack(std::string_view image) { return image.starts_with(pack_magic); }

std::vector<std::string_view> unpack_images(std::string_view image) {
  if (!is_image_pack(image)) return {image};
  auto damaged = [&](const std::string& why) {
    return EnvironmentError(fmt::format("a packed binary of {} bytes is damaged: {}; delete it from the database "
                                        "(`mlatune cache prune` or its row) and it is compiled again",
                                        image.size(), why));
  };
  std::size_t at = pack_magic.size();
  if (image.size() < at + 4) throw damaged("it ends inside its header");
  const std::uint64_t count = get(image, at, 4);
  at += 4;
  if (count == 0 || count > max_cubins)
    throw damaged(fmt::format("it says it holds {} cubins, expected 1 to {}", count, max_cubins));
  std::vector<std::string_view> out;
  for (std::uint64_t i = 0; i < count; ++i) {
    if (image.size() - at < 8) throw damaged(fmt::format("it ends before the size of cubin {} of {}", i + 1, count));
    const std::uint64_t size = get(image, at, 8);
    at += 8;
    if (size > image.size() - at)
      throw damaged(fmt::format("cubin {} of {} says it has {} bytes, {} are left", i + 1, count, size,
                                image.size() - at));
    out.push_back(image.substr(at, size));
    at += size;
  }
  if (at != image.size()) throw damaged(fmt::format("{} bytes follow its last cubin", image.size() - at));
  return out;
}

}  // namespace mlatune
