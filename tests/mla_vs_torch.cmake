# bench/mla_vs_torch.py --self-test: the benchmark's GPU-free parts (shape
# parsing, FLOP counts against TARGETS.md, tables and CSV) and its ctypes
# binding's error path on the real libmlatune_c.so.  Needs python3 only: the
# script imports torch, numpy and matplotlib when a benchmark runs.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_Interpreter_FOUND)
  add_test(NAME mla_vs_torch_self_test
           COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/bench/mla_vs_torch.py
                   --self-test --lib $<TARGET_FILE:mlatune_c>)
else()
  # Listed as "Not Run (Disabled)" rather than silently missing.
  add_test(NAME mla_vs_torch_self_test COMMAND python3-not-found)
  set_tests_properties(mla_vs_torch_self_test PROPERTIES DISABLED TRUE)
endif()
set_tests_properties(mla_vs_torch_self_test PROPERTIES LABELS unit)
# --random-shapes --dry-run: the unseen-shape draw as the benchmark makes it
# (seeded, printed, no GPU or torch); the self-test checks its bounds.
if(Python3_Interpreter_FOUND)
  add_test(NAME mla_vs_torch_random_shapes_dry_run
           COMMAND Python3::Interpreter ${CMAKE_SOURCE_DIR}/bench/mla_vs_torch.py --random-shapes 20 --seed 3
                   --dry-run --db ${CMAKE_BINARY_DIR}/no_such_database.db)
  set_tests_properties(mla_vs_torch_random_shapes_dry_run PROPERTIES LABELS unit
                       PASS_REGULAR_EXPRESSION "^([0-9]+,[0-9]+,[0-9]+,[0-9]+,[0-9]+\n)+drew 20 shapes \\(seed 3")
endif()
# bench/tests/test_*.py (unittest): the Triton peer's grid and pruning, the target
# table and ratios, the random-shapes outputs, the options, the autotuning loop on
# stand-ins, and the Triton kernel's body run by a pure-Python stand-in of Triton
# against a float64 attention.  Needs python3 only: no Triton, torch or GPU.
if(Python3_Interpreter_FOUND)
  add_test(NAME mla_vs_torch_unit_tests
           COMMAND Python3::Interpreter -m unittest discover -s ${CMAKE_SOURCE_DIR}/bench/tests
                   -t ${CMAKE_SOURCE_DIR}/bench/tests -p "test_*.py")
else()
  add_test(NAME mla_vs_torch_unit_tests COMMAND python3-not-found)
  set_tests_properties(mla_vs_torch_unit_tests PROPERTIES DISABLED TRUE)
endif()
set_tests_properties(mla_vs_torch_unit_tests PROPERTIES LABELS unit)
