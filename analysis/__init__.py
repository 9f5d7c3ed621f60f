"""Analysis of Tensor Memory: traces, addressing and occlusion diagnostics, figures and reports.

Three parts, data flowing one way: ``traces`` (what a run records, and its files) → ``measures``
(pure functions of checkpoints and traces) → ``figures`` (every Plotly and PyVista figure). The app
only lays out what these return. Models are reached through ``tensor_memory``'s public API: loading
checkpoints, recording, hooks and ``memory_layers``; never by editing them.
"""

from analysis.measures.addressing import addressing_report
from analysis.measures.causality import causality_audit
from analysis.monitoring import Monitor, monitor
from analysis.traces.capture import capture
from analysis.traces.model import trace_model
from analysis.traces.trace import Trace, TraceError, load_trace

__all__ = [
    "causality_audit",
    "capture",
    "trace_model",
    "load_trace",
    "addressing_report",
    "monitor",
    "Monitor",
    "TensorMemoryCallback",
    "Trace",
    "TraceError",
]


def __getattr__(name: str):
    if name == "TensorMemoryCallback":  # transformers is imported only by whoever asks for the callback
        from analysis.monitoring.hf import TensorMemoryCallback

        return TensorMemoryCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
