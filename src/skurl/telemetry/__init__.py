"""telemetry: what a run shows while it runs and leaves behind.

- metrics.py  Prometheus metrics of every part (get_metrics()), serve_metrics(port)
- stages.py   StageTimer: `with timer.stage("simulate"):` -> totals + histogram
- logger.py   RunLogger: TensorBoard (run_dir/tb/) + run_dir/metrics.jsonl
- progress.py Progress: rich bar on a terminal, one line per iteration otherwise
- report.py   write_eval(...) -> run_dir/eval.json; write_report(run_dir) -> report.md + plots

Import the module you need: this package imports nothing heavy on its own.
"""
