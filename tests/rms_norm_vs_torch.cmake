# bench/rms_norm_vs_torch.py --self-test: the benchmark's GPU-free parts
# (shape parsing, byte counts, tables and CSV, the space's eps) and its
# generic ctypes binding's error path on the real libmlatune_c.so.  Needs
# python3 only: the script imports torch when a benchmark runs.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME rms_norm_vs_torch_self_test
           COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/bench/rms_norm_vs_torch.py
                   --self-test --lib $<TARGET_FILE:mlatune_c>)
else()
  # Listed as "Not Run (Disabled)" rather than silently missing.
  add_test(NAME rms_norm_vs_torch_self_test COMMAND python3-not-found)
  set_tests_properties(rms_norm_vs_torch_self_test PROPERTIES DISABLED TRUE)
endif()
set_tests_properties(rms_norm_vs_torch_self_test PROPERTIES LABELS unit)
