"""``python -m tensor_memory.memory.build_scan``: compile the fused CPU scan now (``make setup`` runs it).

A module of its own because ``python -m`` on ``fused_scan`` would run a second copy of a module the
package has already imported. A failed build never fails: it prints why, and the pure-PyTorch scan runs.
"""

from __future__ import annotations

import argparse
import sys

from . import fused_scan


def main(argv=None) -> int:
    argparse.ArgumentParser(
        description="Compile the memory layer's fused CPU scan (or check it is up to date); "
        "a failed build only means the slower pure-PyTorch scan."
    ).parse_args(argv)
    built = fused_scan.kernels() is not None
    print(f"fused CPU scan: {'built' if built else 'not built'} in {fused_scan.build_directory()}")
    return 0  # never fails an install: the fallback works everywhere


if __name__ == "__main__":
    sys.exit(main())
