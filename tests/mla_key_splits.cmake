# The KEY_SPLITS template test reads PTX from NVRTC (tests/nvrtc_ptx.h).
target_include_directories(mla_key_splits_templates_test PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(mla_key_splits_templates_test PRIVATE CUDA::nvrtc)
