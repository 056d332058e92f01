# The Python package python/mlatune (ctypes over libmlatune_c.so) finds the
# library it was built with through mlatune/_paths.py, which CMake writes:
#   - here, into the source tree, naming this build's libmlatune_c.so, so that
#     both `PYTHONPATH=python` and `pip install --no-build-isolation ./python`
#     (which copies the file into the installed package) use this build; the
#     last build tree configured wins (the file is git-ignored);
#   - at install time (cmake/Install.cmake), with paths relative to the
#     installed package, so that an installed prefix can be moved.
# The fuzz build (instrumented with ASan, which Python cannot load without a
# preloaded runtime) never writes it.
option(MLATUNE_PYTHON_RECORD_BUILD
       "Write python/mlatune/_paths.py naming this build's libmlatune_c.so" ON)
if(MLATUNE_PYTHON_RECORD_BUILD AND NOT MLATUNE_FUZZ)
  file(GENERATE OUTPUT ${CMAKE_SOURCE_DIR}/python/mlatune/_paths.py CONTENT
"# Written by CMake (cmake/Python.cmake) when it configured ${CMAKE_BINARY_DIR};
# not in the repository.  Where this copy of the package finds mlatune.
RECORDED_BY = \"the build tree ${CMAKE_BINARY_DIR}\"
LIBRARY = \"$<TARGET_FILE:mlatune_c>\"
PROGRAM = \"$<TARGET_FILE:mlatune>\"
SPACES_DIR = \"${CMAKE_SOURCE_DIR}/search_spaces\"
")
endif()
