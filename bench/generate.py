"""Text generation: eager transformers ``generate``, torch.compile, optimum-intel and opcore's
``capture_lm``, each against this machine's memory-bandwidth ceiling.

Models (random weights, fp32, built from configs: nothing is downloaded), Llama-style decoders at
three sizes: "small" (LlamaForCausalLM, 2 layers, hidden 512, 8 heads, intermediate 1376, vocabulary
4096, untied lm_head: bench/graph.py's Llama), "135m" (a SmolLM2-135M shape: LlamaConfig hidden 576,
30 layers, 9 heads, 3 kv heads, intermediate 1536, vocabulary 49152, tied embeddings) and "0.5b" (a
Qwen2-0.5B shape: Qwen2Config hidden 896, 24 layers, 14 heads, 2 kv heads, intermediate 4864,
vocabulary 151936, tied embeddings); with ``--models moe`` (not in the default list) a mixture of
experts, "moe" (Qwen3MoeConfig hidden 512, 8 layers, 8 heads, 2 kv heads, 16 experts of intermediate
256 of which each token takes 4, vocabulary 8000, untied: 64M parameters) and "moe64" (hidden
1024, 4 layers, 16 heads, 4 kv heads, 64 experts of intermediate 768 of which each token takes 8, as
wide as Qwen3-30B-A3B's: 631M parameters), whose decode steps read only the chosen experts (their
ceilings count those, ``unread_expert_bytes``). The logits are scaled
by LOGIT_SCALE (16), so that they spread over tens of units as a trained model's do (random
initialisation gives a standard deviation of ~0.5): an untied lm_head's weight is multiplied by it;
with tied embeddings the table is the input embedding too, so the final RMSNorm's gain is multiplied
instead — the logits, ``lm_head(norm(h))``, are linear in both, so that is the same model as a
scaled untied copy, without a second table in memory. (A positive scale leaves every argmax where it
was: greedy tokens, and how close their runners-up are relative to float error, are the same with it
or without it; only sampling would see it.)

Each model runs at every --threads (torch.set_num_threads) and --batches: a prompt of --prompt random
tokens per row (no padding), then --new tokens, greedy, with ``min_new_tokens`` = --new so that no
row stops early. Each column's first call is untimed (it pays for capture or compile; the compile
column makes a second, warm one too); then --rounds calls of every column take turns, in a new
order each round: the table gives their median and, for decode, their min-max. Per call the host
notes when each new token reaches it (a transformers streamer's ``put``; opcore's ``stream``, each
step's tokens copied to the host): time to first token (TTFT) is from the call to the first new
token (the prefill and the first choice), decode tokens/s is batch x (--new - 1) tokens over the
time from the first new token to the last.

Columns (CPU):
  eager dynamic / eager static: ``model.generate`` with the default dynamic cache and with
    ``cache_implementation="static"`` (the "TTFT x eager" and "decode x eager" ratios are against
    the better of the two for that figure);
  compile: ``model.forward = torch.compile(model.forward, fullgraph=True)`` (mode "default" on the CPU,
    "reduce-overhead" on a GPU) and a static cache; its compile time is its first call minus a warm
    one, with Inductor's on-disk cache a new empty folder (``empty_inductor_cache``: a first compile,
    as every capture_lm is) unless TORCHINDUCTOR_CACHE_DIR is set; where it fails, the reason
    (``--skip compile``: Inductor compiles for minutes here);
  optimum-intel: with ``--optimum``, OVModelForCausalLM (OpenVINO) in its own virtualenv under
    build/optimum-intel (torch==2.13.0 pinned and constraints.txt, one install attempt of at most
    INSTALL_S seconds; its verdict is cached in build/optimum-intel/verdict.json: delete it to try
    again). Where it cannot be installed or imported, the table gives why. optimum-intel 2.2.0 asks
    for transformers<5.6 (this project's environment has 5.23), torchvision (whose wheels do not load
    with the CPU build of torch), nncf and openvino-tokenizers; the one attempt on the 2-core build
    machine (2026-11-27) did not finish within 180 s, so no figures for it were taken there;
  opcore: ``opcore.graph.capture_lm(model, max_length=prompt + new, batch_size=batch)`` (captured for
    each thread count and batch: its decode plan is measured at capture), capture time as "build s";
    with ``--unmeasured`` also "opcore unmeasured", ``capture_lm(..., measure=False)``: the ranked
    plans as they come, nothing timed at capture (what the measurements cost, and what they buy);
  bandwidth ceiling: the decode rate memory bandwidth allows. The bytes one decode step must read are
    every weight but the input embedding table (one row of it is read; with tied embeddings the
    table is counted once, as the lm_head), plus the KV cache at its full length, prompt + new (what
    a static cache's attention reads every step): 2 x layers x batch x kv_heads x head_dim x length x
    4 bytes. The read bandwidth is measured at the same thread count, a torch ``sum`` over a
    BANDWIDTH_MB MB buffer (far larger than the caches), best of 5. Ceiling = batch x bandwidth /
    bytes per step; "of ceiling" is each decode figure over it.
  compute floor: the time to first token the machine's matmul rate allows. A prompt's forward must
    at least multiply every linear weight with every prompt token (of a mixture of experts, the
    top-k experts' share), the lm_head with each row's last position (generate keeps only its
    logits) and the attention's scores and weighted sums over the causal triangle (norms,
    activations, rotary, the first token's choice not counted: a lower bound); at the rate of one
    GEMM_N x GEMM_N matmul in the model's dtype at the same thread count (best of 5). Its "TTFT x
    eager" is where no prefill can go below: on a 2-vCPU EPYC (fp32, 1 thread, ~95 GFLOP/s) it is
    above the issue's 0.7 for the small and 135M shapes.

Other columns: "build s" (capture, or compile time), "peak MB" (the process's peak resident set,
VmHWM, over the column's build and first call, reset before them through /proc/self/clear_refs:
it includes the model itself; optimum-intel's is its worker process's own), "tokens" (= where the
greedy tokens equal eager dynamic's, else the first step that differs), and the 1-minute load
average after each group of rows (the bytes per step and the bandwidth are in the ceiling row's
note). After each table: the process's peak RSS over
the model (VmHWM, read from /proc/self/status), "tokens identical: yes/no" (opcore's tokens against
eager's at every thread count and batch), and the targets at batch 1, met or MISSED (not asserted):
decode >= 2.5x eager (small), >= 1.5x eager (135m), >= 0.9 of the bandwidth ceiling (0.5b); TTFT
<= 0.7x eager; decode >= compile's; capture <= 1/3 of compile time.

Threads: torch's pool is set to --threads (and the bandwidth is read at it), and so are opcore's
graph-runtime partitions (``OPCORE_RUNTIME_THREADS`` = --threads while the plan is captured: ONNX
Runtime's intra-op threads, OpenVINO's INFERENCE_NUM_THREADS), so eager and opcore have the same cores.
opcore's ONNX Runtime sessions stop spinning when a run returns (opcore's session options), so their
pool does not hold the cores while torch runs. The columns run one after another, never two at once;
the optimum-intel worker is a separate process, given INFERENCE_NUM_THREADS = --threads, while this
one waits.

Quantized weights (``--weights int8,int4``, issue 27): an "opcore int8" / "opcore int4" column each,
``capture_lm(model, ..., weights=...)`` (every linear weight-only quantized, the logits' linear at int8;
docs/quantized.md); its note gives its own bandwidth ceiling (the decode plan's weights as stored, plus
the KV cache, over the measured bandwidth) and the fraction of it reached, the weights' resident
bytes (the plans' constants, each storage once) against fp32's, the saved folder's size, and which
plan decodes (capture_lm times the decode step on each graph runtime for a quantized plan whose codes
fit its measuring bound: "ranked", or "onnxruntime alone" / "openvino alone").
``--accuracy 512``: before the table, the quantized forward pass's logits against fp32's over one
prompt of 512 random tokens: max relative error, top-1 agreement (also over the positions whose fp32
choice is clear: top two logits more than 3 sigma of the error on a logit difference apart; a random
model's near-ties flip under any weight error), KL(fp32 || quantized).

bfloat16 (``--dtype bfloat16``): the model is ``model.to(torch.bfloat16)`` after it is built (weights,
and so the KV cache, in bfloat16: 2 bytes each in the ceiling's bytes); the targets are fp32's. Greedy
tokens of a bfloat16 model part from eager's after some steps (eager's own dynamic and static caches
part from each other too: bfloat16 rounds each op's result to 8 bits, and opcore's partition computes
in float32 inside); ``--accuracy N`` says how close each is to the same model in fp32, teacher-forced
over N decode steps after the prompt (top-1 agreement, max error, KL).

On a GPU (``--device cuda``; scripts/gpu_check.sh runs it with 120 s): models small,135m and batch 1
by default; eager, compile (mode="reduce-overhead") and ``capture_lm(..., device="cuda")``, every
token synchronised to the host; the bandwidth is the GPU's, and ``torch.cuda.max_memory_allocated``
is printed with the RSS. No usable GPU: exit status 2, with why.

    python bench/generate.py                                # every model, batch 1 and 4, 1 and 2 threads
    python bench/generate.py --models small --batches 1 --threads 1 --rounds 3   # about a minute
    python bench/generate.py --models 135m --batches 1 --skip compile
    python bench/generate.py --models small --optimum       # optimum-intel too, where it installs
    python bench/generate.py --models 135m --batches 1 --threads 1 --unmeasured   # capture_lm(measure=False) too
    python bench/generate.py --device cuda                  # on a GPU
    python bench/generate.py --models 0.5b --batches 1 --threads 1 --skip compile --weights int8,int4 --accuracy 512
    python bench/generate.py --models 135m --batches 1 --threads 1 --skip compile --dtype bfloat16 --accuracy 128
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(__file__))
from _gpu import no_gpu_reason
from _timing import machine_load, table

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROMPT, NEW, ROUNDS = 128, 128, 3
BATCHES, THREADS = (1, 4), (1, 2)
CUDA_MODELS, CUDA_BATCHES = ("small", "135m"), (1,)
LOGIT_SCALE = 16.0
BANDWIDTH_MB = 512
GEMM_N = 2048  # the matmul the compute floor's rate is measured on
SKIPPABLE = ("static", "compile", "opcore")
# the column of --unmeasured: capture_lm(..., measure=False)
UNMEASURED = "opcore unmeasured"
OPTIMUM_DIR = ROOT / "build" / "optimum-intel"
INSTALL_S = 180
TORCH_PIN = "torch==2.13.0"


# --- the models ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    """A decoder's shape: what its transformers config is built from."""

    name: str
    title: str
    family: str  # "llama" or "qwen2"
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab: int
    tied: bool
    rope_theta: float = 10000.0
    experts: int = 0  # a mixture of experts (family "qwen3_moe"): experts per layer,
    top_k: int = 0  # the experts each token takes,
    expert_intermediate: int = 0  # and each expert's intermediate size

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def config(self, max_length: int) -> Any:
        import transformers

        kind = getattr(transformers, _CLASSES[self.family][0])
        moe = {}
        if self.experts:
            moe = dict(
                num_experts=self.experts,
                num_experts_per_tok=self.top_k,
                moe_intermediate_size=self.expert_intermediate,
                head_dim=self.head_dim,
            )
        return kind(
            vocab_size=self.vocab,
            hidden_size=self.hidden,
            intermediate_size=self.intermediate,
            num_hidden_layers=self.layers,
            num_attention_heads=self.heads,
            num_key_value_heads=self.kv_heads,
            max_position_embeddings=max(max_length, 512),
            tie_word_embeddings=self.tied,
            rope_parameters={"rope_type": "default", "rope_theta": self.rope_theta},
            bos_token_id=1,
            eos_token_id=2,
            pad_token_id=0,
            **moe,
        )

    def build(self, max_length: int, device: str = "cpu") -> Any:
        """The model, random weights (seed 0, initialised on the CPU), fp32, eval mode, its logits scaled
        (scale_logits); device "meta": the shapes alone (tests count its bytes)."""
        import transformers

        torch.manual_seed(0)
        config = self.config(max_length)
        kind = getattr(transformers, _CLASSES[self.family][1])
        with torch.device("meta" if device == "meta" else "cpu"):  # meta: shapes only, no memory
            model = kind(config).eval()
        scale_logits(model, LOGIT_SCALE)
        return model if device == "meta" else model.to(device)


# family -> the names of its config class and its model class in transformers
_CLASSES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
}

SHAPES = {
    "small": Shape("small", "small Llama (2 layers, hidden 512)", "llama", 512, 2, 8, 8, 1376, 4096, False),
    "135m": Shape("135m", "SmolLM2-135M shape (LlamaConfig)", "llama", 576, 30, 9, 3, 1536, 49152, True, 100000.0),
    "0.5b": Shape("0.5b", "Qwen2-0.5B shape (Qwen2Config)", "qwen2", 896, 24, 14, 2, 4864, 151936, True, 1000000.0),
    # not in the default list: a mixture of experts (transformers' Qwen3-MoE), 64M parameters of which
    # a token reads ~22M (4 of 16 experts a layer)
    "moe": Shape(
        "moe", "Qwen3-MoE shape, 16 experts, top 4 (Qwen3MoeConfig)", "qwen3_moe", 512, 8, 8, 2, 1024, 8000,
        False, 1000000.0, experts=16, top_k=4, expert_intermediate=256,
    ),
    # experts as wide as Qwen3-30B-A3B's (64 of intermediate 768, top 8) on 4 layers of hidden 1024:
    # 631M parameters, a token reads ~77M; copying the chosen experts a step costs more than reading them
    "moe64": Shape(
        "moe64", "Qwen3-MoE shape, 64 experts of 768, top 8 (Qwen3MoeConfig)", "qwen3_moe", 1024, 4, 16, 4, 2048,
        8000, False, 1000000.0, experts=64, top_k=8, expert_intermediate=768,
    ),
}  # fmt: skip
DEFAULT_MODELS = ("small", "135m", "0.5b")


def tied(model: Any) -> bool:
    """Whether the lm_head reads the input embedding's table."""
    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    return head is not None and head.weight is embedding.weight


def scale_logits(model: Any, scale: float) -> None:
    """Multiply the logits by ``scale``: an untied lm_head's weight, else (tied: the table is also the
    input embedding) the final norm's gain, which the lm_head reads — the same logits either way."""
    with torch.no_grad():
        if tied(model):
            model.model.norm.weight.mul_(scale)
        else:
            model.get_output_embeddings().weight.mul_(scale)


# --- bytes per decode step and the bandwidth ceiling ----------------------------------------------


def weight_bytes_read(model: Any, batch: int = 1) -> int:
    """The bytes of the weights one decode step reads: every parameter (a tensor shared by two
    modules counted once) but the input embedding table, of which a step reads one row per token;
    with tied embeddings the table is the lm_head's, read whole, and counted once as that; of a
    mixture of experts, the experts no row chooses are not read (unread_expert_bytes)."""
    seen: dict[int, int] = {}
    for parameter in model.parameters():  # parameters() yields a shared tensor once
        seen[id(parameter)] = parameter.numel() * parameter.element_size()
    total = sum(seen.values())
    if not tied(model):
        table = model.get_input_embeddings().weight
        total -= table.numel() * table.element_size()
    return total - unread_expert_bytes(model, batch)


def unread_expert_bytes(model: Any, batch: int) -> int:
    """The bytes of the experts a decode step of ``batch`` rows need not read: each row takes
    ``num_experts_per_tok`` of a layer's experts (transformers' fused experts: 3-D weights), so at
    most batch x k of them are read; the rest of each layer's experts are not."""
    k = getattr(model.config, "num_experts_per_tok", 0) or 0
    unread = 0
    for module in model.modules():
        down = getattr(module, "down_proj", None)
        if k and down is not None and getattr(down, "ndim", 0) == 3:
            experts = down.shape[0]
            stored = sum(p.numel() * p.element_size() for p in module.parameters(recurse=False))
            unread += stored * max(experts - batch * k, 0) // experts
    return unread


def kv_cache_bytes(layers: int, batch: int, kv_heads: int, head_dim: int, length: int, dtype_bytes: int = 4) -> int:
    """Keys and values of every layer, ``length`` positions of each row."""
    return 2 * layers * batch * kv_heads * head_dim * length * dtype_bytes


def decode_bytes(weights: int, shape: Shape, batch: int, length: int, dtype_bytes: int = 4) -> int:
    """What one decode step must read: the weights (weight_bytes_read) and the KV cache at ``length``."""
    return weights + kv_cache_bytes(shape.layers, batch, shape.kv_heads, shape.head_dim, length, dtype_bytes)


def ceiling_tokens_per_s(step_bytes: int, bandwidth: float, batch: int) -> float:
    """Decode tokens/s (all rows) that reading ``step_bytes`` per step at ``bandwidth`` B/s allows."""
    return batch * bandwidth / step_bytes


def read_bandwidth(device: str, megabytes: int = BANDWIDTH_MB, repeats: int = 5) -> float:
    """Bytes/s a torch ``sum`` reads from a buffer far larger than the caches (best of ``repeats``),
    at torch's current thread count."""
    buffer = torch.ones(megabytes * (1 << 20) // 4, dtype=torch.float32, device=device)
    best = _best_seconds(buffer.sum, device, repeats)
    nbytes = buffer.numel() * 4
    del buffer
    return nbytes / best


def matmul_rate(device: str, dtype: torch.dtype, size: int | None = None, repeats: int = 5) -> float:
    """FLOP/s of one torch matmul of two ``size`` x ``size`` matrices of ``dtype`` (best of
    ``repeats``), at torch's current thread count: what a prompt's GEMMs can reach at best."""
    size = GEMM_N if size is None else size
    a = torch.randn(size, size, device=device).to(dtype)
    b = torch.randn(size, size, device=device).to(dtype)
    return 2 * size**3 / _best_seconds(lambda: torch.mm(a, b), device, repeats)


def _best_seconds(call: Callable[[], Any], device: str, repeats: int) -> float:
    """The fastest of ``repeats`` timed calls, after one untimed (it pays for page faults, the
    pool's start and the kernel's choice), each synchronised on ``device``."""
    best = float("inf")
    for _ in range(repeats + 1):
        _sync(device)
        started = time.perf_counter()
        call()
        _sync(device)
        best = min(best, time.perf_counter() - started)
    return best


def prompt_flops(model: Any, shape: Shape, batch: int, prompt: int) -> int:
    """The floating-point operations a prompt's forward must compute at least (see "compute floor"
    above): 2 per weight of every matrix but the embedding tables and the lm_head for each prompt
    token (a stacked experts' tensor at top_k of its experts), the lm_head for one position a row,
    and 4 x head_dim per query-key pair of the causal triangle in every layer and head."""
    head = model.get_output_embeddings()
    tables = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    k = getattr(model.config, "num_experts_per_tok", 0) or 0
    per_token = 0.0
    for parameter in model.parameters():  # a tensor shared by two modules once
        if (head is not None and parameter is head.weight) or id(parameter) in tables:
            continue
        if parameter.ndim == 2:
            per_token += parameter.numel()
        elif parameter.ndim == 3 and k:  # transformers' fused experts: (experts, out, in)
            per_token += parameter.numel() * min(k, parameter.shape[0]) / parameter.shape[0]
    logits = head.weight.numel() if head is not None else 0
    pairs = prompt * (prompt + 1) // 2
    attention = 4 * shape.layers * shape.heads * shape.head_dim * pairs
    return int(batch * (2 * per_token * prompt + 2 * logits + attention))


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


# --- memory --------------------------------------------------------------------------------------


def _status_kb(key: str) -> int | None:
    try:
        for line in pathlib.Path("/proc/self/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def peak_rss_mb() -> float | None:
    """The process's peak resident set (VmHWM) in MB, None where /proc has none."""
    kb = _status_kb("VmHWM")
    return None if kb is None else kb / 1024


def reset_peak_rss() -> bool:
    """Start VmHWM again from the current resident set (Linux: "5" to /proc/self/clear_refs)."""
    try:
        pathlib.Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


# --- one generate call, timed ---------------------------------------------------------------------


@dataclass
class Sample:
    ttft: float  # s
    decode: float  # tokens/s, all rows
    tokens: torch.Tensor  # (batch, prompt + new)
    total: float  # s, the whole call


class Clock:
    """A transformers streamer noting when each new token reaches the host (``put`` is first given
    the prompt, which is not a new token)."""

    def __init__(self) -> None:
        self.times: list[float] = []
        self.prompt_seen = False

    def put(self, value: Any) -> None:
        if not self.prompt_seen:
            self.prompt_seen = True
            return
        self.times.append(time.perf_counter())

    def end(self) -> None:
        pass


def sample_of(started: float, times: list[float], tokens: torch.Tensor, new: int) -> Sample:
    if len(times) != new:
        raise RuntimeError(f"{len(times)} new tokens streamed, {new} asked")
    decode = tokens.shape[0] * (new - 1) / (times[-1] - times[0])
    return Sample(times[0] - started, decode, tokens.cpu(), times[-1] - started)


def hf_generate(model: Any, ids: torch.Tensor, new: int, cache: str | None) -> Sample:
    """transformers' generate, greedy, all ``new`` tokens (min_new_tokens), transformers' own
    compile of the static-cache step turned off (it would compile on a GPU: the compile column does)."""
    clock = Clock()
    started = time.perf_counter()
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new,
        min_new_tokens=new,
        do_sample=False,
        cache_implementation=cache,
        disable_compile=True,
        streamer=clock,
        pad_token_id=0,
    )
    return sample_of(started, clock.times, out, new)


def graph_steps(compiled: Any) -> Any:
    """A reduce-overhead forward that generate can call step after step: each call begins a new
    CUDA-graph step and returns logits of its own (generate reads a step's logits after the next
    replay, which would have overwritten the graph's output buffer)."""

    def step(*args: Any, **kwargs: Any) -> Any:
        torch.compiler.cudagraph_mark_step_begin()
        out = compiled(*args, **kwargs)
        out.logits = out.logits.clone()
        return out

    return step


def compiled_generate(model: Any, compiled: Any, ids: torch.Tensor, new: int) -> Sample:
    """``hf_generate`` with a static cache while ``model.forward`` is the compiled one."""
    model.forward = compiled
    try:
        return hf_generate(model, ids, new, "static")
    finally:
        del model.forward  # the class's forward again, for the eager columns


def opcore_generate(lm: Any, ids: torch.Tensor, new: int) -> Sample:
    times, produced = [], []
    started = time.perf_counter()
    for tokens in lm.stream(ids, torch.ones_like(ids), max_new_tokens=new, min_new_tokens=new):
        produced.append(tokens.cpu())  # on the host, as a streamer's tokens are (a GPU synchronises)
        times.append(time.perf_counter())
    return sample_of(started, times, torch.cat([ids.cpu(), torch.stack(produced, 1)], 1), new)


# --- columns ------------------------------------------------------------------------------------


@dataclass
class Column:
    label: str
    run: Callable[[], Sample] | None = None
    samples: list[Sample] = field(default_factory=list)
    build_s: float | None = None
    peak_mb: float | None = None
    tokens: torch.Tensor | None = None
    note: str = ""
    ceiling: float | None = None  # a quantized column's own bandwidth ceiling, tokens/s

    def median(self, what: str) -> float | None:
        values = [getattr(s, what) for s in self.samples]
        return statistics.median(values) if values else None


def reason(error: BaseException) -> str:
    """The first line of an error, short enough for a table note."""
    lines = [line.strip() for line in str(error).strip().splitlines() if line.strip()]
    return f"{type(error).__name__}: {(lines[0] if lines else '')[:160]}"


def first_calls(column: Column, build: Callable[[], Callable[[], Sample]], kind: str = "") -> None:
    """Build the column, then its first call (not a sample); the peak RSS over them. kind "capture":
    the build is timed as "build s"; "compile": a second, warm call too, and build s = the first
    call's time - the warm one's; "": nothing is built (eager)."""
    reset_peak_rss()
    try:
        started = time.perf_counter()
        run = build()
        built = time.perf_counter() - started
        first = run()
        warm = run() if kind == "compile" else first
    except Exception as error:
        column.note = reason(error)
        return
    column.run, column.tokens = run, warm.tokens
    column.build_s = {"compile": max(first.total - warm.total, 0.0), "capture": built}.get(kind)
    column.peak_mb = peak_rss_mb()


def rounds(columns: list[Column], count: int) -> None:
    """``count`` timed calls of every column that built, in a new order each round."""
    ready = [c for c in columns if c.run is not None]
    shuffle = random.Random(0).shuffle
    for _ in range(count):
        shuffle(ready)
        for column in ready:
            assert column.run is not None
            try:
                column.samples.append(column.run())
            except Exception as error:  # a column that fails later says so; the others go on
                column.note, column.run = reason(error), None
                ready = [c for c in ready if c.run is not None]
                break


# --- optimum-intel, in its own virtualenv ---------------------------------------------------------


def _last_error(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    errors = [
        line for line in lines if line.startswith(("ERROR", "ModuleNotFoundError", "ImportError", "RuntimeError"))
    ]
    return ((errors or lines or ["no output"])[-1])[:240]


def optimum_python(folder: pathlib.Path = OPTIMUM_DIR, limit_s: float = INSTALL_S) -> tuple[str | None, str]:
    """(the python of a virtualenv where ``optimum.intel.OVModelForCausalLM`` imports, or None; why
    not). One attempt (venv, pip install with torch pinned and constraints.txt, an import), at most
    ``limit_s`` seconds; the verdict is cached in ``folder``/verdict.json."""
    verdict_file = folder / "verdict.json"
    if verdict_file.exists():
        verdict = json.loads(verdict_file.read_text())
        return verdict.get("python"), verdict["reason"]
    venv = folder / "venv"
    python = venv / "bin" / "python"
    deadline = time.monotonic() + limit_s
    steps = [
        [sys.executable, "-m", "venv", "--clear", str(venv)],
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--progress-bar",
            "off",
            TORCH_PIN,
            "optimum-intel[openvino]",
            "-c",
            str(ROOT / "constraints.txt"),
        ],
        [str(python), "-c", "from optimum.intel import OVModelForCausalLM"],
    ]
    found: str | None = None
    why = ""
    folder.mkdir(parents=True, exist_ok=True)
    for step in steps:
        left = deadline - time.monotonic()
        if left <= 0:
            why = f"install time-boxed to {limit_s:.0f} s: ran out before {' '.join(step[2:4])}"
            break
        try:
            done = subprocess.run(step, check=False, capture_output=True, text=True, timeout=left)
        except subprocess.TimeoutExpired as expired:
            partial = expired.stdout or b""  # what it printed before it was stopped (bytes, even with text=True)
            text = partial.decode(errors="replace") if isinstance(partial, bytes) else partial
            why = f"install time-boxed to {limit_s:.0f} s: {' '.join(step[1:4])} did not finish"
            why += f" (its last line: {_last_error(text)})" if text.strip() else ""
            break
        if done.returncode != 0:
            name = "import" if step[1] == "-c" else "pip install" if "pip" in step else "venv"
            why = f"{name} failed: {_last_error(done.stderr + done.stdout)}"
            break
    else:
        found, why = str(python), "installed"
    verdict_file.write_text(
        json.dumps({"python": found, "reason": why, "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())})
    )
    return found, why


def optimum_column(
    python: str, model: Any, shape: Shape, batch: int, threads: int, options: argparse.Namespace
) -> Column:
    """OVModelForCausalLM in the virtualenv's own process (this one waits): the model saved to a
    temporary folder, exported there, its first two calls and --rounds timed calls."""
    column = Column("optimum-intel")
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        command = [python, __file__, "--optimum-worker", folder, "--batches", str(batch), "--threads", str(threads)]
        command += ["--prompt", str(options.prompt), "--new", str(options.new), "--rounds", str(options.rounds)]
        try:
            done = subprocess.run(command, check=False, capture_output=True, text=True, timeout=1800)
        except subprocess.TimeoutExpired:
            column.note = "the worker ran over 30 minutes"
            return column
    if done.returncode != 0:
        column.note = f"worker failed: {_last_error(done.stderr)}"
        return column
    record = json.loads(done.stdout.strip().splitlines()[-1])
    column.samples = [
        Sample(t, d, torch.tensor(record["tokens"]), 0.0) for t, d in zip(record["ttft"], record["decode"])
    ]
    column.tokens, column.build_s, column.peak_mb = torch.tensor(record["tokens"]), record["build_s"], record["peak_mb"]
    return column


def optimum_worker(options: argparse.Namespace) -> int:
    """Run in optimum-intel's virtualenv: one JSON line of TTFTs, decode rates, the warm call's tokens."""
    from optimum.intel import OVModelForCausalLM  # type: ignore[import-not-found]

    threads, batch = int(options.threads), int(options.batches)
    torch.set_num_threads(threads)
    started = time.perf_counter()
    config = {"INFERENCE_NUM_THREADS": str(threads), "INFERENCE_PRECISION_HINT": "f32"}
    model = OVModelForCausalLM.from_pretrained(options.optimum_worker, export=True, ov_config=config)
    build_s = time.perf_counter() - started
    vocab = model.config.vocab_size
    ids = prompt_ids(vocab, batch, options.prompt)
    model.generate(ids, max_new_tokens=2, min_new_tokens=2, do_sample=False, pad_token_id=0)
    samples = [hf_ov_generate(model, ids, options.new) for _ in range(options.rounds + 1)]
    record = {
        "ttft": [s.ttft for s in samples[1:]],
        "decode": [s.decode for s in samples[1:]],
        "tokens": samples[0].tokens.tolist(),
        "build_s": build_s,
        "peak_mb": peak_rss_mb(),
    }
    print(json.dumps(record))
    return 0


def hf_ov_generate(model: Any, ids: torch.Tensor, new: int) -> Sample:
    clock = Clock()
    started = time.perf_counter()
    out = model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=new,
        min_new_tokens=new,
        do_sample=False,
        streamer=clock,
        pad_token_id=0,
    )
    return sample_of(started, clock.times, out, new)


# --- one model ------------------------------------------------------------------------------------


def prompt_ids(vocab: int, batch: int, prompt: int) -> torch.Tensor:
    return torch.randint(3, vocab, (batch, prompt), generator=torch.Generator().manual_seed(batch))


@dataclass
class Group:
    """The rows of one thread count and batch."""

    threads: int
    batch: int
    columns: list[Column]
    ceiling: float
    step_bytes: int
    bandwidth: float
    load: float
    flops: int = 0  # the prompt's floating-point operations, all rows (prompt_flops)
    rate: float = 0.0  # FLOP/s of the matmul measured at this thread count (0: not measured)

    @property
    def floor_s(self) -> float | None:
        """The compute floor: the least time to first token the matmul rate allows."""
        return self.flops / self.rate if self.rate else None


def bench_group(
    model: Any, shape: Shape, batch: int, threads: int, options: argparse.Namespace, state: dict[str, Any]
) -> Group:
    """Every column of one model at one thread count and batch. ``state`` keeps what outlives a
    group: the compiled forward, the bandwidth per thread count, optimum's verdict."""
    import opcore.graph

    device, new, skip = options.device, options.new, options.skip
    length = options.prompt + new
    torch.set_num_threads(threads)
    ids = prompt_ids(shape.vocab, batch, options.prompt).to(device)
    columns = [Column("eager dynamic")]
    first_calls(columns[0], lambda: lambda: hf_generate(model, ids, new, None))
    if "static" not in skip:
        columns.append(Column("eager static"))
        first_calls(columns[-1], lambda: lambda: hf_generate(model, ids, new, "static"))
    if "compile" not in skip:
        columns.append(Column("compile"))
        if "compiled" not in state:
            mode = "reduce-overhead" if device == "cuda" else "default"
            state["compiled"] = torch.compile(model.forward, mode=mode, fullgraph=True)
            if device == "cuda":
                state["compiled"] = graph_steps(state["compiled"])
        compiled = state["compiled"]
        first_calls(columns[-1], lambda: lambda: compiled_generate(model, compiled, ids, new), "compile")
    if options.optimum and device == "cpu":
        python, why = state["optimum"]
        if python is None:
            columns.append(Column("optimum-intel", note=f"not run: {why}"))
        else:
            reset_peak_rss()
            columns.append(optimum_column(python, model, shape, batch, threads, options))
    lm = None
    variants: list[tuple[str, bool | None]] = [("opcore", None)] if "opcore" not in skip else []
    if options.unmeasured:
        variants.append((UNMEASURED, False))
    for label, measure in variants:
        columns.append(Column(label))

        def capture(measure: bool | None = measure) -> Callable[[], Sample]:
            nonlocal lm
            lm = None  # the other variant's plans go before this one is captured
            gc.collect()
            # the graph runtimes' sessions opened by this capture share torch's budget of cores
            os.environ["OPCORE_RUNTIME_THREADS"] = str(threads)
            lm = opcore.graph.capture_lm(model, max_length=length, batch_size=batch, device=device, measure=measure)
            captured = lm
            return lambda: opcore_generate(captured, ids, new)

        first_calls(columns[-1], capture, "capture")
        if lm is not None:
            columns[-1].build_s = lm.capture_seconds
            columns[-1].note = f"{lm.decode_plan.summary()}; prefill {_prefill_route(lm)}"
    for weights in options.weights if device == "cpu" else ():
        columns.append(quantized_column(model, shape, ids, new, length, batch, threads, weights, state))
    rounds(columns, options.rounds)
    for column in columns:
        decode = column.median("decode")
        if decode and column.ceiling:
            column.note += f": {decode / column.ceiling:.2f} of it"
    bandwidth = state["bandwidth"][threads]
    step = decode_bytes(weight_bytes_read(model, batch), shape, batch, length, model.dtype.itemsize)
    in_process = [c.peak_mb or 0.0 for c in columns if c.label != "optimum-intel"]  # the worker's is its own
    state["peak"] = max(state.get("peak", 0.0), peak_rss_mb() or 0.0, *in_process)
    del lm
    gc.collect()
    return Group(
        threads,
        batch,
        columns,
        ceiling_tokens_per_s(step, bandwidth, batch),
        step,
        bandwidth,
        os.getloadavg()[0],
        flops=prompt_flops(model, shape, batch, options.prompt),
        rate=state["rate"][threads],
    )


# --- quantized weights (issue 27) -------------------------------------------------------------------


def _unique_bytes(tensors: Iterable[Any]) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(seen.values())


def folder_bytes(folder: pathlib.Path) -> int:
    """Bytes on disk under ``folder``, a hard-linked file (the two plans' weights) counted once."""
    files = {(s.st_dev, s.st_ino): s.st_size for s in (f.stat() for f in folder.rglob("*") if f.is_file())}
    return sum(files.values())


def quantized_column(
    model: Any, shape: Shape, ids: Any, new: int, length: int, batch: int, threads: int, weights: str, state: dict
) -> Column:
    """opcore with ``capture_lm(weights=...)``: the column, its note the weights' resident bytes (the
    plans' constants, each storage once), the saved folder's size and its own bandwidth ceiling (the
    quantized bytes a step reads)."""
    import tempfile

    import opcore.graph

    column = Column(f"opcore {weights}")
    made: dict[str, Any] = {}

    def capture() -> Callable[[], Sample]:
        gc.collect()
        os.environ["OPCORE_RUNTIME_THREADS"] = str(threads)
        made["lm"] = opcore.graph.capture_lm(model, max_length=length, batch_size=batch, weights=weights)
        return lambda: opcore_generate(made["lm"], ids, new)

    first_calls(column, capture, "capture")
    lm = made.get("lm")
    if lm is None:
        return column
    column.build_s = lm.capture_seconds
    plans = (lm.decode_plan, lm.prefill_plan)
    resident = _unique_bytes(t for plan in plans if plan is not None for t in plan.constants.values())
    with tempfile.TemporaryDirectory() as folder:
        lm.save(pathlib.Path(folder) / "lm")
        saved = folder_bytes(pathlib.Path(folder) / "lm")
    decode_weights = _unique_bytes(lm.decode_plan.constants.values())
    embedding = shape.vocab * shape.hidden * 4 if not shape.tied else 0  # one row read of an untied table
    step = decode_bytes(decode_weights - embedding - unread_expert_bytes(model, batch), shape, batch, length)
    ceiling = ceiling_tokens_per_s(step, state["bandwidth"][threads], batch)
    fp32 = state.setdefault("fp32 bytes", _unique_bytes([*model.parameters(), *model.buffers()]))
    column.ceiling = ceiling
    measured = [n for n in lm.decode_plan.notes if n.startswith("decode step measured at capture")]
    runs = f"; decode runs {measured[0].rsplit('runs ', 1)[-1]}" if measured else "; decode planned, not timed"
    column.note = (
        f"own ceiling {ceiling:.1f} tok/s ({step / 1e6:.0f} MB a step); weights resident {resident / 1e6:.0f} MB "
        f"({resident / fp32:.2f}x fp32), saved {saved / 1e6:.0f} MB ({saved / fp32:.2f}x){runs}; "
        f"prefill {_prefill_route(lm)}"
    )
    return column


def _prefill_route(lm: Any) -> str:
    """What the prompt runs: the route capture's measurement chose (its note's last words), else the
    plan's placement."""
    measured = [n for n in lm.prefill_plan.notes if n.startswith("prefill measured at capture")]
    if measured:
        return "runs " + measured[0].split(": runs ", 1)[-1].split(";", 1)[0]
    summary = lm.prefill_plan.summary()
    return summary.split(";", 1)[0]


def accuracy(model: Any, shape: Shape, weights: str, positions: int) -> str:
    """The quantized plan's logits against the fp32 model's over one prompt of ``positions`` random
    tokens (capture(weights=...) of the forward pass: every position's logits): max relative error
    (over the logits' scale), top-1 agreement, mean KL(fp32 || quantized) in nats."""
    import opcore.graph

    ids = prompt_ids(shape.vocab, 1, positions)
    with torch.no_grad():
        want = model(ids, use_cache=False).logits.double()
        plan = opcore.graph.capture(model, (ids,), {"use_cache": False}, weights=weights, measure=False)
        got = plan(ids, use_cache=False).logits.double()
    error = float((got - want).abs().max() / want.abs().max())
    agree = float((got.argmax(-1) == want.argmax(-1)).double().mean())
    kl = float(torch.nn.functional.kl_div(got.log_softmax(-1), want.log_softmax(-1), log_target=True, reduction="none")
               .sum(-1).mean())  # fmt: skip
    del plan
    gc.collect()
    return (
        f"{weights}: max rel. logits error {error:.2e}, top-1 agreement {agree:.4f} over {positions} positions "
        f"({clear_agreement(got[0], want[0])}), KL {kl:.2e} nats"
    )


# a position's fp32 choice is clear when its top two logits are further apart than this many standard
# deviations of the error on a difference of two logits (sqrt(2) x the error's own, errors independent)
CLEAR_SIGMAS = 3.0


def clear_agreement(got: torch.Tensor, want: torch.Tensor) -> str:
    """Top-1 agreement over the positions (rows) whose fp32 choice is clear: ``want``'s top two logits
    further apart than CLEAR_SIGMAS standard deviations of ``got - want`` on a difference of two logits.
    A random-weight model's logits are near-Gaussian, its top two a median ~1.3-1.5 apart: a weight
    error flips the near-ties, which says little of the format (docs/quantized.md); where the choice
    is clear, a flip is the format's (or a kernel's) fault."""
    got, want = got.double().reshape(-1, got.shape[-1]), want.double().reshape(-1, want.shape[-1])
    spread = float((got - want).std()) * 2**0.5
    top = want.topk(2, -1).values
    clear = (top[:, 0] - top[:, 1]) > CLEAR_SIGMAS * spread
    count = int(clear.sum())
    if count == 0:
        return f"no position's fp32 top-1 is clear of the error ({CLEAR_SIGMAS:g} sigma)"
    agree = float((got.argmax(-1) == want.argmax(-1))[clear].double().mean())
    return f"{agree:.4f} over the {count} of {len(clear)} whose fp32 top-1 is clear"


def _agreement(got: torch.Tensor, want: torch.Tensor) -> str:
    """``got``'s logits against ``want``'s (rows: positions): max error over the logits' scale, top-1
    agreement, mean KL(want || got) in nats."""
    got, want = got.double(), want.double()
    error = float((got - want).abs().max() / want.abs().max())
    agree = float((got.argmax(-1) == want.argmax(-1)).double().mean())
    kl = float(torch.nn.functional.kl_div(got.log_softmax(-1), want.log_softmax(-1), log_target=True, reduction="none")
               .sum(-1).mean())  # fmt: skip
    clear = clear_agreement(got, want)
    return f"max rel. logits error {error:.2e}, top-1 agreement {agree:.4f} ({clear}), KL {kl:.2e} nats"


def bfloat16_accuracy(model: Any, shape: Shape, positions: int, prompt: int) -> str:
    """A bfloat16 model's decode logits, eager and opcore's, against the same model in fp32 (built again),
    teacher-forced: a prompt of ``prompt`` random tokens, then ``positions`` steps each fed fp32's greedy
    token, every step's logits compared (what a decode step computes: the KV cache, one token)."""
    import transformers

    import opcore.graph

    length = prompt + positions
    reference = shape.build(length).eval()
    ids = prompt_ids(shape.vocab, 1, prompt)
    lm = opcore.graph.capture_lm(model, max_length=length, batch_size=1, measure=False)

    def stepped(run: Callable[[torch.Tensor | None], torch.Tensor], tokens: list[torch.Tensor]) -> torch.Tensor:
        return torch.cat([run(None), *(run(t) for t in tokens[:-1])]).float()

    def eager(target: Any) -> Callable[[torch.Tensor | None], torch.Tensor]:
        cache = transformers.DynamicCache(config=target.config)
        return lambda t: target(ids if t is None else t.view(1, 1), past_key_values=cache).logits[:, -1]

    with torch.no_grad():
        run, tokens, rows = eager(reference), [], []
        logits = run(None)
        for _ in range(positions):
            rows.append(logits)
            tokens.append(logits.argmax(-1))
            logits = run(tokens[-1])
        want = torch.cat(rows).float()
        session = lm.session()
        got = stepped(lambda t: session.prefill(ids) if t is None else session.decode(t.view(1)), tokens)
        eager_got = stepped(eager(model), tokens)
    del lm, reference
    gc.collect()
    return (
        f"bfloat16 against fp32 over {positions} decode steps: eager {_agreement(eager_got, want)}; "
        f"opcore {_agreement(got, want)}"
    )


# --- the table and the targets ----------------------------------------------------------------------


def _best(columns: list[Column], what: str, pick: Callable[..., float]) -> float | None:
    values = [v for c in columns if c.label.startswith("eager") for v in [c.median(what)] if v is not None]
    return pick(values) if values else None


def first_difference(tokens: torch.Tensor | None, reference: torch.Tensor | None, prompt: int) -> str:
    """'=' where the tokens equal the reference's, else 'step N' (the first new token that differs)."""
    if tokens is None or reference is None:
        return "-"
    if tokens.shape == reference.shape and torch.equal(tokens, reference):
        return "="
    if tokens.shape != reference.shape:
        return f"shape {tuple(tokens.shape)}"
    differs = (tokens != reference).any(0).nonzero()
    return f"step {int(differs[0]) - prompt}"


def rows_of(group: Group, prompt: int) -> list[tuple[str, ...]]:
    eager_decode = _best(group.columns, "decode", max)
    eager_ttft = _best(group.columns, "ttft", min)
    reference = group.columns[0].tokens
    rows: list[tuple[str, ...]] = []
    lead = (str(group.threads), str(group.batch))
    rows.append(
        ("bandwidth ceiling", *lead, "-", "-", f"{group.ceiling:.1f}", "-", "-", "1.00", "-", "-", "-",
         f"{group.step_bytes / 1e6:.1f} MB a step at {group.bandwidth / 1e9:.1f} GB/s")
    )  # fmt: skip
    if group.floor_s is not None:
        rows.append(
            ("compute floor", *lead, f"{group.floor_s * 1e3:.1f}",
             f"{group.floor_s / eager_ttft:.2f}x" if eager_ttft else "-", *["-"] * 7,
             f"prompt {group.flops / 1e9:.2f} GFLOP at {group.rate / 1e9:.1f} GFLOP/s")
        )  # fmt: skip
    for column in group.columns:
        ttft, decode = column.median("ttft"), column.median("decode")
        if ttft is None or decode is None:
            rows.append((column.label, *lead, *["-"] * 9, column.note))
            continue
        spread = [s.decode for s in column.samples]
        rows.append(
            (
                column.label,
                *lead,
                f"{ttft * 1e3:.1f}",
                f"{ttft / eager_ttft:.2f}x" if eager_ttft else "-",
                f"{decode:.1f}",
                f"{min(spread):.1f}-{max(spread):.1f}",
                f"{decode / eager_decode:.2f}x" if eager_decode else "-",
                f"{decode / group.ceiling:.2f}",
                "-" if column.build_s is None else f"{column.build_s:.1f}",
                "-" if column.peak_mb is None else f"{column.peak_mb:.0f}",
                first_difference(column.tokens, reference, prompt),
                column.note,
            )
        )
    rows.append((f"(load {group.load:.2f})", *[""] * 12))
    return rows


HEADER = (
    "column", "threads", "batch", "TTFT ms", "TTFT x eager", "decode tok/s", "min-max", "decode x eager",
    "of ceiling", "build s", "peak MB", "tokens", "note",
)  # fmt: skip


def targets(shape: Shape, group: Group) -> list[str]:
    """The issue's targets that a batch-1 group can judge, each "met" or "MISSED"."""
    found: list[str] = []
    by = {c.label: c for c in group.columns}
    opcore = by.get("opcore")
    if opcore is None or opcore.median("decode") is None:
        return ["opcore did not run: " + (opcore.note if opcore else "skipped")]
    decode, ttft = opcore.median("decode") or 0.0, opcore.median("ttft") or 0.0

    def judge(text: str, ok: bool) -> None:
        found.append(f"{text} {'met' if ok else 'MISSED'}")

    eager_decode, eager_ttft = _best(group.columns, "decode", max), _best(group.columns, "ttft", min)
    floors = {"small": 2.5, "135m": 1.5}
    if shape.name in floors and eager_decode:
        judge(
            f"decode {decode / eager_decode:.2f}x eager >= {floors[shape.name]}",
            decode / eager_decode >= floors[shape.name],
        )
    if shape.name == "0.5b":
        judge(f"decode {decode / group.ceiling:.2f} of the bandwidth ceiling >= 0.9", decode / group.ceiling >= 0.9)
    if eager_ttft:
        floor = f" (compute floor {group.floor_s / eager_ttft:.2f}x)" if group.floor_s is not None else ""
        judge(f"TTFT {ttft / eager_ttft:.2f}x eager <= 0.7{floor}", ttft / eager_ttft <= 0.7)
    compiled = by.get("compile")
    if compiled is not None and compiled.median("decode") is not None:
        judge(
            f"decode {decode / (compiled.median('decode') or 1):.2f}x compile's >= 1",
            decode >= (compiled.median("decode") or 0),
        )
        if compiled.build_s and opcore.build_s is not None:
            share = opcore.build_s / compiled.build_s
            judge(
                f"capture {opcore.build_s:.1f} s = {share:.2f} of compile's {compiled.build_s:.1f} s <= 1/3",
                share <= 1 / 3,
            )
    elif compiled is not None:
        found.append(f"compile targets not judged ({compiled.note})")
    unmeasured = by.get(UNMEASURED)
    if unmeasured is not None and unmeasured.median("decode") is not None and unmeasured.build_s is not None:
        # the same targets for capture_lm(measure=False): what the capture's measurements cost and buy
        fast = f"{UNMEASURED}: decode {(unmeasured.median('decode') or 0) / (eager_decode or 1):.2f}x eager"
        if eager_ttft:
            fast += f", TTFT {(unmeasured.median('ttft') or 0) / eager_ttft:.2f}x eager"
        if compiled is not None and compiled.build_s and compiled.median("decode") is not None:
            share = unmeasured.build_s / compiled.build_s
            fast += (
                f", {(unmeasured.median('decode') or 0) / (compiled.median('decode') or 1):.2f}x compile's decode,"
                f" capture {unmeasured.build_s:.1f} s = {share:.2f} of compile's <= 1/3"
            )
            judge(fast, share <= 1 / 3 and (unmeasured.median("decode") or 0) >= (compiled.median("decode") or 0))
        else:
            found.append(fast + f", capture {unmeasured.build_s:.1f} s")
    return found


def report(shape: Shape, groups: list[Group], params: int, state: dict[str, Any], options: argparse.Namespace) -> str:
    title = (
        f"### {shape.name}: {shape.title}, {params / 1e6:.1f}M parameters, {options.dtype}, prompt {options.prompt} + "
        f"{options.new} new, {options.device} ({machine_load()} after the runs)"
    )
    rows = [row for group in groups for row in rows_of(group, options.prompt)]
    lines = [title, "", table(HEADER, rows), ""]
    peak = state.get("peak")
    lines.append(
        f"process peak RSS over this model (VmHWM): {peak:.0f} MB" if peak else "peak RSS: no /proc/self/status here"
    )
    if options.device == "cuda":
        lines.append(f"GPU memory: torch.cuda.max_memory_allocated {torch.cuda.max_memory_allocated() / 2**20:.0f} MiB")
    opcore = [(g, c) for g in groups for c in g.columns if c.label in ("opcore", UNMEASURED) and c.tokens is not None]
    if opcore:
        same = all(first_difference(c.tokens, g.columns[0].tokens, options.prompt) == "=" for g, c in opcore)
        lines.append(f"tokens identical (opcore vs eager, greedy): {'yes' if same else 'no'}")
    for group in groups:
        if group.batch == 1:
            lines.append(
                f"targets (batch 1, {group.threads} thread{'s' * (group.threads != 1)}): "
                + "; ".join(targets(shape, group))
            )
    return "\n".join(lines)


# --- main ---------------------------------------------------------------------------------------


def _ints(text: str, name: str, parser: argparse.ArgumentParser) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        parser.error(f"{name}: expected comma-separated integers, got {text!r}")
    if not values or min(values) < 1:
        parser.error(f"{name}: expected integers >= 1, got {text!r}")
    return values


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--device", choices=("cpu", "cuda"), default="cpu", help="cuda: on the GPU (eager, compile, opcore)"
    )
    parser.add_argument(
        "--models",
        help=f"comma-separated, of {', '.join(SHAPES)} (default: {','.join(DEFAULT_MODELS)}; "
        f"{','.join(CUDA_MODELS)} on cuda)",
    )
    parser.add_argument("--batches", help=f"comma-separated (default {','.join(map(str, BATCHES))}; 1 on cuda)")
    parser.add_argument(
        "--threads", help=f"torch thread counts, comma-separated (default {','.join(map(str, THREADS))}; 1 on cuda)"
    )
    parser.add_argument("--prompt", type=int, default=PROMPT, help="prompt tokens per row (>= 2)")
    parser.add_argument("--new", type=int, default=NEW, help="new tokens per row (>= 2)")
    parser.add_argument("--rounds", type=int, default=ROUNDS, help="timed generate calls per column (median, min-max)")
    parser.add_argument("--skip", default="", help=f"columns to leave out: {', '.join(SKIPPABLE)}")
    parser.add_argument(
        "--unmeasured",
        action="store_true",
        help=f"a column {UNMEASURED!r} too: capture_lm(..., measure=False), the ranked plans as they come",
    )
    parser.add_argument(
        "--optimum", action="store_true", help="optimum-intel's OVModelForCausalLM too, in a virtualenv under build/"
    )
    parser.add_argument(
        "--weights", default="", help="quantized opcore columns, comma-separated: int8, int4 (capture_lm(weights=...))"
    )
    parser.add_argument(
        "--accuracy",
        type=int,
        default=0,
        help="with --weights or --dtype bfloat16: logits against fp32 over this many positions (512)",
    )
    parser.add_argument(
        "--dtype", choices=("float32", "bfloat16"), default="float32", help="the model's dtype (model.to(dtype))"
    )
    parser.add_argument("--optimum-worker", help=argparse.SUPPRESS)  # a saved model's folder: run in that venv
    options = parser.parse_args(argv)
    if options.optimum_worker:
        return options
    cuda = options.device == "cuda"
    options.models = tuple(
        m for m in (options.models or ",".join(CUDA_MODELS if cuda else DEFAULT_MODELS)).split(",") if m
    )
    unknown = [name for name in options.models if name not in SHAPES]
    if unknown or not options.models:
        parser.error(f"--models: unknown {', '.join(unknown) or '(none)'}; expected some of {', '.join(SHAPES)}")
    default_batches = ",".join(map(str, CUDA_BATCHES if cuda else BATCHES))
    options.batches = _ints(options.batches or default_batches, "--batches", parser)
    options.threads = _ints(options.threads or ("1" if cuda else ",".join(map(str, THREADS))), "--threads", parser)
    options.skip = {s for s in options.skip.split(",") if s}
    options.weights = tuple(w for w in options.weights.split(",") if w)
    if set(options.weights) - {"int8", "int4"}:
        parser.error(f"--weights: expected int8 and/or int4, got {','.join(options.weights)}")
    wrong = sorted(options.skip - set(SKIPPABLE))
    if wrong:
        parser.error(f"--skip: unknown {', '.join(wrong)}; expected some of {', '.join(SKIPPABLE)}")
    for name in ("prompt", "new"):
        if getattr(options, name) < 2:
            parser.error(f"--{name}: expected >= 2, got {getattr(options, name)}")
    if options.rounds < 1:
        parser.error(f"--rounds: expected >= 1, got {options.rounds}")
    if options.optimum and cuda:
        parser.error("--optimum runs OpenVINO on the CPU: leave out --device cuda")
    if options.weights and options.dtype != "float32":
        parser.error("--weights quantizes a float32 model: leave out --dtype")
    return options


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    import transformers

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            yield
        finally:
            transformers.logging.set_verbosity(verbosity)


def empty_inductor_cache(environ: MutableMapping[str, str] | None = None) -> str:
    """Point Inductor's on-disk cache at a new empty folder (removed at exit) unless
    TORCHINDUCTOR_CACHE_DIR is set; what the compile column's time then is, for the header. An earlier
    run's cache makes a compile mostly a lookup: on the 2-vCPU EPYC the small and 135M shapes compiled
    in 4.0 and 13.2 s with the cache of a run before, 33.6 and 74.5 s without (docs/benchmarks.md).
    capture_lm keeps nothing between processes (a saved folder and opcore.graph.load are its cache),
    so the two are compared as first compiles."""
    import atexit
    import shutil

    env: MutableMapping[str, str] = os.environ if environ is None else environ
    given = env.get("TORCHINDUCTOR_CACHE_DIR")
    if given:
        return f"Inductor cache: TORCHINDUCTOR_CACHE_DIR={given} as set (compile times may be cache hits)"
    folder = tempfile.mkdtemp(prefix="opcore-bench-inductor-")
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    env["TORCHINDUCTOR_CACHE_DIR"] = folder
    return "Inductor cache: a new empty folder (compile times are first compiles)"


def main(argv: list[str] | None = None) -> int:
    options = parse_args(argv)
    if options.optimum_worker:
        return optimum_worker(options)
    inductor = empty_inductor_cache() if "compile" not in options.skip else ""
    if options.device == "cuda":
        why = no_gpu_reason()
        if why is not None:
            print(f"bench/generate.py --device cuda: no usable GPU: {why}", file=sys.stderr)
            return 2
    import transformers

    device = options.device
    name = (
        f"{torch.cuda.get_device_name()} (CUDA {torch.version.cuda})" if device == "cuda" else f"{os.cpu_count()} CPUs"
    )
    bandwidth: dict[int, float] = {}
    rate: dict[int, float] = {}
    for threads in options.threads:
        torch.set_num_threads(threads)
        bandwidth[threads] = read_bandwidth(device)
        rate[threads] = matmul_rate(device, getattr(torch, options.dtype))
    reads = ", ".join(f"{t} thread{'s' * (t != 1)} {b / 1e9:.1f} GB/s" for t, b in bandwidth.items())
    rates = ", ".join(f"{t} thread{'s' * (t != 1)} {r / 1e9:.1f} GFLOP/s" for t, r in rate.items())
    print(
        f"{name}, torch {torch.__version__}, transformers {transformers.__version__}; medians of {options.rounds} "
        f"generate calls per column; read bandwidth ({BANDWIDTH_MB} MB torch sum, best of 5): {reads}; "
        f"{options.dtype} matmul rate ({GEMM_N}x{GEMM_N}, best of 5): {rates}"
        + (f"; {inductor}" if inductor else "")
        + "\n",
        flush=True,
    )
    gc.collect()
    for model_name in options.models:
        shape = SHAPES[model_name]
        state: dict[str, Any] = {"bandwidth": bandwidth, "rate": rate}
        if options.optimum:
            state["optimum"] = optimum_python()
        reset_peak_rss()
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        with _quiet_transformers():
            model = shape.build(options.prompt + options.new, device).to(getattr(torch, options.dtype))
            params = sum(p.numel() for p in model.parameters())
            groups = [
                bench_group(model, shape, batch, threads, options, state)
                for threads in options.threads
                for batch in options.batches
            ]
            for weights in options.weights if options.accuracy else ():
                print(f"accuracy against fp32, {shape.name}: {accuracy(model, shape, weights, options.accuracy)}")
            if options.accuracy and options.dtype == "bfloat16":
                print(f"{shape.name}: {bfloat16_accuracy(model, shape, options.accuracy, options.prompt)}", flush=True)
        print(report(shape, groups, params, state, options), end="\n\n", flush=True)
        del model, groups, state
        gc.collect()
    return 0


if __name__ == "__main__":
    sys.exit(main())
