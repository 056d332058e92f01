# The worker tests start the real mlatune-worker program.
add_dependencies(worker_test mlatune-worker)
add_dependencies(gpu_evaluator_test mlatune-worker)
