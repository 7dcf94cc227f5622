"""opcore-cuda: opcore's PyTorch CUDA backend (ATen kernels on CUDA tensors, cuBLASLt epilogues,
fused SDPA, the ATen fallback).

Installed with ``pip install "opcore[cuda]"`` next to a CUDA build of torch; opcore finds it through
the ``opcore.backends`` entry point ``cuda``. Without a usable GPU it loads as unavailable, with
the reason, and registers nothing:

>>> import opcore
>>> [r.status_text for r in opcore.backends() if r.name == "cuda"]               # doctest: +SKIP
['unavailable: no CUDA build of torch (torch 2.13.0+cpu); install a CUDA build: https://pytorch.org/get-started/locally/']
"""

__version__ = "0.1.0"
