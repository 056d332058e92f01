# The wgmma tests read the toolkit's headers: the tile test copies with the
# CUDA runtime, the template test reads PTX from NVRTC.
foreach(target gpu_wgmma_tile_test mla_wgmma_templates_test)
  target_include_directories(${target} PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
  target_link_libraries(${target} PRIVATE CUDA::nvrtc CUDA::cudart_static)
endforeach()
target_include_directories(mla_expand_templates_test PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
target_link_libraries(mla_expand_templates_test PRIVATE CUDA::nvrtc)
