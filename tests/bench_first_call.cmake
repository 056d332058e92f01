# bench_first_call zeroes its buffers with cudaMemset, so it needs the
# runtime's header; it links the static runtime (starts without libcuda.so.1).
target_include_directories(bench_first_call PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(bench_first_call PRIVATE CUDA::cudart_static)
