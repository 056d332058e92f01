# mlatune-worker: the process that owns the CUDA context while candidates run
# (tuner/worker/client.h).  Its main is tuner/worker/main.cpp; the rest of
# tuner/worker/ is in the mlatune_tuner library.
add_executable(mlatune-worker ${CMAKE_SOURCE_DIR}/tuner/worker/main.cpp)
target_compile_options(mlatune-worker PRIVATE ${MLATUNE_WARNINGS})
target_link_libraries(mlatune-worker PRIVATE mlatune_tuner)
# The mlatune program finds its worker beside itself.
add_dependencies(mlatune mlatune-worker)
