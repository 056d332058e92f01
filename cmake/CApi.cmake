# libmlatune_c.so: the C ABI of cache/c_api.h (any kernel family) and
# cache/mla_c_api.h (typed fused MLA entry points) as a shared library, for
# callers that cannot link C++ (Python through ctypes, a PyTorch extension).
#
# mlatune_runtime (and the core below it; never the tuner) is linked in
# statically, with the CUDA runtime (cudart_static).  A version script keeps
# every symbol local except the C ABI's functions, each named there, so the
# library's C++ internals (and its private copy of the CUDA runtime) can never
# clash with those of the process that loads it.  (The script, not
# -fvisibility=hidden, is what hides them: it covers the objects of static
# archives too, and the ABI headers need no export macro.)  The C ABI sources
# are compiled into the library itself: a static archive only contributes
# the objects something references, and nothing inside the library would
# pull them.
set_target_properties(mlatune_core mlatune_runtime PROPERTIES POSITION_INDEPENDENT_CODE ON)

# Debian's libyaml-cpp.a is not position-independent, so this library takes
# yaml-cpp's shared object instead, bundled into ${CMAKE_BINARY_DIR}/lib like
# muParser (the GPU machine has no yaml-cpp 0.7).  Named right after
# mlatune_core, it resolves the core's yaml-cpp references before the static
# archive that mlatune_core names comes on the link line, which then adds
# nothing.
find_library(MLATUNE_YAML_CPP_SHARED NAMES libyaml-cpp.so REQUIRED)
mlatune_bundle_shared_library(${MLATUNE_YAML_CPP_SHARED})

add_library(mlatune_c SHARED ${CMAKE_SOURCE_DIR}/cache/c_api.cpp ${CMAKE_SOURCE_DIR}/cache/mla_c_api.cpp)
target_compile_options(mlatune_c PRIVATE ${MLATUNE_WARNINGS})
target_link_libraries(mlatune_c PRIVATE mlatune_runtime mlatune_core ${MLATUNE_YAML_CPP_SHARED}
                      CUDA::cudart_static CUDA::nvrtc)
set(MLATUNE_C_VERSION_SCRIPT ${CMAKE_SOURCE_DIR}/cmake/mlatune_c.version)
target_link_options(mlatune_c PRIVATE
  "LINKER:--version-script=${MLATUNE_C_VERSION_SCRIPT}"
  "LINKER:--exclude-libs,ALL"   # belt and braces: nothing from a static archive is exported
  "LINKER:--no-undefined")      # every dependency is named, so dlopen cannot fail late
set_target_properties(mlatune_c PROPERTIES LINK_DEPENDS ${MLATUNE_C_VERSION_SCRIPT})
