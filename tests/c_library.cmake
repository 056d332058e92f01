# c_library_test loads libmlatune_c.so with dlopen and reads its dynamic
# symbol table with the toolchain's nm.
add_dependencies(c_library_test mlatune_c)
target_link_libraries(c_library_test PRIVATE ${CMAKE_DL_LIBS})
target_compile_definitions(c_library_test PRIVATE MLATUNE_NM="${CMAKE_NM}")
