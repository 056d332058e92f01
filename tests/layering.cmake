# The arrows of cmake/Layers.cmake, checked on every test run: a runtime file
# that includes a tuner header, or a core file that includes a runtime header,
# fails to compile.  Each probe is an object library outside `all`, compiled
# exactly as sources of its layer are (that layer's include root only); the
# test builds it and passes when the build fails.  A control probe with
# allowed includes must build, so the failures cannot come from elsewhere.
function(mlatune_layering_probe name source layer expect_failure)
  add_library(${name} OBJECT EXCLUDE_FROM_ALL ${CMAKE_SOURCE_DIR}/tests/layering/${source})
  get_target_property(roots ${layer} INTERFACE_INCLUDE_DIRECTORIES)
  # The layer's own include root, not what it links: a library's users see
  # the layers below it, its own sources must too, and nothing more.
  target_include_directories(${name} PRIVATE ${roots})
  target_link_libraries(${name} PRIVATE fmt::fmt)
  add_test(NAME layering.${name}
           COMMAND ${CMAKE_COMMAND} --build ${CMAKE_BINARY_DIR} --target ${name})
  set_tests_properties(layering.${name} PROPERTIES LABELS unit WILL_FAIL ${expect_failure}
                       RESOURCE_LOCK mlatune_build_tree)
endfunction()

mlatune_layering_probe(layering_runtime_includes_tuner runtime_includes_tuner.cpp mlatune_runtime TRUE)
mlatune_layering_probe(layering_core_includes_cache core_includes_cache.cpp mlatune_core TRUE)
mlatune_layering_probe(layering_runtime_includes_core runtime_includes_core.cpp mlatune_runtime FALSE)

# The same arrows read from the #include lines of every source (no compiler
# involved), so a forbidden include in a file no target builds is caught too.
find_package(Python3 COMPONENTS Interpreter REQUIRED)
add_test(NAME layering.include_graph COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/scripts/layer-graph)
set_tests_properties(layering.include_graph PROPERTIES LABELS unit)
