# libFuzzer targets: tests/fuzz/<name>_fuzz.cpp, each with LLVMFuzzerTestOneInput.
#
# Included by CMakeLists.txt when MLATUNE_FUZZ is on.  The layer libraries the
# targets exercise are instrumented for coverage (fuzzer-no-link) and built with
# ASan and UBSan; every program that links them gets the sanitizer runtimes
# through mlatune_core's link options, so a fuzz build dir still builds whole.
# UBSan findings abort (no recover): a report the fuzzer only prints would not
# count as a crash.  yaml-cpp and muParser stay the distribution's
# uninstrumented builds, which ASan tolerates.
#
# Each target also gets a CTest (label "fuzz") that runs it once over its
# committed corpus and regression inputs: a quick check that none of them
# crashes any more.  scripts/fuzz does the timed runs.
if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
  message(FATAL_ERROR "MLATUNE_FUZZ needs clang (libFuzzer); configure with CXX=clang++ "
                      "(found ${CMAKE_CXX_COMPILER_ID}); scripts/fuzz does this")
endif()

set(MLATUNE_SANITIZERS -fsanitize=address,undefined -fno-sanitize-recover=all)
foreach(layer mlatune_core mlatune_runtime mlatune_tuner)
  target_compile_options(${layer} PRIVATE -fsanitize=fuzzer-no-link ${MLATUNE_SANITIZERS}
                                          -fno-omit-frame-pointer)
endforeach()
target_link_options(mlatune_core INTERFACE ${MLATUNE_SANITIZERS})
# The toolkit's targets name the driver stub (libcuda.so); Debian's gcc links
# as needed and drops it, Debian's clang does not, and a binary that needs
# libcuda.so.1 does not start on a machine without a driver (like CI).
target_link_options(mlatune_core INTERFACE -Wl,--as-needed)

set(MLATUNE_FUZZ_DIR ${CMAKE_SOURCE_DIR}/tests/fuzz)
file(GLOB MLATUNE_FUZZ_SOURCES CONFIGURE_DEPENDS ${MLATUNE_FUZZ_DIR}/*_fuzz.cpp)
add_custom_target(mlatune_fuzzers)
foreach(source IN LISTS MLATUNE_FUZZ_SOURCES)
  get_filename_component(name ${source} NAME_WE)
  add_executable(${name} ${source})
  target_compile_options(${name} PRIVATE ${MLATUNE_WARNINGS} -fsanitize=fuzzer ${MLATUNE_SANITIZERS}
                                         -fno-omit-frame-pointer)
  target_link_options(${name} PRIVATE -fsanitize=fuzzer ${MLATUNE_SANITIZERS})
  target_link_libraries(${name} PRIVATE mlatune_tuner)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_definitions(${name} PRIVATE MLATUNE_TEST_DATA_DIR="${CMAKE_SOURCE_DIR}/tests")
  add_dependencies(mlatune_fuzzers ${name})

  string(REGEX REPLACE "_fuzz$" "" short ${name})
  set(inputs ${MLATUNE_FUZZ_DIR}/corpus/${short})
  if(EXISTS ${MLATUNE_FUZZ_DIR}/regressions/${short})
    list(APPEND inputs ${MLATUNE_FUZZ_DIR}/regressions/${short})
  endif()
  add_test(NAME ${name}_corpus COMMAND ${name} -runs=0 -timeout=10 -rss_limit_mb=2048 ${inputs})
  set_tests_properties(${name}_corpus PROPERTIES LABELS fuzz)
endforeach()

# Writes the worker protocol seeds from the real encoders (tests/fuzz/make-corpus).
add_executable(make_worker_corpus ${MLATUNE_FUZZ_DIR}/make_worker_corpus.cpp)
target_link_libraries(make_worker_corpus PRIVATE mlatune_tuner)
target_include_directories(make_worker_corpus PRIVATE ${CMAKE_SOURCE_DIR})
