# store_writer: the helper program that tests/store_process_test.cpp runs as
# real, concurrent and killed, writer processes.
add_executable(store_writer ${CMAKE_SOURCE_DIR}/tests/store_writer_main.cpp)
target_compile_options(store_writer PRIVATE ${MLATUNE_WARNINGS})
target_link_libraries(store_writer PRIVATE mlatune_tuner)
add_dependencies(store_process_test store_writer)
target_compile_definitions(store_process_test PRIVATE MLATUNE_STORE_WRITER="$<TARGET_FILE:store_writer>")

# store_test writes blobs in the zlib format databases held before zstd.
target_link_libraries(store_test PRIVATE ZLIB::ZLIB)
# bench_store_lookup's BM_ReadBinary writes a zlib blob too.
target_link_libraries(bench_store_lookup PRIVATE ZLIB::ZLIB)
