# Layers with one-way arrows, enforced by include paths.
#
#   core/   errors, device identity, CUDA wrappers, space model, compiler, launch plan
#   cache/  store, dispatcher, shape table, C ABI           (sees core/)
#   tuner/  sweep, strategies, worker, evaluator, workload  (sees core/ and cache/)
#   cli/    the mlatune program                             (sees everything)
#
# Every include is written from the source root ("cache/store.h").  A layer's
# sources are compiled with an include root that holds links to the folders
# it may see and nothing else, so "tuner/sweep.h" written in cache/ is a
# compile error ("No such file or directory"), not a review comment.
# tests/layering.cmake proves it on every test run.
#
# mlatune_layer_root(OUT_VAR name folder...) makes ${CMAKE_BINARY_DIR}/layers/<name>
# with one link per folder and returns its path.
function(mlatune_layer_root out_var name)
  set(root ${CMAKE_BINARY_DIR}/layers/${name})
  file(MAKE_DIRECTORY ${root})
  foreach(folder IN LISTS ARGN)
    if(NOT EXISTS ${root}/${folder})
      file(CREATE_LINK ${CMAKE_SOURCE_DIR}/${folder} ${root}/${folder} SYMBOLIC)
    endif()
  endforeach()
  set(${out_var} ${root} PARENT_SCOPE)
endfunction()

mlatune_layer_root(MLATUNE_CORE_ROOT core core)
mlatune_layer_root(MLATUNE_RUNTIME_ROOT runtime core cache)
mlatune_layer_root(MLATUNE_TUNER_ROOT tuner core cache tuner)
