"""Vision patch embeddings as one matrix product.

Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3.5 and GLM-4V hand their vision tower pixels already cut
into patches, ``[patches, channels, frames, height, width]``, and embed them with a ``Conv3d``
whose stride equals its kernel: each output is one patch's pixels times the kernel, which is a
matrix product of the flattened patches with the flattened kernel, which oneDNN's 3-D
convolution runs more slowly on the CPU (``bench/bench_scaling.py`` measures the engine, which
embeds with the product, against ``generate``, which keeps the convolution).

:func:`install` makes such convolutions of the engine's model compute one-kernel inputs with the
matrix product, which reads the current weights on every call (weight updates copy into them).
The sums are the same, in another order, so the embeddings differ from the convolution's at float
rounding only. Any other input (a convolution over a larger volume) still runs the convolution.
"""

from __future__ import annotations

import types

import torch

_MARK = "_vlrollout_patch_matmul"


def is_patch_convolution(module: torch.nn.Module) -> bool:
    """Whether ``module`` is a ``Conv3d`` that tiles its input: stride equal to the kernel, no
    padding, dilation or groups."""
    return (
        type(module) is torch.nn.Conv3d
        and tuple(module.stride) == tuple(module.kernel_size)
        and tuple(module.padding) == (0, 0, 0)
        and tuple(module.dilation) == (1, 1, 1)
        and module.groups == 1
    )


def _forward(self: torch.nn.Conv3d, x: torch.Tensor) -> torch.Tensor:
    if x.dim() != 5 or tuple(x.shape[2:]) != tuple(self.kernel_size):
        return torch.nn.Conv3d.forward(self, x)
    kernel = self.weight.reshape(self.out_channels, -1)
    flat = x.reshape(x.shape[0], -1)
    out = flat @ kernel.t() if self.bias is None else torch.addmm(self.bias, flat, kernel.t())
    return out.view(x.shape[0], self.out_channels, 1, 1, 1)


def install(model: torch.nn.Module) -> int:
    """Make every patch convolution of ``model`` (:func:`is_patch_convolution`) embed one-kernel
    inputs with a matrix product; returns how many it changed (0 when called again)."""
    changed = 0
    for module in model.modules():
        if is_patch_convolution(module) and not getattr(module, _MARK, False):
            module.forward = types.MethodType(_forward, module)
            setattr(module, _MARK, True)
            changed += 1
    return changed
