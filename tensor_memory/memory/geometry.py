"""Where voxels sit and how a coordinate reaches them: grid geometry, the trilinear read, the Gaussian write.

Coordinates are ``(x, y, z)`` in ``[-1, 1]`` — x along W, y along H, z along D, the order
``grid_sample`` expects — and voxel centres sit at ``linspace(-1, 1, n)`` per axis
(``align_corners=True``). So a coordinate lies at voxel ``(μ + 1) / spacing`` with ``spacing =
2 / (n − 1)``, and a spread σ covers ``σ / spacing`` voxels. The coordinate conversions take a torch
tensor or a numpy array and give back the same kind, in float64 (the spreads and the nearest voxel
come back as numpy and ints): the layer, the measures and the figures share this one definition.

The read and the write both factorise over the three axes, which is what makes them cheap: a
trilinear weight and a Gaussian are each a product of three 1D profiles.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
import torch.nn.functional as F

Coordinates = torch.Tensor | np.ndarray

# ---------------------------------------------------------------------------------------
# The grid: voxel indices against normalised coordinates
# ---------------------------------------------------------------------------------------


def grid_sizes(grid: Sequence[int]) -> tuple[int, int, int]:
    """``(D, H, W)`` as ints of at least 2 (as a memory's grid is), or a ValueError."""
    sizes = tuple(int(n) for n in grid)
    if len(sizes) != 3 or min(sizes) < 2:
        raise ValueError(f"grid must be (D, H, W) with every size >= 2, got {tuple(grid)}")
    return sizes  # type: ignore[return-value]


def voxel_spacing(grid: Sequence[int]) -> tuple[float, float, float]:
    """Normalised units between neighbouring voxel centres along x, y, z (grid is (D, H, W))."""
    D, H, W = grid_sizes(grid)
    return 2.0 / (W - 1), 2.0 / (H - 1), 2.0 / (D - 1)


def spanning_axes(grid: Sequence[int]) -> tuple[bool, bool, bool]:
    """Along x, y, z: whether the axis has more than two voxels.

    An axis of two voxels has its only centres at its two faces, so a coordinate there sits where
    reads and writes reach full strength (map building's 2-deep sheet), not stuck at a face, and
    its spacing (the whole extent) says nothing about how wide a write is next to the voxels.
    """
    D, H, W = grid_sizes(grid)
    return W > 2, H > 2, D > 2


def _per_axis(values: Coordinates, numbers: Sequence[float]) -> Coordinates:
    """``numbers`` (one per axis x, y, z) as float64 of the same kind as ``values``."""
    if isinstance(values, torch.Tensor):
        return values.new_tensor(numbers, dtype=torch.float64)
    return np.asarray(numbers, dtype=np.float64)


def _float64(values: Coordinates, what: str) -> Coordinates:
    """(…, 3) ``values`` in float64: a tensor stays a tensor, anything else becomes a numpy array."""
    values = values.double() if isinstance(values, torch.Tensor) else np.asarray(values, dtype=np.float64)
    if tuple(values.shape[-1:]) != (3,):
        raise ValueError(f"{what} must have shape (..., 3), got {tuple(values.shape)}")
    return values


def in_voxels(xyz: Coordinates, grid: Sequence[int]) -> Coordinates:
    """(…, 3) coordinates ``(x, y, z)`` in [-1, 1] → voxel indices along x, y, z (float64, same kind)."""
    xyz = _float64(xyz, "coordinates")
    return (xyz + 1.0) / _per_axis(xyz, voxel_spacing(grid))


def from_voxels(voxels: Coordinates, grid: Sequence[int]) -> Coordinates:
    """(…, 3) voxel positions along x, y, z → coordinates ``(x, y, z)`` in [-1, 1]: :func:`in_voxels` undone."""
    voxels = _float64(voxels, "voxel positions")
    return voxels * _per_axis(voxels, voxel_spacing(grid)) - 1.0


def sigma_voxels_per_axis(sigma: float | np.ndarray, grid: Sequence[int]) -> np.ndarray:
    """Spreads σ (…) in normalised units as voxels along x, y and z: (…, 3), a numpy array (float64)."""
    return np.asarray(sigma, dtype=np.float64)[..., None] / np.asarray(voxel_spacing(grid))


def nearest_voxel(mu: Coordinates, grid: Sequence[int]) -> tuple[int, int, int]:
    """The voxel (z, y, x) whose centre is nearest the coordinate ``mu`` = (x, y, z), clamped to the grid."""
    x, y, z = in_voxels(np.clip(np.asarray(mu, dtype=np.float64), -1.0, 1.0), grid)
    return int(round(z)), int(round(y)), int(round(x))


# ---------------------------------------------------------------------------------------
# The read and the write
# ---------------------------------------------------------------------------------------


def voxel_centres(n: int, dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """Voxel centres of one axis in normalised units: ``linspace(-1, 1, n)``."""
    return torch.linspace(-1.0, 1.0, n, dtype=dtype, device=device)


def voxel_grid(grid: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """Every voxel's centre as (x, y, z): (D, H, W, 3)."""
    z, y, x = torch.meshgrid(*(voxel_centres(n, dtype) for n in grid_sizes(grid)), indexing="ij")
    return torch.stack([x, y, z], dim=-1)


def _neighbours(u: torch.Tensor, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(M,) coordinates in [-1, 1] → the two voxels either side along one axis (M, 2) and their linear weights
    (M, 2). Border padding: coordinates are clamped to the grid; the lower neighbour is chosen with floor, as
    ``grid_sample`` does, so values and gradients match it (on a 1-voxel axis: voxel 0 twice, weights 0 and 1)."""
    pos = (u.clamp(-1.0, 1.0) + 1.0) * (n - 1) / 2.0  # (M,) in voxel units, 0 … n-1
    left = pos.detach().floor().clamp(max=n - 2)  # (M,) lower neighbour, as grid_sample picks it
    frac = pos - left  # (M,) carries the gradient
    index = torch.stack([left.clamp(min=0), left + 1], dim=1).long()  # (M, 2)
    return index, torch.stack([1.0 - frac, frac], dim=1)


def sample_channels_last(h: torch.Tensor, xyz: torch.Tensor) -> torch.Tensor:
    """Trilinear read from a channels-last volume: h (M, D, H, W, C), xyz (M, 3) → (M, C).

    Only the 8 voxels around each point are gathered: a weighted sum over all D·H·W voxels would read the
    whole volume forward and write a whole one backward for the same numbers."""
    M, D, H, W, C = h.shape
    (iz, wz), (iy, wy), (ix, wx) = _neighbours(xyz[:, 2], D), _neighbours(xyz[:, 1], H), _neighbours(xyz[:, 0], W)
    index = (iz[:, :, None, None] * H + iy[:, None, :, None]) * W + ix[:, None, None, :]  # (M, 2, 2, 2) flat voxel
    weights = wz[:, :, None, None] * wy[:, None, :, None] * wx[:, None, None, :]  # (M, 2, 2, 2)
    corners = h.reshape(M, D * H * W, C).gather(1, index.reshape(M, 8, 1).expand(M, 8, C))  # (M, 8, C)
    return torch.bmm(weights.reshape(M, 1, 8), corners).view(M, C)  # weighted sum of the 8


def jittered_sample(h: torch.Tensor, xyz: torch.Tensor, jitter: float, grid: Sequence[int]) -> torch.Tensor:
    """:func:`sample_channels_last`'s value, h (M, D, H, W, C) at xyz (M, 3) → (M, C), with the gradient to xyz
    taken as the mean of the gradients at the six points ``jitter`` voxel spacings either side of xyz along each
    axis (``MemoryConfig.read_jitter``). h gets the gradient of the read at xyz alone, as without jitter."""
    value = sample_channels_last(h, xyz.detach())  # (M, C) the read itself
    steps = torch.diag(xyz.new_tensor(voxel_spacing(grid))) * jitter  # (3, 3) one step along x, y, z
    fixed = h.detach()  # the probes only tell the coordinate where to go
    probes = sum(sample_channels_last(fixed, xyz + offset) for offset in torch.cat([steps, -steps])) / 6  # (M, C)
    return value + (probes - probes.detach())  # the value of the read, the gradient of the probes


def trilinear_read(h: torch.Tensor, xyz: torch.Tensor) -> torch.Tensor:
    """Sample h at continuous coordinates: h (B, C, D, H, W), xyz (B, 3) as (x, y, z) → (B, C).

    Same values and gradients as ``F.grid_sample(h, xyz, mode="bilinear",
    padding_mode="border", align_corners=True)``. The trilinear weight of a voxel is a product
    of three 1D weights, so no 8-corner gather is needed.
    """
    if h.dim() != 5 or xyz.shape != (h.shape[0], 3):
        raise ValueError(
            f"trilinear_read expects h (B, C, D, H, W) and xyz (B, 3), got {tuple(h.shape)} and {tuple(xyz.shape)}"
        )
    return sample_channels_last(h.permute(0, 2, 3, 4, 1), xyz)  # (B, D, H, W, C) view


def _axis_offsets(xyz: torch.Tensor, grid: tuple[int, int, int]):
    """Voxel centre minus μ along each axis: (D, H, W order) (M, D), (M, H), (M, W) from xyz (M, 3) as (x, y, z)."""
    return tuple(
        voxel_centres(n, xyz.dtype, xyz.device)[None, :] - xyz[:, axis, None]
        for axis, n in zip((2, 1, 0), grid, strict=True)
    )


def _in_box(offsets, sigma: torch.Tensor, window: float):
    """Per axis, whether |p − μ| ≤ window·σ, from the offsets of :func:`_axis_offsets`."""
    limit = window * sigma.reshape(-1, 1)  # (M, 1)
    return tuple(offset.abs() <= limit for offset in offsets)


def write_box(xyz: torch.Tensor, sigma: torch.Tensor, grid: tuple[int, int, int], window: float):
    """The windowed write's box per axis: (M, D), (M, H), (M, W) booleans, |p − μ| ≤ window·σ."""
    return _in_box(_axis_offsets(xyz, grid), sigma, window)


def gaussian_profiles(
    xyz: torch.Tensor, sigma: torch.Tensor, grid: tuple[int, int, int], window: float | None = None, eps: float = 0.0
):
    """The Gaussian around xyz (M, 3) of width sigma (M,) along each axis: (gz (M, D), gy (M, H), gx (M, W)).

    With ``window`` = k, each profile is cut to the :func:`write_box` (exactly zero outside), so
    their product is the Gaussian inside the box of ±kσ around μ and zero everywhere else. ``eps``
    is added to 2σ² (``MemoryConfig.write_eps``); the box stays ±kσ.
    """
    two_var = 2.0 * sigma.reshape(-1, 1) ** 2  # (M, 1)
    if eps:  # skipped at 0, so the default computes exactly what it did before the option
        two_var = two_var + eps
    offsets = _axis_offsets(xyz, grid)
    profiles = [torch.exp(-(offset**2) / two_var) for offset in offsets]
    if window is not None:  # the box, a hard 0/1 cut
        profiles = [g * inside.to(g.dtype) for g, inside in zip(profiles, _in_box(offsets, sigma, window), strict=True)]
    return tuple(profiles)


def nearest_profiles(xyz: torch.Tensor, grid: tuple[int, int, int]):
    """A hard write's profiles: along each axis 1 at the voxel centre nearest xyz (M, 3), 0 elsewhere; (gz, gy, gx)
    as :func:`gaussian_profiles` gives them. Piecewise constant in xyz, so no gradient flows back through them."""
    return tuple(
        F.one_hot(offset.abs().argmin(-1), n).to(xyz.dtype)  # (M, n)
        for offset, n in zip(_axis_offsets(xyz, grid), grid, strict=True)
    )


def gaussian_write(
    content: torch.Tensor,
    xyz: torch.Tensor,
    sigma: torch.Tensor,
    grid: tuple[int, int, int],
    window: float | None = None,
) -> torch.Tensor:
    """Write volume V[b, :, z, y, x] = content[b] · exp(-‖p_zyx − xyz[b]‖² / (2 sigma[b]²)).

    content (B, C), xyz (B, 3) as (x, y, z), sigma (B,) or (B, 1), grid (D, H, W)
    → (B, C, D, H, W). No hard voxel assignment: every voxel gets some of the content.
    exp(-‖p − μ‖²/2σ²) is the product of one Gaussian per axis, which is how it is computed.
    With ``window`` = k the volume is zero outside the box of ±kσ around xyz (the windowed write).
    """
    B = content.shape[0]
    if content.dim() != 2 or xyz.shape != (B, 3) or sigma.numel() != B:
        raise ValueError(
            f"gaussian_write expects content (B, C), xyz (B, 3), sigma (B,), got "
            f"{tuple(content.shape)}, {tuple(xyz.shape)}, {tuple(sigma.shape)}"
        )
    gz, gy, gx = gaussian_profiles(xyz, sigma, grid, window)
    return (
        content[:, :, None, None, None]
        * gz[:, None, :, None, None]
        * gy[:, None, None, :, None]
        * gx[:, None, None, None, :]
    )
