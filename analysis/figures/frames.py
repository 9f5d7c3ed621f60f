"""PyVista volume renderings of many chunks at once, and PNG encoding.

Opening an off-screen render window costs far more than drawing into one, so
:func:`volume_frames` builds one :func:`analysis.figures.render.volume_plotter` and swaps the voxel values
for each chunk: every image equals what a fresh plotter draws for that chunk alone (the colour
and opacity range is fixed by ``clim``), at a fraction of the cost.
"""

from __future__ import annotations

import io
from collections.abc import Sequence

import numpy as np


def volume_frames(
    values: np.ndarray, clim: Sequence[float], cmap: str = "viridis", window_size: Sequence[int] | None = None
) -> list[np.ndarray]:
    """Volume renderings (H, W, 3) uint8 of each (D, H, W) volume in ``values`` (N, D, H, W), one colour range.

    ``window_size`` defaults to :func:`analysis.figures.render.volume_plotter`'s. PyVista is imported here, on
    first use: importing it takes a while, and a viewer need not wait for it before drawing anything else.
    """
    array = np.array(values, dtype=np.float32)  # a copy: the render window's scalars share the first frame's memory
    if array.ndim != 4 or len(array) == 0:
        raise ValueError(f"values must have shape (N, D, H, W) with N >= 1, got {tuple(array.shape)}")
    import pyvista as pv

    from analysis.figures.render import volume_plotter

    size = {} if window_size is None else {"window_size": window_size}
    plotter = volume_plotter(array[0], cmap=cmap, clim=clim, **size)
    try:
        (volume,) = [actor for actor in plotter.actors.values() if isinstance(actor, pv.Volume)]
        scalars = volume.mapper.dataset.point_data["value"]
        images = []
        for frame in array:
            scalars[:] = frame.transpose(2, 1, 0).ravel(order="F")  # the layout of render.voxel_image
            volume.mapper.dataset.Modified()
            plotter.render()
            images.append(np.ascontiguousarray(plotter.screenshot(return_img=True)[..., :3], dtype=np.uint8))
    finally:
        plotter.close()
    return images


def png_bytes(image: np.ndarray) -> bytes:
    """An (H, W, 3) uint8 image as PNG file bytes."""
    from PIL import Image

    array = np.asarray(image)
    if array.ndim != 3 or array.shape[2] not in (3, 4) or array.dtype != np.uint8:
        raise ValueError(f"image must be (H, W, 3 or 4) uint8, got {tuple(array.shape)} {array.dtype}")
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


__all__ = ["volume_frames", "png_bytes"]
