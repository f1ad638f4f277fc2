"""The one training loop (Trainer) and the steps around it: evaluation, keep-best, warm
start, catalog change. A mode (deploy/) is a choice of Parts plugged into it."""
