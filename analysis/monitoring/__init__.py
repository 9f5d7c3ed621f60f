"""Following a training run while it goes on: ``monitor.py`` (a run folder written from any training loop),
``probe.py`` (the fixed input it measures on, looked at without changing the training), ``hf.py``
(``TensorMemoryCallback`` for a Hugging Face Trainer, importing ``transformers`` only when asked for)."""

from analysis.monitoring.monitor import Monitor, monitor


def __getattr__(name: str):
    if name == "TensorMemoryCallback":  # transformers is imported only by whoever asks for the callback
        from analysis.monitoring.hf import TensorMemoryCallback

        return TensorMemoryCallback
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["Monitor", "monitor", "TensorMemoryCallback"]
