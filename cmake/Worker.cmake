# mlatune-worker: the process that owns the CUDA context while candidates run
# (tuner/worker.h).  Its main lives in tuner/worker/, outside the core glob.
add_executable(mlatune-worker ${CMAKE_SOURCE_DIR}/tuner/worker/main.cpp)
target_compile_options(mlatune-worker PRIVATE ${MLATUNE_WARNINGS})
target_link_libraries(mlatune-worker PRIVATE mlatune_tuner)
# The mlatune program finds its worker beside itself.
add_dependencies(mlatune mlatune-worker)
