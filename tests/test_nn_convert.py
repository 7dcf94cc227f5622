"""opcore.nn.convert: a transformer block written with torch.nn converts and gives the same outputs
on every backend; Sequential pairs fuse; the report says what went where; state stays compatible.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from machine import needs_backend  # noqa: E402
from torch import Tensor, nn  # noqa: E402

import opcore  # noqa: E402
import opcore.nn  # noqa: E402

BACKENDS = ["cpu", "onnxruntime", "openvino"]
HIDDEN, HEADS, INTERMEDIATE = 64, 4, 160


# --- a LLaMA-style block from torch.nn pieces ---------------------------------------------------


class SelfAttention(nn.Module):
    def __init__(self, hidden: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(hidden, hidden, bias=False) for _ in range(4))

    def forward(self, x: Tensor) -> Tensor:
        b, s, _ = x.shape
        q, k, v = (p(x).view(b, s, self.heads, -1).transpose(1, 2) for p in (self.wq, self.wk, self.wv))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.wo(y.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, hidden: int, intermediate: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(hidden, intermediate, bias=False)  # gate
        self.w3 = nn.Linear(hidden, intermediate, bias=False)  # up
        self.w2 = nn.Linear(intermediate, hidden, bias=False)  # down

    def forward(self, x: Tensor) -> Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention_norm = nn.RMSNorm(HIDDEN, eps=1e-6)
        self.attention = SelfAttention(HIDDEN, HEADS)
        self.ffn_norm = nn.RMSNorm(HIDDEN, eps=1e-6)
        self.feed_forward = FeedForward(HIDDEN, INTERMEDIATE)

    def forward(self, x: Tensor) -> Tensor:
        h = x + self.attention(self.attention_norm(x))
        return h + self.feed_forward(self.ffn_norm(h))


def attention_rule(module: SelfAttention, **options):
    names = ("wq", "wk", "wv", "wo")
    layers = (module.wq, module.wk, module.wv, module.wo)
    return opcore.nn.Attention.from_linears(*layers, heads=module.heads, causal=True, names=names, **options)


def feed_forward_rule(module: FeedForward, **options):
    return opcore.nn.GatedMLP.from_linears(module.w1, module.w3, module.w2, names=("w1", "w3", "w2"), **options)


RULES = {SelfAttention: attention_rule, FeedForward: feed_forward_rule}


def block(dtype=torch.float32) -> Block:
    torch.manual_seed(0)
    model = Block()
    with torch.no_grad():
        for norm in (model.attention_norm, model.ffn_norm):
            norm.weight.copy_(torch.rand_like(norm.weight) + 0.5)
    return model.to(dtype).eval()


@pytest.mark.parametrize("backend", BACKENDS)
def test_transformer_block_converts_and_matches(backend):
    needs_backend(backend)
    original = block()
    converted, report = opcore.nn.convert(original, backend=backend, rules=RULES)
    assert [type(m).__name__ for m in converted.children()] == ["RMSNorm", "Attention", "RMSNorm", "GatedMLP"]
    assert report.backends() == {backend: 4} and not report.skipped
    assert [r.path for r in report.replaced] == ["attention_norm", "attention", "ffn_norm", "feed_forward"]
    assert type(original.attention) is SelfAttention  # the original is left as it was
    x = torch.randn(2, 12, HIDDEN)
    with torch.no_grad():
        torch.testing.assert_close(converted(x), original(x), rtol=1e-4, atol=1e-4)


def test_transformer_block_in_bfloat16_on_cpu():
    original = block(torch.bfloat16)
    converted, report = opcore.nn.convert(original, rules=RULES)
    assert report.backends() == {"cpu": 4}
    x = torch.randn(2, 12, HIDDEN, dtype=torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(converted(x), original(x), rtol=5e-2, atol=5e-2)


def test_converted_block_saves_and_loads_like_the_original():
    original = block()
    converted, _ = opcore.nn.convert(original, rules=RULES)
    assert list(converted.state_dict()) == list(original.state_dict())
    other = Block()  # different weights
    converted.load_state_dict(other.state_dict())
    x = torch.randn(1, 5, HIDDEN)
    with torch.no_grad():
        torch.testing.assert_close(converted(x), other(x), rtol=1e-4, atol=1e-4)
    original.load_state_dict(converted.state_dict())
    with torch.no_grad():
        torch.testing.assert_close(original(x), other(x))


def test_without_rules_only_linear_and_norms_convert():
    original = block()
    converted, report = opcore.nn.convert(original)
    paths = [r.path for r in report.replaced]
    assert paths[:2] == ["attention_norm", "attention.wq"] and "feed_forward.w2" in paths
    assert type(converted.attention).__name__ == "SelfAttention"  # recursed into, its Linears replaced
    assert type(converted.attention.wq) is opcore.nn.Linear
    x = torch.randn(2, 3, HIDDEN)
    with torch.no_grad():
        torch.testing.assert_close(converted(x), original(x), rtol=1e-4, atol=1e-4)


def test_sequential_linear_activation_pairs_fuse():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(16, 32),
        nn.SiLU(),
        nn.Linear(32, 32),
        nn.GELU(approximate="tanh"),
        nn.Linear(32, 8),
        nn.ReLU(inplace=True),
        nn.LayerNorm(8),
        nn.Linear(8, 4),
    )
    converted, report = opcore.nn.convert(model, backend="cpu")
    kinds = [type(m).__name__ for m in converted]
    fused = ["LinearSiLU", "Identity", "LinearGELU", "Identity", "LinearReLU", "Identity"]
    assert kinds == [*fused, "LayerNorm", "Linear"]
    assert converted[2].approximate == "tanh"
    assert [(r.path, r.original) for r in report.replaced][:2] == [("0+1", "Linear+SiLU"), ("2+3", "Linear+GELU")]
    assert list(converted.state_dict()) == list(model.state_dict())
    x = torch.randn(5, 16)
    with torch.no_grad():
        torch.testing.assert_close(converted(x), model(x), rtol=1e-5, atol=1e-5)
    text = str(report)
    assert text.startswith("replaced 5 module(s)") and "LinearSiLU" in text and "cpu (cpu/aten prepared)" in text


def test_a_model_that_is_itself_supported():
    linear = nn.Linear(8, 4)
    converted, report = opcore.nn.convert(linear)
    assert type(converted) is opcore.nn.Linear and report.replaced[0].path == "(model)"


def test_on_error_keep_leaves_the_module_and_says_why():
    needs_backend("onnxruntime")
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU()).to(torch.bfloat16)
    with pytest.raises(opcore.NoKernelError, match="bfloat16"):
        opcore.nn.convert(model, backend="onnxruntime")
    kept, report = opcore.nn.convert(model, backend="onnxruntime", on_error="keep")
    assert type(kept[0]) is nn.Linear and not report.replaced
    assert report.skipped[0].path == "0+1" and "bfloat16" in report.skipped[0].reason
    assert "kept 0+1 (Linear+ReLU)" in str(report)


def test_register_conversion_and_dtype_and_inplace():
    model = nn.Sequential(FeedForward(HIDDEN, INTERMEDIATE))
    opcore.nn.register_conversion(FeedForward, feed_forward_rule)
    try:
        converted, _ = opcore.nn.convert(model, dtype=torch.bfloat16)
    finally:
        opcore.nn.unregister_conversion(FeedForward)
    assert type(converted[0]) is opcore.nn.GatedMLP and converted[0].w1.weight.dtype == torch.bfloat16
    assert model[0].w1.weight.dtype == torch.float32
    same, _ = opcore.nn.convert(model, inplace=True)
    assert same is model and type(model[0]) is FeedForward and type(model[0].w1) is opcore.nn.Linear
    with pytest.raises(opcore.ArgumentError, match="a torch.nn.Module subclass"):
        opcore.nn.register_conversion("Linear", feed_forward_rule)


def test_unregistering_a_builtin_rule_restores_it():
    opcore.nn.register_conversion(nn.Linear, lambda module, **options: None)  # leave Linears alone
    try:
        _, report = opcore.nn.convert(nn.Sequential(nn.Linear(4, 4)))
        assert not report.replaced
    finally:
        opcore.nn.unregister_conversion(nn.Linear)
    _, report = opcore.nn.convert(nn.Sequential(nn.Linear(4, 4)))
    assert [r.replacement for r in report.replaced] == ["Linear"]


def test_training_the_converted_model_uses_autograd():
    original = block()
    converted, _ = opcore.nn.convert(original, rules=RULES)
    converted.train()
    x = torch.randn(1, 4, HIDDEN)
    converted(x).square().mean().backward()
    original(x).square().mean().backward()
    torch.testing.assert_close(converted.feed_forward.w1.weight.grad, original.feed_forward.w1.weight.grad)
