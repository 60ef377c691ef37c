"""The zrecord benchmark suite (bench/run.py): one module per layer."""
