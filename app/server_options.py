"""The explorer's Streamlit settings, applied by its server from any folder.

Streamlit reads ``.streamlit/config.toml`` only from the folder it starts in; the explorer's (the one source of its
settings: this machine only, no usage statistics, no Deploy button, its theme) ships with the package
(``tensor_memory.shipped``) and is passed to the server as ``--section.key=value`` options instead, each unless the
command line already gives it.
"""

from __future__ import annotations

import tomllib


def option(argv: list[str], name: str) -> str | None:
    """The value of Streamlit option ``--name`` on a command line (``--name VALUE`` or ``--name=VALUE``), or None."""
    for i, arg in enumerate(argv):
        if arg == f"--{name}" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


def _text(value: object) -> str:
    """A TOML value as Streamlit's command line takes it: ``true``/``false``, numbers and text as written."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def config_options(argv: list[str]) -> list[str]:
    """The shipped ``.streamlit/config.toml`` as ``--section.key=value`` options, less those ``argv`` gives."""
    from tensor_memory.shipped import STREAMLIT_CONFIG, root  # the package's import is heavy: only when serving

    settings = tomllib.loads((root() / STREAMLIT_CONFIG).read_text(encoding="utf-8"))
    return [
        f"--{section}.{key}={_text(value)}"
        for section, values in settings.items()
        for key, value in values.items()
        if option(argv, f"{section}.{key}") is None
    ]


__all__ = ["config_options", "option"]
