# python_package_test: python/tests/test_package.py, the mlatune Python
# package without torch and without a GPU (discovery of this build's
# libmlatune_c.so, error messages, argument checks, pip install).  Needs
# python3 only (unittest, no pytest).  python/tests/test_gpu.py is run by hand
# on a GPU machine with PyTorch (python/README.md).
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME python_package_test
           COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/python/tests/test_package.py)
  set_tests_properties(python_package_test PROPERTIES
    ENVIRONMENT "MLATUNE_TEST_LIBRARY=$<TARGET_FILE:mlatune_c>;MLATUNE_TEST_SOURCE_DIR=${CMAKE_SOURCE_DIR}"
    ENVIRONMENT_MODIFICATION "MLATUNE_LIBRARY=unset:;MLATUNE_DB=unset:")
  if(NOT MLATUNE_PYTHON_RECORD_BUILD)
    # Its discovery tests expect python/mlatune/_paths.py to name this build.
    set_tests_properties(python_package_test PROPERTIES DISABLED TRUE)
  endif()
else()
  add_test(NAME python_package_test COMMAND python3-not-found)
  set_tests_properties(python_package_test PROPERTIES DISABLED TRUE)
endif()
set_tests_properties(python_package_test PROPERTIES LABELS unit)
