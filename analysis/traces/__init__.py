"""What a run records and the files it lives in: capturing a sample, the trace format, predictions of memoryless
models, training logs, exports."""
