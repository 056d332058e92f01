# gpu_dispatch_test captures a dispatched launch into a CUDA graph (a raced
# launch must not be timed there), so it calls the CUDA runtime itself.
target_include_directories(gpu_dispatch_test PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(gpu_dispatch_test PRIVATE CUDA::cudart_static)
