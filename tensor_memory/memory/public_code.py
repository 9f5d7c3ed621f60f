"""Import the paper's public code: a ``TensorMemoryInterface`` state dict as a module built on :class:`TensorMemory`.

The public repository (github.com/kswain98/tensor-memory, ``tensor_memory/model.py``) calls its memory as
``out, (h, c) = interface(x, (h0, c0))``: x (B, N, d) tokens, h and c (B, C, D, H, W), out (B, N, d) the
projected read of each token's chunk. Its mechanism is this project's with the options :data:`PUBLIC_OPTIONS` sets
(``MemoryConfig.public_code``): no norm inside (its blocks normalise), the message as the output (its blocks gate it),
a last incomplete chunk zero-padded and written, biases on the depthwise convolutions, ``2σ² + 1e-6`` in the Gaussian
and a constructor's ``sigma_scale``; and with no norm on the write summary and a floor of 1e-4 under σ.
:class:`PublicCodeMemory` holds that layer as ``.memory``, so hook points, ``record`` and ``memory_layers``
find it. Its state dict (``safetensors.torch.save_file(interface.state_dict(), path)``) names:

    write_proj (d, k·d)  coord_net (3, d)  writer.content_net (C, d)  writer.sigma_net (1, d)  out_proj (d, C)
    gate_conv.conv_{d,h,w} (2C, 1, 3-tap kernel)  gate_conv.pointwise (4C, 2C, 1, 1, 1)  grid_cache (1, 3, D, H, W)

so d, C, the chunk size k and the grid are read off the shapes; ``sigma_scale`` is not stored (pass it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from ..config import require_float
from ..storage.files import PathLike
from ..storage.user_files import read_safetensors
from .config import MemoryConfig, MemoryState
from .geometry import voxel_grid

# The public code's options (MemoryConfig.public_code) and the mechanism settings it has other values of.
PUBLIC_OPTIONS = dict(input_norm=False, output="message", partial_chunk="pad", depthwise_bias=True, write_eps=1e-6)
PUBLIC_MECHANISM = dict(summary_norm=False, sigma_min=1e-4)
GATED = dict(output="gated")  # with the block's gate as γ: the layer returns σ(γ)·m
CONVS = ("conv_d", "conv_h", "conv_w")  # the depthwise convolutions along D, H, W
KERNELS = ((3, 1, 1), (1, 3, 1), (1, 1, 3))
MAX_FILE_BYTES = 512 << 20  # a weights file: far above any interface (the paper's largest is ~2.3M numbers)
REDO = "save the interface with safetensors.torch.save_file(interface.state_dict(), path)"


class PublicCodeMemory(nn.Module):
    """The public ``TensorMemoryInterface``'s call on a :class:`TensorMemory` (``.memory``):
    ``out, (h, c) = m(x, (h0, c0))``, with ``(h0, c0)`` zeros where it is None."""

    def __init__(self, memory: nn.Module) -> None:
        super().__init__()
        self.memory = memory  # a TensorMemory configured with PUBLIC_OPTIONS

    def init_state(self, batch_size: int, device=None, dtype=None) -> tuple[torch.Tensor, torch.Tensor]:
        """Zero h, c (batch_size, C, D, H, W), as the public ``init_state``."""
        state = self.memory.init_state(batch_size, device, dtype)
        return state.h.contiguous(), state.c.contiguous()

    def forward(self, x: torch.Tensor, prev_state: Sequence[torch.Tensor] | None = None):
        """x (B, N, d), prev_state (h, c) each (B, C, D, H, W) or None → out (B, N, d), (h, c)."""
        dtype = self.memory.mix.weight.dtype
        if not isinstance(x, torch.Tensor) or x.dtype != dtype:
            raise ValueError(
                f"PublicCodeMemory: x must be a {dtype} tensor (B, N, d) like the weights, got {_kind(x)}; "
                f"pass {'x.to(' + str(dtype) + ')' if isinstance(x, torch.Tensor) else 'a tensor'}"
            )
        state = None
        if prev_state is not None:
            pair = isinstance(prev_state, (tuple, list)) and len(prev_state) == 2
            if not pair or any(not isinstance(v, torch.Tensor) or v.dtype != dtype for v in prev_state):
                raise ValueError(
                    f"PublicCodeMemory: prev_state must be None or the pair (h, c) of {dtype} tensors (B, C, D, H, W) "
                    f"a call returned, got {_kind(prev_state)}"
                )
            h, c = prev_state
            state = MemoryState(h=h, c=c, pending=x.new_zeros(x.shape[0], 0, x.shape[-1]))  # "pad" carries none
        out, new = self.memory(x, state)
        return out, (new.h.contiguous(), new.c.contiguous())  # the public code's layout, not channels-last


def _kind(value: object) -> str:
    """A value's type for a message: a tensor's dtype and shape, else its type's name."""
    if isinstance(value, torch.Tensor):
        return f"{value.dtype} {tuple(value.shape)}"
    return type(value).__name__


def public_shapes(d: int, C: int, chunk: int, grid: Sequence[int]) -> dict[str, tuple[int, ...]]:
    """Every key of a public ``TensorMemoryInterface`` state dict and its shape."""
    shapes = {
        "write_proj.weight": (d, chunk * d),
        "write_proj.bias": (d,),
        "writer.content_net.weight": (C, d),
        "writer.content_net.bias": (C,),
        "writer.sigma_net.weight": (1, d),
        "writer.sigma_net.bias": (1,),
        "coord_net.weight": (3, d),
        "coord_net.bias": (3,),
        "gate_conv.pointwise.weight": (4 * C, 2 * C, 1, 1, 1),
        "gate_conv.pointwise.bias": (4 * C,),
        "out_proj.weight": (d, C),
        "out_proj.bias": (d,),
        "grid_cache": (1, 3, *grid),
    }
    for conv, kernel in zip(CONVS, KERNELS, strict=True):
        shapes[f"gate_conv.{conv}.weight"] = (2 * C, 1, *kernel)
        shapes[f"gate_conv.{conv}.bias"] = (2 * C,)
    return shapes


def public_grid_cache(grid: Sequence[int], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The public code's cell coordinates (1, 3, D, H, W), channels (x, y, z) at linspace(-1, 1, n) per axis."""
    return voxel_grid(grid, dtype).permute(3, 0, 1, 2)[None].contiguous()  # (D, H, W, 3) → (1, 3, D, H, W)


def from_public_code(
    state_dict: Mapping[str, torch.Tensor],
    *,
    layer: type,
    chunk_size: int | None = None,
    grid: Sequence[int] | None = None,
    sigma_scale: float = 1.0,
    prefix: str = "",
    gate: torch.Tensor | None = None,
) -> PublicCodeMemory:
    """A :class:`PublicCodeMemory` with the weights of a public ``TensorMemoryInterface``'s ``state_dict``.

    d, C and the chunk size come from the shapes of ``write_proj.weight``, ``coord_net.weight`` and
    ``writer.content_net.weight``, the grid from ``grid_cache``; ``chunk_size`` and ``grid``, when given,
    must agree (``grid`` is needed only for a state dict without ``grid_cache``). ``sigma_scale`` is the
    interface's constructor argument. ``prefix``: where the interface sits in a whole model's state dict
    (``"shared_tensor_memory."`` in the public ``TensorMemoryViT``); keys outside it are ignored. A missing,
    extra, wrong-shaped or non-finite entry is refused with a ValueError naming the key. Float16 or bfloat16 weights
    (``grid_cache`` then the exact grid rounded to that dtype) build a module of that dtype. ``layer`` is the
    class to build (``TensorMemory``; passed in, so that this module does not import the layer it extends).
    ``gate``: the one-number parameter whose sigmoid scales the interface's output in the block around it (a public
    backbone's ``gates.{i}``); given, the module returns ``σ(gate)·m`` and records ``σ(gate)`` as its σ(γ).
    """
    require_float("from_public_code", "sigma_scale", sigma_scale, 0.0, low_open=True)
    if not isinstance(prefix, str):
        raise ValueError(
            "from_public_code.prefix must be a string, where the interface sits in the state dict "
            f"(e.g. 'shared_tensor_memory.', or '' for the interface's own), got {type(prefix).__name__}"
        )
    tensors = _interface_entries(state_dict, prefix)
    d, C, chunk = _sizes(tensors, prefix)
    if chunk_size is not None and chunk_size != chunk:
        shape = tuple(tensors["write_proj.weight"].shape)
        raise ValueError(
            f"chunk_size={chunk_size!r}, but {prefix + 'write_proj.weight'!r} {shape} was made for "
            f"chunks of {chunk} tokens of width {d}: pass chunk_size={chunk} or leave it out"
        )
    grid = _grid(tensors, grid, prefix)
    _check_entries(tensors, public_shapes(d, C, chunk, grid), prefix)
    weights = _as_layer_weights(tensors, C)
    if gate is not None:
        weights["gate"] = _gate(gate)
    config = MemoryConfig(
        token_dim=d,
        channels=C,
        grid=grid,
        chunk_size=chunk,
        sigma_init=0.4 * sigma_scale,
        public_code={**PUBLIC_OPTIONS, "sigma_scale": float(sigma_scale), **({} if gate is None else GATED)},
        **PUBLIC_MECHANISM,
    )  # σ_init: replaced by the weights loaded
    module = PublicCodeMemory(layer(config)).to(tensors["coord_net.weight"].dtype)
    module.memory.load_state_dict(weights, strict=True)
    return module


def _gate(gate: object) -> torch.Tensor:
    """The gate parameter as γ, a 0-d tensor; one finite floating-point number or a ValueError."""
    if not isinstance(gate, torch.Tensor) or not gate.is_floating_point() or gate.numel() != 1:
        raise ValueError(
            f"from_public_code.gate must be the block's gate parameter, one floating-point number (shape (1,)), "
            f"got {_kind(gate)}"
        )
    if not bool(torch.isfinite(gate).all()):
        raise ValueError("from_public_code.gate is NaN or infinite; pass the trained gate parameter")
    return gate.detach().reshape(())


def read_public_code(path: PathLike) -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file of public-code weights, read and checked by ``files.read_safetensors`` (never
    unpickled: a ``torch.save`` file is refused)."""
    return read_safetensors(path, MAX_FILE_BYTES, "the public-code weights file", REDO).tensors()


def _interface_entries(state_dict: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The entries under ``prefix``, keyed without it; each must be a floating-point tensor."""
    if not isinstance(state_dict, Mapping):
        raise ValueError(
            f"from_public_code expects a state dict (a mapping of names to tensors), got {type(state_dict).__name__}"
        )
    tensors = {}
    for key, value in state_dict.items():
        if not isinstance(key, str) or not key.startswith(prefix):
            continue
        if not isinstance(value, torch.Tensor) or not value.is_floating_point():
            raise ValueError(
                f"state dict entry {key!r} must be a floating-point torch tensor (the interface's state_dict()), "
                f"got {value.dtype if isinstance(value, torch.Tensor) else type(value).__name__}"
            )
        tensors[key[len(prefix) :]] = value
    return tensors


def _sizes(tensors: dict[str, torch.Tensor], prefix: str) -> tuple[int, int, int]:
    """d, C and the chunk size, from the shapes of three weights."""
    for key in ("coord_net.weight", "writer.content_net.weight", "write_proj.weight"):
        if key not in tensors:
            hint = "" if prefix else " (a whole model's state dict? pass prefix='shared_tensor_memory.')"
            raise ValueError(f"state dict has no {prefix + key!r}: not a public TensorMemoryInterface{hint}")
        if tensors[key].dim() != 2:
            raise ValueError(
                f"state dict entry {prefix + key!r} must be a matrix, got shape {tuple(tensors[key].shape)}"
            )
    d, C = tensors["coord_net.weight"].shape[1], tensors["writer.content_net.weight"].shape[0]
    wide = tensors["write_proj.weight"].shape[1]  # chunk_size·d
    if d < 1 or wide % d or wide == 0:
        raise ValueError(
            f"state dict entry {prefix + 'write_proj.weight'!r} has shape "
            f"{tuple(tensors['write_proj.weight'].shape)}; expected (d, chunk_size·d) with d = {d} "
            f"(from {prefix + 'coord_net.weight'!r})"
        )
    return d, C, wide // d


def _grid(tensors: dict[str, torch.Tensor], grid: Sequence[int] | None, prefix: str) -> tuple[int, int, int]:
    """(D, H, W) from ``grid_cache`` (whose coordinates must be the public code's), or the ``grid`` argument."""
    sizes = list(grid) if isinstance(grid, Sequence) and not isinstance(grid, str) else None
    if grid is not None and (
        sizes is None or len(sizes) != 3 or any(isinstance(n, bool) or not isinstance(n, int) or n < 2 for n in sizes)
    ):
        raise ValueError(
            f"from_public_code.grid must be three integers (D, H, W), each >= 2, the interface's memory_shape, "
            f"got {grid!r}"
        )
    cache = tensors.get("grid_cache")
    if cache is None:
        if grid is None:
            raise ValueError(
                f"state dict has no {prefix + 'grid_cache'!r}, so the grid is unknown: pass "
                f"grid=(D, H, W), the interface's memory_shape"
            )
        return tuple(grid)  # type: ignore[return-value]
    if cache.dim() != 5 or tuple(cache.shape[:2]) != (1, 3):
        raise ValueError(
            f"state dict entry {prefix + 'grid_cache'!r} must be (1, 3, D, H, W), got shape {tuple(cache.shape)}"
        )
    found = tuple(int(n) for n in cache.shape[2:])
    if grid is not None and tuple(grid) != found:
        raise ValueError(
            f"grid={tuple(grid)!r}, but {prefix + 'grid_cache'!r} is {found}: pass grid={found} or leave it out"
        )
    if min(found) < 2:
        raise ValueError(
            f"state dict entry {prefix + 'grid_cache'!r} is a grid of {found}: "
            f"this layer needs at least 2 cells per axis"
        )
    # Saved in float16/bfloat16 the coordinates are the exact ones rounded: allowed their dtype's rounding, no more.
    atol = max(1e-5, torch.finfo(cache.dtype).eps / 2)  # half a unit in the last place at 1
    if not torch.allclose(cache.double(), public_grid_cache(found, torch.float64), atol=atol):
        raise ValueError(
            f"state dict entry {prefix + 'grid_cache'!r} does not hold the public code's cell coordinates "
            f"(x, y, z at linspace(-1, 1, n) per axis); this layer cannot place voxels elsewhere"
        )
    return found  # type: ignore[return-value]


def _check_entries(tensors: dict[str, torch.Tensor], shapes: dict[str, tuple[int, ...]], prefix: str) -> None:
    """Exactly the keys of ``shapes`` (grid_cache may be absent), each of its shape and finite."""
    missing = sorted(set(shapes) - set(tensors) - {"grid_cache"})
    if missing:
        raise ValueError(
            f"state dict has no {', '.join(repr(prefix + key) for key in missing)} (shapes "
            f"{', '.join(str(shapes[key]) for key in missing)}): not a complete public "
            f"TensorMemoryInterface"
        )
    extra = sorted(set(tensors) - set(shapes))
    if extra:
        raise ValueError(
            f"state dict has unexpected entries {', '.join(repr(prefix + key) for key in extra)}: "
            f"a public TensorMemoryInterface has only {', '.join(sorted(shapes))}"
        )
    for key, value in tensors.items():
        if tuple(value.shape) != shapes[key]:
            raise ValueError(
                f"state dict entry {prefix + key!r} has shape {tuple(value.shape)}, expected "
                f"{shapes[key]} for the sizes read off the other weights"
            )
        if not bool(torch.isfinite(value).all()):
            raise ValueError(f"state dict entry {prefix + key!r} contains NaN or infinite values")


def _as_layer_weights(tensors: dict[str, torch.Tensor], C: int) -> dict[str, torch.Tensor]:
    """The public weights under :class:`TensorMemory`'s names and layouts."""
    layer = {}
    for ours, theirs in (
        ("summary", "write_proj"),
        ("coord_head", "coord_net"),
        ("content", "writer.content_net"),
        ("spread", "writer.sigma_net"),
        ("out_proj", "out_proj"),
    ):
        for part in ("weight", "bias"):
            layer[f"{ours}.{part}"] = tensors[f"{theirs}.{part}"]
    convs = [f"gate_conv.{conv}" for conv in CONVS]
    layer["depthwise"] = torch.stack([tensors[f"{conv}.weight"].reshape(2 * C, 3) for conv in convs])  # (3, 2C, 3)
    layer["update.depthwise_bias"] = torch.stack([tensors[f"{conv}.bias"] for conv in convs])  # (3, 2C)
    layer["mix.weight"] = tensors["gate_conv.pointwise.weight"].reshape(4 * C, 2 * C)  # (4C, 2C)
    layer["mix.bias"] = tensors["gate_conv.pointwise.bias"]
    return layer


__all__ = [
    "PublicCodeMemory",
    "PUBLIC_OPTIONS",
    "PUBLIC_MECHANISM",
    "from_public_code",
    "read_public_code",
    "public_shapes",
    "public_grid_cache",
]
