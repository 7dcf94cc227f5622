"""The decode step's window (opcore.graph.split_attention, ``window``; opcore.graph.score_window for an
attention written as matmuls) against reading every slot, and against transformers' own step, in one run.

A captured decoder's cache has ``max_length`` slots. Its decode step's split attention reads the
first W of them, W the step's position + 1 rounded up to WINDOW_STEP (an input of the plan), where it
read all ``max_length`` before: the step's cost then follows the conversation, not the capture's
``max_length``. Per shape and ``max_length``, after a 128-token prompt, one decode step near position
140 is timed three ways (medians of interleaved rounds):

* **window**: the plan as ``generate`` runs it (W = 160);
* **every slot**: the same plan given W = ``max_length`` (every slot read, as before the window,
  and copied by the window's gathers too: an upper bound of the step before the window);
* **transformers**: the model's own forward of one token on its DynamicCache of the same length
  (eager, what ``model.generate`` runs per token).

The prompt's prefill (128 tokens at slots 0-127, W 128) is timed the same three ways (transformers:
its forward of the prompt on a new DynamicCache). The window's and every slot's logits must agree
(the slots past the position are masked either way).
One thread by default (torch's and the runtimes'); the load is printed.

    python bench/decode_window.py                                  # small and 135m, 256 and 2048
    python bench/decode_window.py --shapes 0.5b --weights int4 --lengths 256,2048,4096
    python bench/decode_window.py --attention eager    # the models' attention as matmuls (GPT-J's, Gemma 2's form)
    python bench/decode_window.py --shapes mla         # a latent cache projected up each step (DeepSeek-V2's)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(__file__))
from _timing import machine_load, medians, table

PROMPT = 128


@dataclass(frozen=True)
class LatentShape:
    """A DeepSeek-V2-shaped decoder (transformers' multi-head latent attention: a latent of ``latent``
    and a rotary key of ``rope`` cached per slot, projected up to every head's keys and values at each
    step), dense MLPs; random weights, its logits scaled as bench/generate.py's shapes'."""

    name: str
    hidden: int
    layers: int
    heads: int
    intermediate: int
    vocab: int
    latent: int
    rope: int
    nope: int
    value: int

    def build(self, max_length: int) -> Any:
        import transformers
        from generate import LOGIT_SCALE, scale_logits

        torch.manual_seed(0)
        config = transformers.DeepseekV2Config(
            vocab_size=self.vocab, hidden_size=self.hidden, intermediate_size=self.intermediate,
            num_hidden_layers=self.layers, num_attention_heads=self.heads, num_key_value_heads=self.heads,
            kv_lora_rank=self.latent, q_lora_rank=None, qk_rope_head_dim=self.rope, qk_nope_head_dim=self.nope,
            v_head_dim=self.value, first_k_dense_replace=self.layers, max_position_embeddings=max(max_length, 512),
            tie_word_embeddings=False, bos_token_id=1, eos_token_id=2, pad_token_id=0,
        )  # fmt: skip
        model = transformers.DeepseekV2ForCausalLM(config).eval()
        scale_logits(model, LOGIT_SCALE)
        return model


# DeepSeek-V2-Lite's attention (latent 512, rotary 64, 128 + 128 per head) at half its widths, 4 layers
LATENT_SHAPES = {"mla": LatentShape("mla", 1024, 4, 8, 2816, 8000, 256, 32, 64, 64)}


def rows_of(
    shape_name: str, weights: str | None, length: int, rounds: int, backends: Any, attention: str = "sdpa"
) -> list[tuple[str, ...]]:
    """One shape at one max_length: the three decode steps' medians, and the prompt's; ``attention``:
    the model's attn_implementation ("eager": scores, softmax and weights @ values as matmuls)."""
    from generate import SHAPES

    import opcore.graph
    from opcore.graph.split_attention import WINDOW, window_length

    shape = LATENT_SHAPES[shape_name] if shape_name in LATENT_SHAPES else SHAPES[shape_name]
    model = shape.build(length)
    model.set_attn_implementation(attention)
    started = time.perf_counter()
    lm = opcore.graph.capture_lm(model, max_length=length, weights=weights, backends=backends)
    print(f"  {shape_name} max_length {length}: captured in {time.perf_counter() - started:.1f} s; "
          f"decode: {lm.decode_plan.summary()}", flush=True)  # fmt: skip
    if WINDOW not in lm.decode_plan.graph.inputs:
        raise SystemExit(f"{shape_name}: the decode step has no window (no attention took one): nothing to compare")
    ids = torch.randint(3, min(shape.vocab, 1000), (1, PROMPT), generator=torch.Generator().manual_seed(0))
    chat = lm.session()
    chat.prefill(ids)
    token = torch.tensor([[5]])
    for _ in range(12):
        chat.step(token)
    at = chat.length  # the slot every timed step writes (the same one: the state stays as it is)
    chat.slot.fill_(at)
    chat.mask[:, at] = 1
    positions = chat.positions[:, None]
    program = lm.decode_plan.program

    def step(width: int) -> Any:
        return program.run([token, positions, chat.slot, chat.mask, lm.window_slots[:width], *chat.state])[0]

    width = window_length(at, length)
    eager: Callable[[], Any] | None = None
    if weights is None:  # transformers' own step on the float model (a quantized plan has no such twin)
        with torch.no_grad():
            held = torch.cat([ids, token.expand(1, at - PROMPT)], 1)  # the session's tokens
            cache = model(held, use_cache=True).past_key_values
        one = torch.tensor([[5]])
        where = torch.tensor([at])

        def one_step() -> Any:
            out = model(one, past_key_values=cache, cache_position=where, use_cache=True)
            cache.crop(-1)  # the cache back to its length: each round times the same step
            return out.logits

        eager = one_step
    times = _timed(step, width, length, eager, rounds, f"{shape_name}'s decode step")
    kind = "".join(f" {v}" for v in (weights, attention if attention != "sdpa" else None) if v)
    name = f"{shape_name}{kind}, max_length {length}"
    rows = [_row(f"{name}: decode step", f"{at} (W {width})", times, 2)]
    prompt = prompt_times(lm, model, ids, length, weights is None, max(rounds // 3, 5))
    if prompt is not None:
        rows.append(_row(f"{name}: prefill {PROMPT}", f"0-{PROMPT - 1} (W {prompt[1]})", prompt[0], 1))
    return rows


def prompt_times(lm: Any, model: Any, ids: Any, length: int, eager: bool, rounds: int) -> Any:
    """The prompt's prefill at its window and at every slot (and transformers' own forward of it, on
    a new DynamicCache), medians; None where the prefill takes no window."""
    from opcore.graph.split_attention import WINDOW, window_length

    plan = lm.prefill_plan
    if plan is None or WINDOW not in plan.graph.inputs:
        return None
    chat = lm.session()
    mask = chat.mask.clone()
    mask[:, :PROMPT] = 1
    slots = torch.arange(PROMPT)
    positions = slots[None]

    def prefill(width: int) -> Any:
        return plan.program.run([ids, positions, slots, mask, lm.window_slots[:width], *chat.state])[0]

    width = window_length(PROMPT - 1, length)
    forward = (lambda: model(ids, use_cache=True).logits) if eager else None
    return _timed(prefill, width, length, forward, rounds, "the prompt"), width


def _timed(
    run: Callable[[int], Any], width: int, length: int, eager: Callable[[], Any] | None, rounds: int, what: str
) -> dict[str, float]:
    """Medians of ``run`` at the window's ``width`` and at every slot (``length``), and of ``eager``
    where given, without grad; first, the two runs' logits must agree (the slots after are masked)."""
    with torch.no_grad():
        apart = float((run(width) - run(length)).abs().max())
        if apart > 1e-3:
            raise SystemExit(f"{what}: the logits at its window are {apart:.1e} from every slot's")
        cases: dict[str, Callable[[], Any]] = {"window": partial(run, width), "every slot": partial(run, length)}
        if eager is not None:
            cases["transformers"] = eager
        return medians(cases, repeats=rounds)


def _row(name: str, where: str, times: dict[str, float], digits: int) -> tuple[str, ...]:
    eager_time = times.get("transformers")
    return (name, where, f"{times['window'] * 1e3:.{digits}f} ms", f"{times['every slot'] * 1e3:.{digits}f} ms",
            f"{times['every slot'] / times['window']:.2f}x",
            f"{eager_time * 1e3:.{digits}f} ms" if eager_time else "-",
            f"{eager_time / times['window']:.2f}x" if eager_time else "-")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--shapes", default="small,135m", help="bench/generate.py shapes, or mla (comma-separated)")
    parser.add_argument("--weights", default=None, help="capture_lm's weights= (int8, int4); default float32")
    parser.add_argument("--lengths", default="256,2048", help="max_length values (comma-separated)")
    parser.add_argument("--backends", default=None, help="capture_lm's backends= (comma-separated); default all")
    parser.add_argument(
        "--attention", default="sdpa", choices=("sdpa", "eager"), help="the models' attn_implementation"
    )
    parser.add_argument("--threads", type=int, default=1, help="torch's and the runtimes' threads")
    parser.add_argument("--rounds", type=int, default=31)
    options = parser.parse_args(argv)
    torch.set_num_threads(options.threads)
    os.environ["OPCORE_RUNTIME_THREADS"] = str(options.threads)
    backends = tuple(options.backends.split(",")) if options.backends else None
    lengths = tuple(int(v) for v in options.lengths.split(","))
    print(f"{os.cpu_count()} cores, {options.threads} thread(s), torch {torch.__version__}; {machine_load()}")
    rows: list[tuple[str, ...]] = []
    for shape_name in options.shapes.split(","):
        for length in lengths:
            rows += rows_of(shape_name, options.weights, length, options.rounds, backends, options.attention)
    header = ("model, step", "slots", "window", "every slot", "window's gain", "transformers", "vs transformers")
    print(table(header, rows))
    print(machine_load())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
