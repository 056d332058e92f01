# scripts/sweep-fixture (packs recorded sweeps into replay fixtures), checked
# end to end by replay.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME sweep_fixture_script
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/sweep_fixture_check.sh ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(sweep_fixture_script PROPERTIES LABELS unit)
endif()
