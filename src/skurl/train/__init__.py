"""The one training loop (Trainer) and the steps around it: evaluation, keep-best, warm
start, catalog change. A mode (modes/) builds its parts through the Mode protocol (mode.py);
run.py starts or resumes a run in any mode."""
