"""Training and evaluation: the loop (``loop``), its settings (``config``), resuming a killed run
(``resume``), the run's log (``log``), the address scaffold (``scaffold``) and a model's metrics
(``evaluation``)."""

from .config import TrainConfig, TrainingWarning, apply_overrides, config_warnings, load_run_config, resolve
from .evaluation import evaluate, evaluate_checkpoint, format_metric, metric_unit, sweep, task_with
from .log import LOG_FILE, read_training_log
from .loop import RESUME_FILE, train

__all__ = [
    "train",
    "TrainConfig",
    "TrainingWarning",
    "config_warnings",
    "load_run_config",
    "apply_overrides",
    "resolve",
    "evaluate",
    "evaluate_checkpoint",
    "sweep",
    "task_with",
    "format_metric",
    "metric_unit",
    "read_training_log",
    "LOG_FILE",
    "RESUME_FILE",
]
