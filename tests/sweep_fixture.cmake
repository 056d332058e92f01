# scripts/sweep-fixture (packs recorded sweeps into replay fixtures), checked
# end to end by replay.
find_program(MLATUNE_PYTHON3_FOR_FIXTURES python3)
if(MLATUNE_PYTHON3_FOR_FIXTURES)
  add_test(NAME sweep_fixture_script
           COMMAND bash ${CMAKE_SOURCE_DIR}/tests/sweep_fixture_check.sh ${CMAKE_SOURCE_DIR} ${CMAKE_BINARY_DIR})
  set_tests_properties(sweep_fixture_script PROPERTIES LABELS unit)
endif()
