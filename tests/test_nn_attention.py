"""opcore.nn.Attention: q/k/v projections (one GEMM), sdpa, output projection, on each backend."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

import torch.nn.functional as F  # noqa: E402
from machine import needs_backend, onednn_or_aten  # noqa: E402

import opcore  # noqa: E402
import opcore.nn  # noqa: E402

BACKENDS = ["cpu", "onnxruntime", "openvino"]


def eager(q, k, v, o, x, heads, kv_heads, causal):
    b, s, _ = x.shape
    query = q(x).view(b, s, heads, -1).transpose(1, 2)
    key = k(x).view(b, s, kv_heads, -1).transpose(1, 2)
    value = v(x).view(b, s, kv_heads, -1).transpose(1, 2)
    y = F.scaled_dot_product_attention(query, key, value, is_causal=causal, enable_gqa=kv_heads != heads)
    return o(y.transpose(1, 2).reshape(b, s, -1))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("bias", [False, True])
def test_matches_torch(backend, causal, bias):
    needs_backend(backend)
    torch.manual_seed(0)
    q, k, v, o = (torch.nn.Linear(64, 64, bias=bias) for _ in range(4))
    attention = opcore.nn.Attention.from_linears(q, k, v, o, heads=4, causal=causal, backend=backend)
    assert attention.backend == backend
    assert [r.op for r in attention.bound.resolved] == ["linear", "scaled_dot_product_attention", "linear"]
    assert {r.kernel.backend for r in attention.bound.resolved} == {backend}
    with torch.no_grad():
        for batch, seq in [(1, 1), (2, 9), (3, 16)]:
            x = torch.randn(batch, seq, 64)
            torch.testing.assert_close(attention(x), eager(q, k, v, o, x, 4, 4, causal), rtol=1e-5, atol=1e-5)


def test_grouped_query_attention_and_unbatched_input():
    torch.manual_seed(0)
    q, o = torch.nn.Linear(64, 64, bias=False), torch.nn.Linear(64, 64, bias=False)
    k, v = torch.nn.Linear(64, 32, bias=False), torch.nn.Linear(64, 32, bias=False)
    attention = opcore.nn.Attention.from_linears(q, k, v, o, heads=4, kv_heads=2, causal=True)
    assert "kv_heads=2" in repr(attention)
    x = torch.randn(2, 5, 64)
    with torch.no_grad():
        torch.testing.assert_close(attention(x), eager(q, k, v, o, x, 4, 2, True), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(attention(x[0]), eager(q, k, v, o, x[:1], 4, 2, True)[0], rtol=1e-5, atol=1e-5)
    x.requires_grad_(True)
    torch.testing.assert_close(attention(x), eager(q, k, v, o, x, 4, 2, True))  # the autograd path


def test_bfloat16_on_cpu():
    torch.manual_seed(0)
    q, k, v, o = (torch.nn.Linear(256, 256, bias=False).to(torch.bfloat16) for _ in range(4))
    attention = opcore.nn.Attention.from_linears(q, k, v, o, heads=4, causal=True, backend="cpu")
    assert f"{onednn_or_aten('bfloat16')} prepared" in repr(attention)
    x = torch.randn(2, 32, 256, dtype=torch.bfloat16)
    with torch.no_grad():
        torch.testing.assert_close(attention(x), eager(q, k, v, o, x, 4, 4, True), rtol=3e-2, atol=3e-2)


def test_state_dict_keys_follow_the_names():
    attention = opcore.nn.Attention(32, 4, names=("wq", "wk", "wv", "wo"), bias=True)
    assert list(attention.state_dict()) == [f"{n}.{p}" for n in ("wq", "wk", "wv", "wo") for p in ("weight", "bias")]


def test_bad_shapes_and_heads():
    with pytest.raises(opcore.ShapeError, match="a divisor of hidden_features=30"):
        opcore.nn.Attention(30, 4)
    with pytest.raises(opcore.ArgumentError, match="a positive divisor of heads=4"):
        opcore.nn.Attention(32, 4, kv_heads=3)
    attention = opcore.nn.Attention(32, 4)
    with torch.no_grad(), pytest.raises(opcore.ShapeError, match=r"expected \(batch, seq, 32\)"):
        attention(torch.ones(2, 3, 16))
    q = torch.nn.Linear(32, 32, bias=True)
    with pytest.raises(opcore.ArgumentError, match="all have a bias or all have none"):
        opcore.nn.Attention.from_linears(q, *(torch.nn.Linear(32, 32, bias=False) for _ in range(3)), heads=4)
