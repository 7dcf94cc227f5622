"""opcore.nn: PyTorch modules whose backend is chosen once, with prepared weights and fused ops.

Each module resolves its ops at construction (``opcore.resolve``) on the backend you name -- a
name, names in preference order, or None for the ranked default -- and lets that backend's
kernel prepare the weights (oneDNN packing on cpu; initializers for ONNX Runtime, constants for
OpenVINO). ``convert`` swaps the supported submodules of a torch model for these. This is the
only part of opcore that imports torch; ``import opcore`` does not import it. See docs/nn.md.

>>> import torch, opcore.nn
>>> layer = opcore.nn.LinearSiLU(64, 32, backend="cpu")
>>> with torch.no_grad():
...     layer(torch.randn(4, 64)).shape
torch.Size([4, 32])
"""

from opcore.nn.attention import Attention
from opcore.nn.binding import Bound
from opcore.nn.convert import (
    ConversionReport,
    Replacement,
    Skipped,
    convert,
    register_conversion,
    unregister_conversion,
)
from opcore.nn.linear import Linear, LinearGELU, LinearReLU, LinearSiLU
from opcore.nn.mlp import GatedMLP
from opcore.nn.normalization import LayerNorm, RMSNorm
from opcore.nn.state import DEFAULT_EXAMPLE_ROWS, GradientError, LinearWeights, PreparedModule

__all__ = [
    "DEFAULT_EXAMPLE_ROWS",
    "Attention",
    "Bound",
    "ConversionReport",
    "GatedMLP",
    "GradientError",
    "LayerNorm",
    "Linear",
    "LinearGELU",
    "LinearReLU",
    "LinearSiLU",
    "LinearWeights",
    "PreparedModule",
    "RMSNorm",
    "Replacement",
    "Skipped",
    "convert",
    "register_conversion",
    "unregister_conversion",
]
