# run_cli_test runs the mlatune program.
add_dependencies(run_cli_test mlatune)
