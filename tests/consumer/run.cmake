# The CMake package test (tests/consumer.cmake runs it with cmake -P): install
# the build into a temporary prefix, move the prefix (everything must be
# relocatable), then build and run tests/consumer against it with
# find_package(mlatune CONFIG), and use the installed CLI and Python package.
#
# Variables: BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER
# CUDA_ROOT, and PYTHON (empty when there is no python3).
foreach(variable BUILD_DIR SOURCE_DIR WORK_DIR GENERATOR CXX_COMPILER CUDA_ROOT)
  if(NOT DEFINED ${variable})
    message(FATAL_ERROR "run.cmake: -D${variable}=... is missing")
  endif()
endforeach()

# Runs one step in WORK_DIR; fails the test with its output unless it exits
# 0.  STEP_OUTPUT holds what it printed.
function(step what)
  execute_process(COMMAND ${ARGN} WORKING_DIRECTORY ${WORK_DIR}
                  RESULT_VARIABLE code OUTPUT_VARIABLE out ERROR_VARIABLE err)
  message(STATUS "${what}:\n${out}${err}")
  if(NOT code EQUAL 0)
    message(FATAL_ERROR "${what} failed (exit ${code}): ${ARGN}")
  endif()
  set(STEP_OUTPUT "${out}" PARENT_SCOPE)
endfunction()

function(expect_in text fragment what)
  string(FIND "${text}" "${fragment}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${what}: expected \"${fragment}\" in:\n${text}")
  endif()
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
file(MAKE_DIRECTORY ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
step("install" ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/staged)
file(RENAME ${WORK_DIR}/staged ${prefix})
foreach(file bin/mlatune bin/mlatune-worker lib/libmlatune_c.so include/mlatune/cache/c_api.h
             include/mlatune/cache/mla_c_api.h include/mlatune/cache/dispatcher.h
             share/mlatune/search_spaces/fused_mla_attention.yaml share/mlatune/templates/fused_mla_attention.cu
             lib/mlatune/python/mlatune/__init__.py lib/mlatune/python/mlatune/_paths.py
             lib/cmake/mlatune/mlatuneConfig.cmake lib/cmake/mlatune/mlatuneConfigVersion.cmake)
  if(NOT EXISTS ${prefix}/${file})
    message(FATAL_ERROR "the install did not write ${file}")
  endif()
endforeach()

step("configure the consumer" ${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${WORK_DIR}/consumer
     -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${prefix}
     -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCUDAToolkit_ROOT=${CUDA_ROOT})
step("build the consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/consumer)

file(TOUCH ${WORK_DIR}/empty.db)
step("consumer_c (mlatune::c)" ${WORK_DIR}/consumer/consumer_c ${WORK_DIR}/empty.db)
expect_in("${STEP_OUTPUT}" "consumer_c: " "consumer_c")
step("consumer_cpp (mlatune::runtime)" ${WORK_DIR}/consumer/consumer_cpp ${WORK_DIR}/empty.db)
expect_in("${STEP_OUTPUT}" "kernel fused_mla_attention, 5 shape variables" "consumer_cpp")

# The installed CLI, from another working directory, on the installed space
# (whose template path ../templates/ holds in share/mlatune), compiling two
# candidates without a GPU.
set(space ${prefix}/share/mlatune/search_spaces/fused_mla_attention.yaml)
step("installed mlatune space validate" ${prefix}/bin/mlatune space validate ${space})
expect_in("${STEP_OUTPUT}" "ok: kernel fused_mla_attention" "mlatune space validate")
step("installed mlatune tune --compile-only" ${prefix}/bin/mlatune tune ${space} --shape B=1,T=16,H=2,D=16,R=24
     --compile-only --arch sm_90 --max-evals 2 --db ${WORK_DIR}/compile.db -q)

if(PYTHON)
  # (No semicolons in the program: CMake would split the argument there.)
  step("installed Python package" ${CMAKE_COMMAND} -E env --unset=MLATUNE_LIBRARY
       PYTHONPATH=${prefix}/lib/mlatune/python ${PYTHON} -c
       "import mlatune\nfrom mlatune import dispatcher\nprint(mlatune.library_path())\nprint(dispatcher.resolve_space(None))")
  expect_in("${STEP_OUTPUT}" "${prefix}/lib/libmlatune_c.so\n" "the installed package's library")
  expect_in("${STEP_OUTPUT}" "${prefix}/share/mlatune/search_spaces/fused_mla_attention.yaml\n"
            "the installed package's spaces")
endif()
message(STATUS "the installed, moved prefix works from C, C++, the CLI and Python")
