"""The functions the joint-graph fixtures and the cross-check are built from:
the paper's examples, an MLP block and an attention block, at small shapes."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

__all__ = ["EXAMPLES"]

N = 1024


def _leaf(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, requires_grad=True)


def tanh_tanh() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    return (lambda x: x.tanh().tanh()), (_leaf(N),)


def sum_cos_cos() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The paper's f1: saves only the sum."""
    return (lambda a, b, c, d: (a + b + c + d).cos().cos()), tuple(_leaf(N) for _ in range(4))


def gelu_erf() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """GeLU written with erf: saves only the input."""

    def gelu(x: torch.Tensor) -> torch.Tensor:
        return x * 0.5 * (1.0 + torch.erf(x / 1.41421356237))

    return gelu, (_leaf(N),)


def dropout_like() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """x * (rand_like(x) < 0.5): saves the bool mask, never recomputes rand."""
    return (lambda x: x * (torch.rand_like(x) < 0.5)), (_leaf(N),)


class MLPBlock(torch.nn.Module):
    def __init__(self, dim: int = 64, hidden: int = 256) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.fc1 = torch.nn.Linear(dim, hidden)
        self.fc2 = torch.nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))


class AttentionBlock(torch.nn.Module):
    def __init__(self, dim: int = 64, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm = torch.nn.LayerNorm(dim)
        self.qkv = torch.nn.Linear(dim, 3 * dim)
        self.proj = torch.nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.norm(x)).chunk(3, dim=-1)
        q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        scores = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        att = scores.softmax(dim=-1) @ v
        return x + self.proj(att.transpose(1, 2).reshape(b, t, d))


def long_chain() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """110 sines in a row: PyTorch's long-fusible-chain ban fires."""

    def chain(x: torch.Tensor) -> torch.Tensor:
        for _ in range(110):
            x = x.sin()
        return x

    return chain, (_leaf(256),)


def far_apart() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """A value read by a matmul and, after it, by a fusible op: PyTorch's
    used-far-apart ban fires."""

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        z = (y @ w).relu()
        return (z.sum(-1, keepdim=True) + y.cos()).tanh()

    return f, (_leaf(16, 16), _leaf(16, 16))


def mlp_block() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    return MLPBlock(), (_leaf(4, 16, 64),)


def attention_block() -> tuple[Callable[..., Any], tuple[Any, ...]]:
    return AttentionBlock(), (_leaf(2, 16, 64),)


EXAMPLES: dict[str, Callable[[], tuple[Callable[..., Any], tuple[Any, ...]]]] = {
    "tanh_tanh": tanh_tanh,
    "sum_cos_cos": sum_cos_cos,
    "gelu_erf": gelu_erf,
    "dropout_like": dropout_like,
    "mlp_block": mlp_block,
    "attention_block": attention_block,
    "long_chain": long_chain,
    "far_apart": far_apart,
}
