"""Small models the opcore.graph tests capture: an MLP, a Llama-style block, a CNN."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, d: int = 16, hidden: int = 32, activation: str = "relu") -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)
        self.activation = activation

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)
        activations: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
            "relu": F.relu,
            "silu": F.silu,
            "gelu": F.gelu,
            "tanh_gelu": lambda t: F.gelu(t, approximate="tanh"),
        }
        return self.fc2(activations[self.activation](h))


class RMSNorm(nn.Module):
    """The Llama RMSNorm as Hugging Face writes it (fp32 math)."""

    def __init__(self, d: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.rand(d) + 0.5)
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        variance = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(variance + self.eps))


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class LlamaBlock(nn.Module):
    """RMSNorm, rotary attention (SDPA, causal), RMSNorm, gated MLP; two outputs (hidden, and a
    cumulative sum that no graph runtime has an op for)."""

    cos: torch.Tensor  # buffers (register_buffer), declared for the type checker
    sin: torch.Tensor

    def __init__(self, d: int = 32, heads: int = 4, inter: int = 64, seq: int = 8) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, d // heads
        self.norm1, self.norm2 = RMSNorm(d), RMSNorm(d)
        self.q, self.k, self.v, self.o = (nn.Linear(d, d, bias=False) for _ in range(4))
        self.gate, self.up = nn.Linear(d, inter, bias=False), nn.Linear(d, inter, bias=False)
        self.down = nn.Linear(inter, d, bias=False)
        angles = torch.outer(torch.arange(seq, dtype=torch.float32), torch.rand(self.head_dim // 2))
        self.register_buffer("cos", torch.cat((angles, angles), -1).cos())
        self.register_buffer("sin", torch.cat((angles, angles), -1).sin())

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        b, s, d = x.shape
        h = self.norm1(x)
        q, k, v = (p(h).view(b, s, self.heads, self.head_dim).transpose(1, 2) for p in (self.q, self.k, self.v))
        q = q * self.cos + rotate_half(q) * self.sin
        k = k * self.cos + rotate_half(k) * self.sin
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, d))
        h = self.norm2(x)
        x = x + self.down(F.silu(self.gate(h)) * self.up(h))
        return x, torch.cumprod(x, dim=1)


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.head = nn.Linear(8, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = F.relu(self.conv1(x))
        h = F.relu(self.conv2(h)) + h
        return self.head(h.mean(dim=(2, 3)))


def seeded(model: nn.Module, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    for parameter in model.parameters():
        with torch.no_grad():
            parameter.copy_(torch.randn_like(parameter) * 0.2)
    return model.eval()


def small_llama(
    *, vocab: int = 256, hidden: int = 64, kv_heads: int = 2, tied: bool = False, **config_options: Any
) -> nn.Module:
    """A two-layer transformers LlamaForCausalLM (4 heads, MLP twice ``hidden`` wide), seeded 0, in
    eval mode: the decoder the plan, weights and generation tests capture (``config_options``: more
    LlamaConfig fields, e.g. use_cache=False). Needs transformers."""
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=kv_heads,
        max_position_embeddings=128,
        tie_word_embeddings=tied,
        **config_options,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()
