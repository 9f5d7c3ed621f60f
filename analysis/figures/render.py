"""Off-screen PyVista renderings of Tensor Memory state: volume rendering and footprint meshes.

Rendering is headless through VTK's EGL window (no X server): the environment variable
``VTK_DEFAULT_OPENGL_WINDOW=vtkEGLRenderWindow`` is set, unless already set, before PyVista is
imported. The builders return an off-screen ``pyvista.Plotter``; :func:`screenshot` turns one into
an RGB image and closes it, :func:`plotter_html` exports one as a self-contained interactive HTML
page (vtk.js). vtk.js draws meshes but not ``add_volume``, so :func:`footprint_plotter` uses
meshes only and volumes go through :func:`screenshot`.

Scenes are in voxel-index units, as in :mod:`analysis.figures`: x along W, y along H, z along D,
voxel centres at integer positions.
"""

from __future__ import annotations

import os

os.environ.setdefault("VTK_DEFAULT_OPENGL_WINDOW", "vtkEGLRenderWindow")

from collections.abc import Sequence  # noqa: E402

import numpy as np  # noqa: E402
import pyvista as pv  # noqa: E402

from analysis.measures.volumes import colour_range  # noqa: E402
from analysis.traces.trace import LayerTrace  # noqa: E402
from tensor_memory.memory.geometry import in_voxels, sigma_voxels_per_axis  # noqa: E402
from tensor_memory.optional import require  # noqa: E402

WINDOW_SIZE = (480, 400)
BACKGROUND = "white"
READ_COLOUR = "#1f77b4"
WRITE_COLOUR = "#d62728"
AXIS_TITLES = dict(xtitle="x (W)", ytitle="y (H)", ztitle="z (D)")
# What PyVista's HTML export imports, as require()'s arguments (module, group, feature).
HTML_NEEDS = tuple(
    (package, "export", "the 3D scene as an HTML page") for package in ("trame_pyvista", "nest_asyncio2")
)


def _plotter(title: str, window_size: Sequence[int]) -> pv.Plotter:
    """An off-screen plotter with a white background and ``title`` in the upper left corner."""
    plotter = pv.Plotter(off_screen=True, window_size=[int(n) for n in window_size])
    plotter.set_background(BACKGROUND)
    if title:
        plotter.add_text(title, position="upper_left", font_size=10, color="black")
    return plotter


def _frame_scene(plotter: pv.Plotter, bounds: Sequence[float] | None) -> None:
    """Labelled axes on the outer edges of ``bounds`` (default: everything shown), seen from an oblique view."""
    plotter.show_bounds(bounds=bounds, **AXIS_TITLES, color="black", font_size=10, location="outer")
    plotter.camera_position = "iso"
    plotter.camera.zoom(0.85)


def voxel_image(values: np.ndarray) -> pv.ImageData:
    """(D, H, W) values as an ImageData with one point per voxel centre, point (x, y, z) = voxel [z, y, x].

    ImageData dimensions are (nx, ny, nz) = (W, H, D) with x varying fastest (Fortran order over
    x, y, z), which is the C order of the (D, H, W) array; the scalars are named ``"value"``.
    """
    array = np.asarray(values, dtype=np.float32)
    if array.ndim != 3:
        raise ValueError(f"values must have shape (D, H, W), got {tuple(array.shape)}")
    image = pv.ImageData(dimensions=array.shape[::-1])
    image.point_data["value"] = array.transpose(2, 1, 0).ravel(order="F")
    return image


def volume_plotter(
    values: np.ndarray,
    title: str = "",
    cmap: str = "viridis",
    clim: Sequence[float] | None = None,
    window_size: Sequence[int] = WINDOW_SIZE,
) -> pv.Plotter:
    """Volume rendering of (D, H, W) ``values``: low values transparent, the grid's outline, labelled axes.

    ``clim`` (low, high) fixes the colour and opacity range (e.g. across chunks); by default the
    data's range (a constant volume renders transparent). Off-screen; pass to :func:`screenshot`
    for the image.
    """
    image = voxel_image(values)
    plotter = _plotter(title, window_size)
    limits = list(colour_range(image.point_data["value"], clim))
    plotter.add_volume(
        image,
        scalars="value",
        cmap=cmap,
        clim=limits,
        opacity="linear",
        scalar_bar_args=dict(
            title="value",
            color="black",
            vertical=True,
            position_x=0.84,
            position_y=0.1,
            width=0.07,
            height=0.55,
            title_font_size=12,
            label_font_size=10,
        ),
    )
    plotter.add_mesh(image.outline(), color="black", line_width=1)
    _frame_scene(plotter, bounds=None)
    return plotter


def _trajectory_meshes(points: np.ndarray, tail: int) -> tuple[pv.PolyData, pv.PolyData, pv.PolyData]:
    """(n, 3) points → the whole path as a polyline, its last ``tail`` points as one, and the points."""
    path = pv.lines_from_points(points) if len(points) > 1 else pv.PolyData(points)
    recent = points[-tail:]
    recent_path = pv.lines_from_points(recent) if len(recent) > 1 else pv.PolyData(recent)
    return path, recent_path, pv.PolyData(points)


def footprint_plotter(
    layer: LayerTrace, upto: int, tail: int = 8, window_size: Sequence[int] = WINDOW_SIZE
) -> pv.Plotter:
    """Meshes of chunks 0..``upto``: grid box, read (blue) and write (red) paths, the write's 1σ/2σ surfaces.

    The paths are thin over all chunks and thick over the last ``tail``; the current read and write
    are larger spheres. The Gaussian of chunk ``upto``'s write is drawn as its 1σ and 2σ
    isosurfaces: ellipsoids with semi-axes σ(n - 1)/2 voxels. Meshes only, so it exports to HTML.
    """
    count = layer.mu_write.shape[0]
    if not 0 <= int(upto) < count:
        raise ValueError(f"upto must be in 0..{count - 1}, got {upto}")
    if tail < 1:
        raise ValueError(f"tail must be at least 1, got {tail}")
    upto = int(upto)
    D, H, W = layer.grid
    box = (0, W - 1, 0, H - 1, 0, D - 1)
    plotter = _plotter(f"chunk {upto}: read (blue), write (red), 1 and 2 sigma", window_size)
    plotter.add_mesh(pv.Box(bounds=box).outline(), color="grey", line_width=1)
    for mu, colour in ((layer.mu_read, READ_COLOUR), (layer.mu_write, WRITE_COLOUR)):
        points = in_voxels(mu[: upto + 1], layer.grid)
        path, recent_path, dots = _trajectory_meshes(points, tail)
        plotter.add_mesh(path, color=colour, opacity=0.3, line_width=1)
        plotter.add_mesh(recent_path, color=colour, line_width=4)
        plotter.add_mesh(dots, color=colour, point_size=6, render_points_as_spheres=True)
        plotter.add_mesh(pv.Sphere(radius=0.08 * max(W, H, D) ** 0.5, center=points[-1]), color=colour)
    centre = in_voxels(layer.mu_write[upto], layer.grid)
    radii = sigma_voxels_per_axis(layer.sigma[upto], layer.grid)
    for level, opacity in ((1, 0.55), (2, 0.2)):
        ellipsoid = pv.Sphere(radius=1.0, theta_resolution=32, phi_resolution=16).scale(level * radii)
        plotter.add_mesh(ellipsoid.translate(centre), color=WRITE_COLOUR, opacity=opacity, smooth_shading=True)
    _frame_scene(plotter, bounds=box)
    return plotter


def screenshot(plotter: pv.Plotter) -> np.ndarray:
    """Render ``plotter`` off-screen and return the image (H, W, 3) uint8; the plotter is closed after."""
    try:
        image = plotter.screenshot(return_img=True)
    finally:
        plotter.close()
    return np.ascontiguousarray(np.asarray(image)[..., :3], dtype=np.uint8)


def plotter_html(plotter: pv.Plotter) -> str:
    """The scene as a self-contained interactive HTML page (vtk.js), through PyVista's trame export.

    Volumes added with ``add_volume`` do not show in vtk.js; use it for meshes. The plotter stays
    open. Raises RuntimeError with the reason when the export fails (it needs trame, trame-vtk,
    trame-vuetify, trame-pyvista and nest_asyncio2), or MissingPackage naming the install group.
    """
    for needs in HTML_NEEDS:
        require(*needs)
    try:
        buffer = plotter.trame.export_html(None)
    except Exception as error:  # any failure of the optional export stack is reported the same way
        raise RuntimeError(
            f"PyVista's HTML export failed ({type(error).__name__}: {error}); it needs trame, "
            "trame-vtk, trame-vuetify, trame-pyvista and nest_asyncio2"
        ) from error
    return buffer.read()


__all__ = ["voxel_image", "volume_plotter", "footprint_plotter", "screenshot", "plotter_html"]
