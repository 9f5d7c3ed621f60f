"""Analysis of Tensor Memory: traces, addressing and occlusion diagnostics, figures and reports.

Everything here is a pure function of checkpoints and traces; the app only lays out what these
return. It reaches into models only through ``tensor_memory.recording``.
"""

from analysis.measures.addressing import addressing_report
from analysis.measures.causality import causality_audit
from analysis.traces.capture import capture
from analysis.traces.trace import Trace, TraceError, load_trace

__all__ = ["causality_audit", "capture", "load_trace", "addressing_report", "Trace", "TraceError"]
