# `cmake --install build --prefix P` lays out:
#   P/bin/mlatune, P/bin/mlatune-worker           the CLI and its GPU worker (beside it)
#   P/lib/libmlatune_c.so                          the C ABI (cache/c_api.h, cache/mla_c_api.h)
#   P/lib/libmlatune_runtime.a, libmlatune_core.a  the C++ runtime (dispatcher, store) and its core
#   P/lib/<bundled shared libraries>               muParser, fmt, yaml-cpp, zstd: absent or another
#                                                  version on the GPU machine (cmake/Dependencies.cmake)
#   P/lib/mlatune/libyaml-cpp.a                    the static yaml-cpp the core links
#   P/include/mlatune/{core,cache}/*.h             headers, included as "cache/c_api.h"
#   P/share/mlatune/{search_spaces,templates}      the shipped spaces (their ../templates/ paths hold)
#   P/lib/mlatune/python/mlatune                   the Python package (PYTHONPATH=P/lib/mlatune/python)
#   P/lib/cmake/mlatune                            find_package(mlatune CONFIG): mlatune::c, mlatune::runtime
#
# Headers: every header of core/ and cache/ is installed.  The C++ dispatcher
# headers (cache/dispatcher.h, cache/mla.h, and the core headers they include)
# include only the standard library, so they are usable from outside with
# mlatune::runtime; third-party headers (SQLite, NVRTC, CUDA, yaml-cpp) stay
# in the .cpp files, as STYLE.md asks.
set(MLATUNE_INSTALL_LIBDIR lib)
set(MLATUNE_INSTALL_INCLUDEDIR include/mlatune)
set(MLATUNE_INSTALL_DATADIR share/mlatune)
set(MLATUNE_INSTALL_PYTHONDIR lib/mlatune/python)
set(MLATUNE_INSTALL_CMAKEDIR lib/cmake/mlatune)

# Installed programs find the bundled libraries in ../lib, the C library
# beside itself, and NVRTC in the toolkit it was built with (its lib64/ too:
# some installations have only one of lib/ and lib64/).
get_filename_component(_toolkit_root ${CUDAToolkit_LIBRARY_DIR} DIRECTORY)
set(MLATUNE_TOOLKIT_RPATH ${CUDAToolkit_LIBRARY_DIR} ${_toolkit_root}/lib64)
list(REMOVE_DUPLICATES MLATUNE_TOOLKIT_RPATH)
set_target_properties(mlatune mlatune-worker PROPERTIES
  INSTALL_RPATH "\$ORIGIN/../${MLATUNE_INSTALL_LIBDIR};${MLATUNE_TOOLKIT_RPATH}")
set_target_properties(mlatune_c PROPERTIES INSTALL_RPATH "\$ORIGIN;${MLATUNE_TOOLKIT_RPATH}")

install(TARGETS mlatune mlatune-worker RUNTIME DESTINATION bin)

# mlatune::c needs nothing from the consumer's machine but NVRTC at run
# time; mlatune::runtime needs the build's development packages (below).
set_target_properties(mlatune_c PROPERTIES EXPORT_NAME c)
target_include_directories(mlatune_c INTERFACE $<INSTALL_INTERFACE:${MLATUNE_INSTALL_INCLUDEDIR}>)
install(TARGETS mlatune_c EXPORT mlatuneCTargets LIBRARY DESTINATION ${MLATUNE_INSTALL_LIBDIR})
install(EXPORT mlatuneCTargets NAMESPACE mlatune:: DESTINATION ${MLATUNE_INSTALL_CMAKEDIR})

set_target_properties(mlatune_runtime PROPERTIES EXPORT_NAME runtime)
set_target_properties(mlatune_core PROPERTIES EXPORT_NAME core)
install(TARGETS mlatune_runtime mlatune_core EXPORT mlatuneRuntimeTargets
        ARCHIVE DESTINATION ${MLATUNE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${MLATUNE_INSTALL_INCLUDEDIR})
install(EXPORT mlatuneRuntimeTargets NAMESPACE mlatune:: DESTINATION ${MLATUNE_INSTALL_CMAKEDIR})
install(FILES ${MLATUNE_YAML_CPP_STATIC} DESTINATION ${MLATUNE_INSTALL_LIBDIR}/mlatune)

foreach(folder core cache)
  install(DIRECTORY ${CMAKE_SOURCE_DIR}/${folder}/ DESTINATION ${MLATUNE_INSTALL_INCLUDEDIR}/${folder}
          FILES_MATCHING PATTERN "*.h")
endforeach()

# The shared libraries the build bundled (cmake/Dependencies.cmake, CApi.cmake)
# that the installed programs and libmlatune_c.so load.
install(DIRECTORY ${CMAKE_BINARY_DIR}/lib/ DESTINATION ${MLATUNE_INSTALL_LIBDIR}
        FILES_MATCHING PATTERN "libmuparser.so*" PATTERN "libfmt.so*" PATTERN "libyaml-cpp.so*"
        PATTERN "libzstd.so*")
# The runtime's imported muParser target points at the bundled copy (by soname).
file(GLOB MLATUNE_MUPARSER_BUNDLED RELATIVE ${CMAKE_BINARY_DIR}/lib ${CMAKE_BINARY_DIR}/lib/libmuparser.so*)
get_filename_component(MLATUNE_YAML_CPP_STATIC_NAME ${MLATUNE_YAML_CPP_STATIC} NAME)

install(DIRECTORY ${CMAKE_SOURCE_DIR}/search_spaces ${CMAKE_SOURCE_DIR}/templates
        DESTINATION ${MLATUNE_INSTALL_DATADIR})

# The Python package, with a _paths.py that names the library and spaces of
# this prefix relative to itself (cmake/Python.cmake writes the build tree's).
install(DIRECTORY ${CMAKE_SOURCE_DIR}/python/mlatune DESTINATION ${MLATUNE_INSTALL_PYTHONDIR}
        PATTERN "_paths.py" EXCLUDE PATTERN "__pycache__" EXCLUDE)
set(_package /prefix/${MLATUNE_INSTALL_PYTHONDIR}/mlatune)
file(RELATIVE_PATH MLATUNE_PY_TO_LIB ${_package} /prefix/${MLATUNE_INSTALL_LIBDIR})
file(RELATIVE_PATH MLATUNE_PY_TO_BIN ${_package} /prefix/bin)
file(RELATIVE_PATH MLATUNE_PY_TO_SPACES ${_package} /prefix/${MLATUNE_INSTALL_DATADIR}/search_spaces)
configure_file(${CMAKE_SOURCE_DIR}/cmake/installed_paths.py.in ${CMAKE_BINARY_DIR}/python-install/_paths.py @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/python-install/_paths.py
        DESTINATION ${MLATUNE_INSTALL_PYTHONDIR}/mlatune)

# The CMake package.
include(CMakePackageConfigHelpers)
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/mlatuneConfig.cmake.in
  ${CMAKE_BINARY_DIR}/package/mlatuneConfig.cmake
  INSTALL_DESTINATION ${MLATUNE_INSTALL_CMAKEDIR}
  PATH_VARS MLATUNE_INSTALL_LIBDIR MLATUNE_INSTALL_DATADIR)
write_basic_package_version_file(${CMAKE_BINARY_DIR}/package/mlatuneConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/package/mlatuneConfig.cmake
              ${CMAKE_BINARY_DIR}/package/mlatuneConfigVersion.cmake
        DESTINATION ${MLATUNE_INSTALL_CMAKEDIR})
