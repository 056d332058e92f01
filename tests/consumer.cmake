# cmake_package_consumer: `cmake --install` into a temporary prefix, then
# tests/consumer (find_package(mlatune CONFIG), mlatune::c and
# mlatune::runtime) configured, built and run against it, with the installed
# CLI and Python package (tests/consumer/run.cmake).  Needs the whole build
# (it installs what `cmake --build` made).  Works without a GPU.
find_package(Python3 COMPONENTS Interpreter)
get_filename_component(_consumer_cuda_root ${CUDAToolkit_BIN_DIR} DIRECTORY)
add_test(NAME cmake_package_consumer
         COMMAND ${CMAKE_COMMAND} -DBUILD_DIR=${CMAKE_BINARY_DIR} -DSOURCE_DIR=${CMAKE_SOURCE_DIR}
                 -DWORK_DIR=${CMAKE_BINARY_DIR}/consumer_test -DGENERATOR=${CMAKE_GENERATOR}
                 -DCXX_COMPILER=${CMAKE_CXX_COMPILER}
                 -DCUDA_ROOT=${_consumer_cuda_root} -DPYTHON=${Python3_EXECUTABLE}
                 -P ${CMAKE_SOURCE_DIR}/tests/consumer/run.cmake)
set_tests_properties(cmake_package_consumer PROPERTIES LABELS unit TIMEOUT 900)
