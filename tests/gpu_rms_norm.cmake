# gpu_rms_norm_test copies its buffers to and from the GPU itself (the C ABI
# takes the caller's device pointers), so it needs the runtime's header; it
# links the static runtime (starts without libcuda.so.1).
target_include_directories(gpu_rms_norm_test PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(gpu_rms_norm_test PRIVATE CUDA::cudart_static)
