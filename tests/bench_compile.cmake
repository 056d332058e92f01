# bench_compile also drives NVRTC directly (one program holding several
# configs through nvrtcAddNameExpression, which the Compiler does not offer).
target_link_libraries(bench_compile PRIVATE CUDA::nvrtc)
