# bench_dispatch's baseline calls cudaLaunchKernel itself, so it needs the
# runtime's header; it links the static runtime (starts without libcuda.so.1).
target_include_directories(bench_dispatch PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(bench_dispatch PRIVATE CUDA::cudart_static)
