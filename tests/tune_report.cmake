# tune_report_test checks the summary formatting of `mlatune tune`, which
# lives with the program (cli/), not in a library.
target_sources(tune_report_test PRIVATE ${CMAKE_SOURCE_DIR}/cli/tune_report.cpp)
