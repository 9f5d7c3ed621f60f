"""Traces and what is read from files: capturing a sample, the trace format, exports, training logs."""
