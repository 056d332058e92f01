# The sharding and report tests run the mlatune program; the cluster recipes
# in docs/examples/ (Slurm job array, ssh loop, GNU parallel) cannot run here,
# so their syntax is checked (bash -n, and shellcheck where installed).
add_dependencies(shard_replay_test mlatune)
add_dependencies(report_cli_test mlatune)

file(GLOB MLATUNE_CLUSTER_SCRIPTS CONFIGURE_DEPENDS
  ${CMAKE_SOURCE_DIR}/docs/examples/*.sh ${CMAKE_SOURCE_DIR}/docs/examples/*.sbatch)
foreach(script IN LISTS MLATUNE_CLUSTER_SCRIPTS)
  get_filename_component(name ${script} NAME)
  add_test(NAME cluster_script_syntax_${name} COMMAND bash -n ${script})
  set_tests_properties(cluster_script_syntax_${name} PROPERTIES LABELS unit)
endforeach()
find_program(MLATUNE_SHELLCHECK shellcheck)
if(MLATUNE_SHELLCHECK)
  add_test(NAME cluster_scripts_shellcheck COMMAND ${MLATUNE_SHELLCHECK} ${MLATUNE_CLUSTER_SCRIPTS})
  set_tests_properties(cluster_scripts_shellcheck PROPERTIES LABELS unit)
endif()

# The Slurm recipe itself, run as 8 array tasks by replay, then its merge job.
find_program(MLATUNE_PYTHON3 python3)
if(MLATUNE_PYTHON3)
  add_test(NAME cluster_slurm_recipe_by_replay
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/cluster_scripts_check.sh ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(cluster_slurm_recipe_by_replay PROPERTIES LABELS unit)
endif()
