# run_cli_test runs the mlatune program, and once with disagreeing_worker in
# place of mlatune-worker (tests/disagreeing_worker_main.cpp).
add_dependencies(run_cli_test mlatune)
add_executable(disagreeing_worker ${CMAKE_SOURCE_DIR}/tests/disagreeing_worker_main.cpp)
target_compile_options(disagreeing_worker PRIVATE ${MLATUNE_WARNINGS})
target_link_libraries(disagreeing_worker PRIVATE mlatune_tuner)
target_include_directories(disagreeing_worker PRIVATE ${CMAKE_SOURCE_DIR})
add_dependencies(run_cli_test disagreeing_worker)
target_compile_definitions(run_cli_test PRIVATE MLATUNE_DISAGREEING_WORKER="$<TARGET_FILE:disagreeing_worker>")
