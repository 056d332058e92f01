// What a compiled binary holds: one cubin (an ELF image, as NVRTC gives it),
// or the cubins of one config compiled in parts (the space's
// prologue.apart: the main kernel's and the prologue's), packed into one
// string so that the binary key, the store, the worker's protocol and the
// dispatcher carry it as they carry a cubin.  LoadedKernel loads every
// cubin of an image and finds an entry in whichever holds it.
//
// A pack: "MLTPACK1", the number of cubins (4 bytes, little-endian), then
// each cubin as its size (8 bytes, little-endian) and its bytes.  A cubin
// starts with "\x7fELF", so neither is taken for the other.
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace mlatune {

/// One image of `cubins`, in order; a single cubin is returned as it is.
std::string pack_images(const std::vector<std::string_view>& cubins);

/// Whether `image` is a pack (else it is taken for one cubin).
bool is_image_pack(std::string_view image);

/// The cubins of `image`, viewing into it: itself where it is not a pack.
/// Throws EnvironmentError saying what is wrong with a pack that is cut
/// short, has bytes past its last cubin, or holds no cubin.
std::vector<std::string_view> unpack_images(std::string_view image);

}  // namespace mlatune
