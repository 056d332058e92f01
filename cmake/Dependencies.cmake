# Dependencies that need care so that binaries built on Debian 12 also start on
# the Ubuntu 24.04 GPU machine: yaml-cpp is linked statically (0.7 is absent
# there) and shared libraries that may be absent there (muParser, Google
# Benchmark) are copied into ${CMAKE_BINARY_DIR}/lib, found through $ORIGIN.

find_library(MLATUNE_YAML_CPP_STATIC NAMES libyaml-cpp.a REQUIRED)
add_library(mlatune::yaml_cpp_static STATIC IMPORTED)
set_target_properties(mlatune::yaml_cpp_static PROPERTIES IMPORTED_LOCATION ${MLATUNE_YAML_CPP_STATIC})
find_path(MLATUNE_YAML_CPP_INCLUDE yaml-cpp/yaml.h REQUIRED)
target_include_directories(mlatune::yaml_cpp_static INTERFACE ${MLATUNE_YAML_CPP_INCLUDE})

find_package(muparser QUIET)
find_library(MLATUNE_MUPARSER_LIB NAMES muparser REQUIRED)
find_path(MLATUNE_MUPARSER_INCLUDE muParser.h PATH_SUFFIXES muparser REQUIRED)
add_library(mlatune::muparser SHARED IMPORTED)
set_target_properties(mlatune::muparser PROPERTIES IMPORTED_LOCATION ${MLATUNE_MUPARSER_LIB})
target_include_directories(mlatune::muparser INTERFACE ${MLATUNE_MUPARSER_INCLUDE})

# Copy the real files (with their sonames) of bundled shared libraries.
function(mlatune_bundle_shared_library lib)
  get_filename_component(real "${lib}" REALPATH)
  execute_process(COMMAND objdump -p "${real}" OUTPUT_VARIABLE dump)
  string(REGEX MATCH "SONAME +([^\n ]+)" _ "${dump}")
  set(soname "${CMAKE_MATCH_1}")
  if(soname)
    file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/lib)
    configure_file("${real}" "${CMAKE_BINARY_DIR}/lib/${soname}" COPYONLY)
  endif()
endfunction()
mlatune_bundle_shared_library(${MLATUNE_MUPARSER_LIB})
get_target_property(_bench_loc benchmark::benchmark LOCATION)
if(_bench_loc MATCHES "\\.so")
  mlatune_bundle_shared_library(${_bench_loc})
endif()
get_target_property(_zstd_loc zstd::libzstd_shared LOCATION)
mlatune_bundle_shared_library(${_zstd_loc})
get_target_property(_fmt_loc fmt::fmt LOCATION)
if(_fmt_loc MATCHES "\\.so")
  mlatune_bundle_shared_library(${_fmt_loc})
endif()
