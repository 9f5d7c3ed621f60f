"""Attach a Tensor Memory to the blocks of an existing Transformer, and take it off again.

``attach_memory(model, config, layers)`` replaces each chosen block by a wrapper that runs
the block's attention half, then the memory (``x = mem(x)``, LN_m inside), then the block's
MLP half. The block object itself is kept, untouched, inside the wrapper, so
``detach_memory(model)`` puts the very same objects back and the model computes bit for bit
what it computed before.

Supported blocks: this project's :class:`~tensor_memory.backbone.Block` and
``torch.nn.TransformerEncoderLayer`` (any ``norm_first``, any ``batch_first``, with masks),
wherever they sit in ``model`` — inside an ``nn.TransformerEncoder``, an ``nn.Sequential``,
or as ``model`` itself (then the wrapper is returned in its place). Blocks are numbered in
``model.modules()`` order; ``layers`` picks among them (None = all).

Attached with a strongly negative ``gate_init`` (e.g. ``MemoryConfig(gate_init=-9.0)``,
σ(γ) ≈ 1e-4), a pretrained model's outputs barely move and training can open the gate.

Memory state: in a :class:`~tensor_memory.backbone.Backbone` the attached memory's state
travels in the :class:`~tensor_memory.backbone.BackboneState` like a built-in memory layer's,
so streaming still reproduces one pass. ``nn.TransformerEncoderLayer`` carries no state, so
there the memory starts from zero at every forward call. The memory reads and writes every
position it is given (padding masks do not reach it); it is causal, so right padding never
affects real tokens.
"""

from __future__ import annotations

from typing import Iterable, Optional

import torch
import torch.nn.functional as F
from torch import nn

from ..memory import MemoryConfig, TensorMemory
from .blocks import Block, apply_memory
from .config import LayerState

__all__ = ["attach_memory", "detach_memory", "AttachedBlock", "AttachedEncoderLayer"]

_SAVED_NESTED = "_tensor_memory_saved_use_nested_tensor"  # on an nn.TransformerEncoder while attached


class _Attached(nn.Module):
    """A block with a memory between its halves; ``self.block`` is the original, unchanged block."""

    def __init__(self, block: nn.Module, memory: TensorMemory) -> None:
        super().__init__()
        self.block = block
        self.memory = memory

    def __getattr__(self, name: str):
        # Code that inspects the block (nn.TransformerEncoder reads layers[0].self_attn.batch_first)
        # sees the wrapped block's attributes.
        try:
            return super().__getattr__(name)
        except AttributeError:
            modules = self.__dict__.get("_modules", {})
            if "block" not in modules:
                raise
            return getattr(modules["block"], name)


class AttachedBlock(_Attached):
    """A :class:`Block` with a Tensor Memory after its attention: same call signature as Block."""

    def init_layer_state(self, batch_size: int, device=None, dtype=None) -> LayerState:
        state = self.block.init_layer_state(batch_size, device, dtype)
        return LayerState(state.attn, self.memory.init_state(batch_size, device=device, dtype=dtype))

    def forward(self, x, state: Optional[LayerState], pos0: int, prefix: int = 0):
        x, cache = self.block.attend(x, None if state is None else state.attn, pos0, prefix)
        # A state made before attaching has no memory entry: the memory starts from zero then.
        x, memory_state = apply_memory(self.memory, x, None if state is None else state.memory, prefix)
        x = self.block.feed_forward(x)
        return x, (None if state is None else LayerState(cache, memory_state))


class AttachedEncoderLayer(_Attached):
    """An ``nn.TransformerEncoderLayer`` with a Tensor Memory after its self-attention.

    Same call signature as the layer. It always runs the layer's documented "slow path"
    (``_sa_block``/``_ff_block`` and the norms, honouring ``norm_first``, ``batch_first`` and
    the masks): the fused eval-mode fast path has no place to insert the memory.
    """

    def forward(self, src: torch.Tensor, src_mask: Optional[torch.Tensor] = None,
                src_key_padding_mask: Optional[torch.Tensor] = None, is_causal: bool = False) -> torch.Tensor:
        layer = self.block
        if src.is_nested:
            raise ValueError("attached memory layers take padded tensors, not nested tensors")
        # The same mask canonicalisation as TransformerEncoderLayer.forward.
        src_key_padding_mask = F._canonical_mask(mask=src_key_padding_mask, mask_name="src_key_padding_mask",
                                                 other_type=F._none_or_dtype(src_mask), other_name="src_mask",
                                                 target_type=src.dtype)
        src_mask = F._canonical_mask(mask=src_mask, mask_name="src_mask", other_type=None, other_name="",
                                     target_type=src.dtype, check_other=False)
        x = src
        if layer.norm_first:
            x = x + layer._sa_block(layer.norm1(x), src_mask, src_key_padding_mask, is_causal=is_causal)
            x = self._remember(x)
            x = x + layer._ff_block(layer.norm2(x))
        else:
            x = layer.norm1(x + layer._sa_block(x, src_mask, src_key_padding_mask, is_causal=is_causal))
            x = self._remember(x)
            x = layer.norm2(x + layer._ff_block(x))
        return x

    def _remember(self, x: torch.Tensor) -> torch.Tensor:
        """x = mem(x) on (B, N, d), from a zero state; x is (N, B, d) unless batch_first."""
        batch_first = self.block.self_attn.batch_first
        if x.dim() == 2:  # an unbatched sequence (N, d)
            return self.memory(x[None])[0][0]
        y, _ = self.memory(x if batch_first else x.transpose(0, 1))
        return y if batch_first else y.transpose(0, 1)


def _blocks(model: nn.Module) -> list[tuple[Optional[nn.Module], str, nn.Module]]:
    """Every supported block in ``model.modules()`` order, as (parent, attribute name, block).

    Attached wrappers count as the block they wrap (and are not searched inside).
    """
    found: list[tuple[Optional[nn.Module], str, nn.Module]] = []
    kinds = (Block, nn.TransformerEncoderLayer, _Attached)
    if isinstance(model, kinds):
        return [(None, "", model)]

    def walk(parent: nn.Module) -> None:
        for name, child in parent.named_children():
            if isinstance(child, kinds):
                found.append((parent, name, child))
            else:
                walk(child)

    walk(model)
    return found


def _width(block: nn.Module) -> int:
    if isinstance(block, Block):
        return block.attn_norm.normalized_shape[0]
    return block.self_attn.embed_dim


def _select(count: int, layers: Optional[Iterable[int]]) -> list[int]:
    if layers is None:
        return list(range(count))
    chosen = list(layers)
    if not chosen or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < count for i in chosen) \
            or len(set(chosen)) != len(chosen):
        raise ValueError(f"attach_memory: layers must be distinct block indices in [0, {count - 1}] "
                         f"(or None for all), got {layers!r}")
    return sorted(chosen)


def attach_memory(model: nn.Module, config: MemoryConfig, layers: Optional[Iterable[int]] = None) -> nn.Module:
    """Insert a fresh :class:`TensorMemory` after the attention of the chosen blocks of ``model``.

    ``layers`` indexes the supported blocks in ``model.modules()`` order; None = all. Each
    chosen block gets its own memory (its own parameters and state), on the block's device
    and dtype and in its train/eval mode. Returns ``model`` (or the wrapper, when ``model``
    is itself a block). Raises ValueError when there is no block, when
    ``config.token_dim`` differs from a block's width, or when a chosen block already has
    a memory.
    """
    if not isinstance(config, MemoryConfig):
        raise ValueError(f"attach_memory expects a MemoryConfig, got {type(config).__name__}")
    blocks = _blocks(model)
    if not blocks:
        raise ValueError("attach_memory: the model has no supported blocks "
                         "(tensor_memory Block or torch.nn.TransformerEncoderLayer)")
    chosen = _select(len(blocks), layers)
    for i in chosen:  # check everything before changing anything
        block = blocks[i][2]
        if isinstance(block, _Attached) or (isinstance(block, Block) and block.memory is not None):
            raise ValueError(f"attach_memory: block {i} already has a memory layer")
        if _width(block) != config.token_dim:
            raise ValueError(f"attach_memory: MemoryConfig.token_dim={config.token_dim} does not match "
                             f"block {i}'s width {_width(block)}")
    for i in chosen:
        parent, name, block = blocks[i]
        ref = next(block.parameters())
        memory = TensorMemory(config).to(device=ref.device, dtype=ref.dtype).train(block.training)
        wrapper = (AttachedBlock if isinstance(block, Block) else AttachedEncoderLayer)(block, memory)
        if parent is None:
            return wrapper
        setattr(parent, name, wrapper)  # works for ModuleList / Sequential children too
        if isinstance(parent, nn.ModuleList):
            _disable_nested(model, parent)
    return model


def detach_memory(model: nn.Module) -> nn.Module:
    """Remove every attached memory, putting the original block objects back. Returns the model
    (or the original block, when ``model`` is itself an attached wrapper)."""
    if isinstance(model, _Attached):
        return model.block
    for parent, name, block in _blocks(model):
        if isinstance(block, _Attached) and parent is not None:
            setattr(parent, name, block.block)
    for module in model.modules():
        if isinstance(module, nn.TransformerEncoder) and hasattr(module, _SAVED_NESTED):
            module.use_nested_tensor = getattr(module, _SAVED_NESTED)
            delattr(module, _SAVED_NESTED)
    return model


def _disable_nested(model: nn.Module, layers: nn.ModuleList) -> None:
    """Stop an ``nn.TransformerEncoder`` around ``layers`` from turning padded input into nested tensors.

    In eval mode with a padding mask it would otherwise hand its layers nested tensors,
    which the memory (a chunked recurrence over positions) cannot take. The setting is
    restored by :func:`detach_memory`.
    """
    for module in model.modules():
        if isinstance(module, nn.TransformerEncoder) and module.layers is layers \
                and not hasattr(module, _SAVED_NESTED):
            setattr(module, _SAVED_NESTED, getattr(module, "use_nested_tensor", False))
            module.use_nested_tensor = False
