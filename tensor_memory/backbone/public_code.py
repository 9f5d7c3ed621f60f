"""The paper's public toy backbone (github kswain98/tensor-memory, ``toy/backbones.py``'s ``TensorBackbone``) imported
whole: its Transformer blocks, and its one memory interface on :class:`TensorMemory`.

That backbone runs, for each layer i, ``x = block_i(x)`` (pre-norm: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``
with a GELU), then ``m, (h, c) = memory(mem_lns[i](x), (h, c))`` and ``x = x + σ(gates[i])·m``, and a last
LayerNorm ``ln``. One interface serves every layer, and its state (h, c) starts at zeros in every forward and is
threaded from layer to layer: layer i starts from the state layer i−1 left. The toy scripts call it once per sample
on the whole sequence (``toy/occlusion.py`` with a causal mask), in eval mode without dropout.

Here layer i's memory is its own :class:`TensorMemory`, ``memories.{i}``, holding the interface's weights and
``gates.{i}`` as its γ (``public_code.output = "gated"``): a trace records every layer, and σ(γ) is the model's gate.
The keys of its state dict (under ``prefix``, ``"backbone."`` in a toy model's):

    token_blocks.{i}.ln1 / .ln2 (d,)  token_blocks.{i}.attn.in_proj_weight (3d, d), .in_proj_bias (3d,),
    .attn.out_proj (d, d)  token_blocks.{i}.mlp.0 (h, d), .mlp.3 (d, h)  mem_lns.{i} (d,)  gates.{i} (1,)
    memory.* (the TensorMemoryInterface, see ``memory/public_code.py``)  ln (d,)

The number of attention heads is not stored: pass it (``--heads``, 4 in the toy scripts).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

from ..memory import TensorMemory
from ..memory.public_code import read_public_code


class PublicBlock(nn.Module):
    """The toy backbones' pre-norm block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``."""

    def __init__(self, d: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Identity(), nn.Linear(hidden, d))  # mlp.0, mlp.3

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        normed = self.ln1(x)
        x = x + self.attn(normed, normed, normed, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.ln2(x))


class PublicBackbone(nn.Module):
    """``y = backbone(x)``: x (B, N, d) the tokens the toy model feeds its backbone, y (B, N, d) what it returns."""

    def __init__(self, d: int, heads: int, hidden: int, memories: list[TensorMemory], causal: bool) -> None:
        super().__init__()
        self.causal = causal
        self.token_blocks = nn.ModuleList(PublicBlock(d, heads, hidden) for _ in memories)
        self.mem_lns = nn.ModuleList(nn.LayerNorm(d) for _ in memories)
        self.memories = nn.ModuleList(memories)  # layer i's: the shared interface's weights, gates[i] as γ
        self.ln = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N = x.shape[1]
        mask = torch.ones(N, N, dtype=torch.bool, device=x.device).triu(1) if self.causal else None
        state = self.memories[0].init_state(x.shape[0], x.device, x.dtype)  # zeros in every forward, as theirs
        for block, norm, memory in zip(self.token_blocks, self.mem_lns, self.memories, strict=True):
            x = block(x, mask)
            gated, state = memory(norm(x), state)  # σ(gates[i])·m, from the state the layer before left
            x = x + gated
        return self.ln(x)


def from_public_backbone(
    state_dict: Mapping[str, torch.Tensor],
    *,
    heads: int,
    prefix: str = "",
    sigma_scale: float = 1.0,
    causal: bool = True,
) -> PublicBackbone:
    """A :class:`PublicBackbone` with the weights of a public ``TensorBackbone``'s state dict (``prefix``:
    ``"backbone."`` for a toy model's whole state dict). ``heads``: its attention heads; ``sigma_scale``: its
    constructor argument (1.0 in the toy scripts); ``causal``: the causal mask the script passes (``toy/occlusion.py``
    does). A missing, extra, wrong-shaped or non-finite entry is refused with a ValueError naming the key."""
    if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1:
        raise ValueError(f"from_public_backbone.heads must be a positive integer (the script's --heads), got {heads!r}")
    if not isinstance(prefix, str) or not isinstance(state_dict, Mapping):
        raise ValueError("from_public_backbone takes a state dict (names to tensors) and a string prefix")
    layers = _layer_count(state_dict, prefix)
    memories = [
        TensorMemory.from_public_code(
            state_dict, prefix=prefix + "memory.", sigma_scale=sigma_scale, gate=state_dict[f"{prefix}gates.{i}"]
        ).memory
        for i in range(layers)
    ]
    d = memories[0].config.token_dim
    first = state_dict.get(f"{prefix}token_blocks.0.mlp.0.weight")
    if not isinstance(first, torch.Tensor) or first.dim() != 2:
        raise ValueError(f"state dict has no matrix {prefix + 'token_blocks.0.mlp.0.weight'!r}: not a TensorBackbone")
    if d % heads:
        raise ValueError(f"from_public_backbone.heads={heads} does not divide the width {d}; pass the script's --heads")
    model = PublicBackbone(d, heads, int(first.shape[0]), memories, causal).to(memories[0].mix.weight.dtype)
    built = model.state_dict()
    ours = [k for k in built if not k.startswith("memories.")]  # the memories hold the interface and gates already
    theirs = {k[len(prefix) :]: v for k, v in state_dict.items() if isinstance(k, str) and k.startswith(prefix)}
    gates = {f"gates.{i}" for i in range(layers)}
    extra = sorted(k for k in set(theirs) - set(ours) - gates if not k.startswith("memory."))
    if extra:
        raise ValueError(
            f"state dict has unexpected entries {', '.join(repr(prefix + k) for k in extra[:3])}: not a public "
            f"TensorBackbone (toy/backbones.py), whose gates are gates.0 … gates.{layers - 1} beside its blocks"
        )
    for key in ours:
        got = theirs.get(key)
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(built[key].shape):
            found = "missing" if got is None else f"of shape {tuple(getattr(got, 'shape', ()))}"
            raise ValueError(f"state dict entry {prefix + key!r} is {found}, expected shape {tuple(built[key].shape)}")
        if not got.is_floating_point() or not bool(torch.isfinite(got).all()):
            raise ValueError(f"state dict entry {prefix + key!r} must hold finite floating-point numbers")
    model.load_state_dict({**built, **{k: theirs[k] for k in ours}}, strict=True)
    return model.eval()


def load_public_backbone(path, **options) -> PublicBackbone:
    """:func:`from_public_backbone` of a safetensors file (``save_file(model.state_dict(), path)``), checked before it
    is read and never unpickled."""
    return from_public_backbone(read_public_code(path), **options)


def _layer_count(state_dict: Mapping[str, torch.Tensor], prefix: str) -> int:
    """How many layers: gates.0 … gates.{L−1}, each with its block and memory norm."""
    layers = 0
    while f"{prefix}gates.{layers}" in state_dict:
        layers += 1
    if not layers:
        hint = " (a toy model's whole state dict? pass prefix 'backbone.')" if not prefix else ""
        raise ValueError(f"state dict has no {prefix + 'gates.0'!r}: not a public TensorBackbone{hint}")
    return layers


__all__ = ["PublicBackbone", "PublicBlock", "from_public_backbone", "load_public_backbone"]
