"""The paper's public backbones (github kswain98/tensor-memory) imported whole: their Transformer blocks, and their
one shared memory interface on :class:`TensorMemory`, one layer of it per block that calls it.

Two layouts, both threading one state (h, c) through the layers — zeros at every forward, layer i starting from the
state the memory layer before it left — and both adding ``σ(gate_i)·m`` to the residual stream, the gate outside
the interface:

- the toy scripts' ``TensorBackbone`` (``toy/backbones.py``): per layer ``x = block_i(x)`` (pre-norm: ``x +
  attn(ln1(x))``, then ``x + mlp(ln2(x))``), then ``m = memory(mem_lns[i](x))`` and ``x + σ(gates[i])·m``; a last
  LayerNorm ``ln``. Keys: ``token_blocks.{i}.{ln1,attn,ln2,mlp}``, ``mem_lns.{i}``, ``gates.{i}`` (1,),
  ``memory.*``, ``ln``. ``toy/occlusion.py`` passes a causal mask.
- ``ViTBlockWithMemory`` stacks (``model.py``'s ``TensorMemoryViT``, ``image/train_image.py``'s encoder): per
  block ``x + attn(norm1(x))``, then, in a memory block, ``m = memory(ln_memory(x))`` and ``x + σ(memory_gate)·m``,
  then ``x + mlp(norm2(x))``; a last ``norm``. Keys: ``blocks.{i}.{norm1,attn,norm2,mlp}``, ``blocks.{i}.ln_memory``
  and ``.memory_gate`` (1,) in memory blocks, ``shared_tensor_memory.*`` or ``shared_memory.*``, ``norm``. No mask.

Here memory layer i is its own TensorMemory, ``memories.{i}``, holding the interface's weights and its gate as γ
(``public_code.output = "gated"``): a trace records every layer, and σ(γ) is the model's gate. ``attn`` is
``nn.MultiheadAttention`` (``in_proj_weight`` (3d, d), ``out_proj``), ``mlp`` its ``mlp.0`` (h, d) and ``mlp.3``
(d, h). The number of attention heads is not stored: pass it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

import torch
from torch import nn

from ..memory import TensorMemory
from ..memory.public_code import read_public_code

# Each layout's names → the toy layout's (which this module's are): its keys are read under these names.
VIT_NAMES = (
    (r"blocks\.(\d+)\.norm1\.", r"token_blocks.\1.ln1."),
    (r"blocks\.(\d+)\.norm2\.", r"token_blocks.\1.ln2."),
    (r"blocks\.(\d+)\.(attn|mlp)\.", r"token_blocks.\1.\2."),
    (r"blocks\.(\d+)\.ln_memory\.", r"mem_lns.\1."),
    (r"blocks\.(\d+)\.memory_gate$", r"gates.\1"),
    (r"norm\.", "ln."),
    (r"shared_(tensor_)?memory\.", "memory."),
)
VIT_BACK = (  # the toy layout's names → a ViT layout's, to name an entry it lacks
    (r"token_blocks\.(\d+)\.ln1\.", r"blocks.\1.norm1."),
    (r"token_blocks\.(\d+)\.ln2\.", r"blocks.\1.norm2."),
    (r"token_blocks\.(\d+)\.", r"blocks.\1."),
    (r"mem_lns\.(\d+)\.", r"blocks.\1.ln_memory."),
    (r"ln\.", "norm."),
)
HINT = "a toy model's? prefix 'backbone.'; a PatchReconModel's? prefix 'encoder.'"


class PublicBlock(nn.Module):
    """The public pre-norm block: ``x + attn(ln1(x))``, then ``x + mlp(ln2(x))``."""

    def __init__(self, d: int, heads: int, hidden: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.ln2 = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, hidden), nn.GELU(), nn.Identity(), nn.Linear(hidden, d))  # mlp.0, mlp.3

    def attend(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        normed = self.ln1(x)
        return x + self.attn(normed, normed, normed, attn_mask=mask, need_weights=False)[0]

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.mlp(self.ln2(x))


class PublicBackbone(nn.Module):
    """``y = backbone(x)``: x (B, N, d) the tokens the model feeds its first block, y (B, N, d) after the last norm."""

    def __init__(self, blocks: int, heads: int, hidden: int, memories: dict[int, TensorMemory], toy: bool) -> None:
        super().__init__()
        d = next(iter(memories.values())).config.token_dim
        self.toy = toy  # the toy layout: memory after the block, a causal mask; else between attention and MLP
        self.causal = toy
        self.token_blocks = nn.ModuleList(PublicBlock(d, heads, hidden) for _ in range(blocks))
        self.mem_lns = nn.ModuleDict({str(i): nn.LayerNorm(d) for i in memories})
        self.memories = nn.ModuleDict({str(i): memory for i, memory in memories.items()})  # the interface, its gate
        self.ln = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        N = x.shape[1]
        mask = torch.ones(N, N, dtype=torch.bool, device=x.device).triu(1) if self.causal else None
        state = next(iter(self.memories.values())).init_state(x.shape[0], x.device, x.dtype)  # zeros, as theirs
        for i, block in enumerate(self.token_blocks):
            x = block.attend(x, mask)
            if not self.toy:
                x, state = self._memory(i, x, state)
            x = block.feed_forward(x)
            if self.toy:
                x, state = self._memory(i, x, state)
        return self.ln(x)

    def _memory(self, i: int, x: torch.Tensor, state):
        """Layer i's memory, where it has one: ``x + σ(gate_i)·m`` from the state the layer before left."""
        if str(i) not in self.memories:
            return x, state
        gated, state = self.memories[str(i)](self.mem_lns[str(i)](x), state)
        return x + gated, state


def from_public_backbone(
    state_dict: Mapping[str, torch.Tensor],
    *,
    heads: int,
    prefix: str = "",
    sigma_scale: float = 1.0,
    causal: bool | None = None,
) -> PublicBackbone:
    """A :class:`PublicBackbone` with the weights of a public backbone's state dict, either layout (see the module
    docstring; ``prefix``: where it sits, ``"backbone."`` in a toy model, ``"encoder."`` in a ``PatchReconModel``).
    ``heads``: its attention heads; ``sigma_scale``: the interface's constructor argument; ``causal``: whether the
    script passes a causal mask (None: the toy layout's ``toy/occlusion.py`` does, a ``ViTBlockWithMemory`` never).
    A missing, extra, wrong-shaped or non-finite entry is refused with a ValueError naming the key."""
    if not isinstance(heads, int) or isinstance(heads, bool) or heads < 1:
        raise ValueError(f"from_public_backbone.heads must be a positive integer (the script's --heads), got {heads!r}")
    if not isinstance(prefix, str) or not isinstance(state_dict, Mapping):
        raise ValueError("from_public_backbone takes a state dict (names to tensors) and a string prefix")
    toy, theirs, named, interface = _renamed(state_dict, prefix)
    blocks = 0
    while f"token_blocks.{blocks}.ln1.weight" in theirs:
        blocks += 1
    if not blocks:
        raise ValueError(f"state dict has no {_their_name('token_blocks.0.ln1.weight', toy, prefix)!r}: no block 0")
    gates = [i for i in range(blocks) if f"gates.{i}" in theirs]
    memories = {
        i: TensorMemory.from_public_code(
            state_dict, prefix=interface, sigma_scale=sigma_scale, gate=theirs[f"gates.{i}"]
        )
        for i in gates
    }
    first = theirs.get("token_blocks.0.mlp.0.weight")
    d = memories[gates[0]].memory.config.token_dim
    if d % heads:
        raise ValueError(f"from_public_backbone.heads={heads} does not divide the width {d}; pass the script's --heads")
    hidden = int(first.shape[0]) if isinstance(first, torch.Tensor) and first.dim() == 2 else 1
    model = PublicBackbone(blocks, heads, hidden, {i: m.memory for i, m in memories.items()}, toy)
    model.causal = toy if causal is None else bool(causal)
    built = model.state_dict()
    ours = [k for k in built if not k.startswith("memories.")]  # the memories hold the interface and gates already
    extra = sorted(k for k in set(theirs) - set(ours) - {f"gates.{i}" for i in gates} if not k.startswith("memory."))
    if extra:
        raise ValueError(
            f"state dict has unexpected entries {', '.join(repr(named[k]) for k in extra[:3])}: not a public "
            f"{'TensorBackbone (toy/backbones.py)' if toy else 'stack of ViTBlockWithMemory (model.py)'}"
        )
    for key in ours:
        got, name = theirs.get(key), named.get(key, _their_name(key, toy, prefix))
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(built[key].shape):
            found = "missing" if got is None else f"of shape {tuple(getattr(got, 'shape', ()))}"
            raise ValueError(f"state dict entry {name!r} is {found}, expected shape {tuple(built[key].shape)}")
        if not got.is_floating_point() or not bool(torch.isfinite(got).all()):
            raise ValueError(f"state dict entry {name!r} must hold finite floating-point numbers")
    model.load_state_dict({**built, **{k: theirs[k] for k in ours}}, strict=True)
    return model.to(memories[gates[0]].memory.mix.weight.dtype).eval()


def load_public_backbone(path, **options) -> PublicBackbone:
    """:func:`from_public_backbone` of a safetensors file (``save_file(model.state_dict(), path)``), checked before it
    is read and never unpickled."""
    return from_public_backbone(read_public_code(path), **options)


def _renamed(state_dict: Mapping[str, torch.Tensor], prefix: str) -> tuple[bool, dict, dict, str]:
    """Whether it is the toy layout; its entries under ``prefix`` by the toy layout's names; each one's own name; and
    where its interface sits. A ViT layout's entries outside its blocks, norm and interface (its patch embedding,
    head, …) are left out."""
    under = {k[len(prefix) :]: v for k, v in state_dict.items() if isinstance(k, str) and k.startswith(prefix)}
    if "gates.0" in under:
        return True, under, {k: prefix + k for k in under}, prefix + "memory."
    if "blocks.0.memory_gate" not in under:
        raise ValueError(
            f"state dict has neither {prefix + 'gates.0'!r} nor {prefix + 'blocks.0.memory_gate'!r}: not a public "
            f"backbone with a memory at its first layer ({HINT})"
        )
    theirs, named = {}, {}
    for key, value in under.items():
        pattern, ours = next(((p, o) for p, o in VIT_NAMES if re.match(p, key)), (r"blocks\.", "blocks."))
        if re.match(pattern, key):  # a block's entry this layout does not have stays, to be refused by name
            theirs[re.sub(pattern, ours, key, count=1)] = value
            named[re.sub(pattern, ours, key, count=1)] = prefix + key
    interface = (
        "shared_tensor_memory." if any(k.startswith("shared_tensor_memory.") for k in under) else "shared_memory."
    )
    return False, theirs, named, prefix + interface


def _their_name(key: str, toy: bool, prefix: str) -> str:
    """An entry's name in the layout it is missing from."""
    for pattern, template in () if toy else VIT_BACK:
        if re.match(pattern, key):
            return prefix + re.sub(pattern, template, key, count=1)
    return prefix + key


__all__ = ["PublicBackbone", "PublicBlock", "from_public_backbone", "load_public_backbone"]
