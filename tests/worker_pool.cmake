# fake_gpu_worker: a worker that pretends to be a GPU (tests/fake_gpu_worker_main.cpp),
# so that sweeps over several workers are tested without one.
add_executable(fake_gpu_worker ${CMAKE_SOURCE_DIR}/tests/fake_gpu_worker_main.cpp)
target_compile_options(fake_gpu_worker PRIVATE ${MLATUNE_WARNINGS})
target_link_libraries(fake_gpu_worker PRIVATE mlatune_tuner)
target_include_directories(fake_gpu_worker PRIVATE ${CMAKE_SOURCE_DIR})
add_dependencies(worker_pool_test fake_gpu_worker)
target_compile_definitions(worker_pool_test PRIVATE MLATUNE_FAKE_GPU_WORKER="$<TARGET_FILE:fake_gpu_worker>")
add_dependencies(tune_gpus_cli_test fake_gpu_worker mlatune)
target_compile_definitions(tune_gpus_cli_test PRIVATE MLATUNE_FAKE_GPU_WORKER="$<TARGET_FILE:fake_gpu_worker>")
# The real two-GPU sweep (skips with fewer than two GPUs).
add_dependencies(gpu_multi_gpu_test mlatune mlatune-worker)
