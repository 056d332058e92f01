# Test programs, by file name:
#   tests/<name>_test.cpp      GoogleTest, no GPU needed; label "unit"
#   tests/gpu_<name>_test.cpp  GoogleTest that needs a GPU; label "gpu".  Always
#                              built; each test skips with a reason without a GPU.
#   tests/bench_<name>.cpp     Google Benchmark; also run as a CTest smoke test
#                              with a tiny time budget (label "bench") so it cannot rot.
#   tests/<name>.cmake         extra targets a test needs (helper programs, ...)
include(GoogleTest)

# Every GoogleTest program starts in tests/test_main.cpp (NVRTC's compute
# cache must be off before NVRTC loads; see core/compiler.h).
add_library(mlatune_test_main STATIC ${CMAKE_SOURCE_DIR}/tests/test_main.cpp)
target_link_libraries(mlatune_test_main PRIVATE mlatune_tuner GTest::gtest)
target_include_directories(mlatune_test_main PRIVATE ${CMAKE_SOURCE_DIR})

function(mlatune_add_gtest source)
  get_filename_component(name ${source} NAME_WE)
  add_executable(${name} ${source})
  target_compile_options(${name} PRIVATE ${MLATUNE_WARNINGS})
  target_link_libraries(${name} PRIVATE mlatune_test_main mlatune_tuner GTest::gtest)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_definitions(${name} PRIVATE
    MLATUNE_TEST_DATA_DIR="${CMAKE_SOURCE_DIR}/tests"
    MLATUNE_BINARY_DIR="${CMAKE_BINARY_DIR}")
  set(label unit)
  if(name MATCHES "^gpu_")
    set(label gpu)
  endif()
  gtest_discover_tests(${name} PROPERTIES LABELS ${label} DISCOVERY_TIMEOUT 60)
endfunction()

file(GLOB MLATUNE_TEST_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/*_test.cpp)
foreach(source IN LISTS MLATUNE_TEST_SOURCES)
  mlatune_add_gtest(${source})
endforeach()

# A smoke run's arguments beyond the tiny time budget, where the whole run
# would cost minutes: bench_strategies replays the small S0/S1 fixture with
# one seed and only the 5 % replays (its table over every fixture and 10
# seeds took 411 s of a CI run; strategy_test judges the target).
# bench_compile: the prologue-apart comparison over 48 configs takes minutes.
set(MLATUNE_SMOKE_ARGS_bench_compile --benchmark_filter=-FlagshipApart/.*/configs:48)
set(MLATUNE_SMOKE_ARGS_bench_strategies --seeds 1 --fixture ${CMAKE_SOURCE_DIR}/tests/data/h200_sweeps.csv
    --benchmark_filter=FivePercent)

file(GLOB MLATUNE_BENCH_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/bench_*.cpp)
foreach(source IN LISTS MLATUNE_BENCH_SOURCES)
  get_filename_component(name ${source} NAME_WE)
  add_executable(${name} ${source})
  target_compile_options(${name} PRIVATE ${MLATUNE_WARNINGS})
  target_link_libraries(${name} PRIVATE mlatune_tuner benchmark::benchmark)
  target_include_directories(${name} PRIVATE ${CMAKE_SOURCE_DIR})
  target_compile_definitions(${name} PRIVATE
    MLATUNE_TEST_DATA_DIR="${CMAKE_SOURCE_DIR}/tests" MLATUNE_BINARY_DIR="${CMAKE_BINARY_DIR}")
  add_test(NAME ${name}_smoke COMMAND ${name} --benchmark_min_time=0.01 ${MLATUNE_SMOKE_ARGS_${name}})
  set_tests_properties(${name}_smoke PROPERTIES LABELS bench)
endforeach()

file(GLOB MLATUNE_TEST_EXTRAS CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/tests/*.cmake)
list(REMOVE_ITEM MLATUNE_TEST_EXTRAS ${CMAKE_SOURCE_DIR}/tests/Tests.cmake)
foreach(extra IN LISTS MLATUNE_TEST_EXTRAS)
  include(${extra})
endforeach()
