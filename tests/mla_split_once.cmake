# The UNROLL 2 (split once) template test reads PTX from NVRTC (tests/nvrtc_ptx.h).
target_include_directories(mla_split_once_templates_test PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(mla_split_once_templates_test PRIVATE CUDA::nvrtc)
