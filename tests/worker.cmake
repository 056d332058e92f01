# The worker tests start the real mlatune-worker program.
add_dependencies(worker_test mlatune-worker)
add_dependencies(gpu_evaluator_test mlatune-worker)

# worker_parent: the tuner's stand-in that tests/worker_lifetime_test.cpp kills.
add_executable(worker_parent ${CMAKE_SOURCE_DIR}/tests/worker_parent_main.cpp)
target_compile_options(worker_parent PRIVATE ${MLATUNE_WARNINGS})
target_link_libraries(worker_parent PRIVATE mlatune_tuner)
add_dependencies(worker_lifetime_test worker_parent mlatune-worker)
target_compile_definitions(worker_lifetime_test PRIVATE MLATUNE_WORKER_PARENT="$<TARGET_FILE:worker_parent>")
# The GPU check of the same, through the real `mlatune tune`.
add_dependencies(gpu_worker_lifetime_test mlatune mlatune-worker)
