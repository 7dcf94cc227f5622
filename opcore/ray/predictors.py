"""Ray Data UDFs (class-based: one load per actor, then a call per batch) for a saved plan and for a
generating plan (LanguageModel.save).

>>> ds.map_batches(PlanPredictor, fn_constructor_args=("model.plan",),
...                compute=ActorPoolStrategy(size=2), num_cpus=2, batch_size=64)  # doctest: +SKIP
>>> ds.map_batches(GenerationPredictor, fn_constructor_args=("llama.lm",),
...                fn_constructor_kwargs={"max_new_tokens": 16},
...                compute=ActorPoolStrategy(size=2), num_cpus=2)  # doctest: +SKIP

Each output row keeps the batch's other columns (the row id among them), the plan's outputs, and
where ``metadata`` (default): ``opcore_actor`` (host:pid), ``opcore_load_id`` (one per load: an
actor restarted by Ray loads again under a new id) and ``opcore_fingerprint_changes`` (the
fingerprint fields in which the worker differs from the saving machine, comma-separated; "" when
none: docs/scale.md) and ``opcore_threads`` (torch's and the runtimes' threads in the actor).
``on_error="record"`` adds ``opcore_error``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy

from opcore.errors import ArgumentError, OpcoreError
from opcore.ray.batches import build, columns_of, kind_of, length_of, rows_of
from opcore.ray.errors import RowError
from opcore.ray.loading import LoadRecord, load_on_worker

__all__ = ["GenerationPredictor", "PlanPredictor"]

ON_ERROR = ("raise", "record")


class _Rows:
    """What every predictor shares: the load, the row ids, the error policy, the metadata columns."""

    op = "opcore.ray"

    def __init__(self, plan: Any, *, id_column: str, on_error: str, threads: int | None, metadata: bool) -> None:
        if on_error not in ON_ERROR:
            raise ArgumentError(
                op=self.op,
                arg="on_error",
                expected="'raise' (the job fails) or 'record' (opcore_error)",
                found=repr(on_error),
            )
        self.id_column = id_column
        self.on_error = on_error
        self.metadata = metadata
        self.loaded, self.load = load_on_worker(plan, threads=threads, op=self.op)

    @property
    def load_record(self) -> LoadRecord:
        return self.load

    def _ids(self, batch: Any) -> list[Any]:
        count = length_of(batch)
        if self.id_column in columns_of(batch):
            return [value.item() if hasattr(value, "item") else value for value in rows_of(batch, self.id_column)]
        return [f"batch row {index} (no {self.id_column!r} column)" for index in range(count)]

    def _require(self, batch: Any, names: Sequence[str]) -> None:
        missing = [name for name in names if name not in columns_of(batch)]
        if missing:
            raise ArgumentError(
                op=self.op,
                arg="batch",
                expected=f"the columns {', '.join(names)}",
                found=f"columns {', '.join(columns_of(batch))} (no {', '.join(missing)})",
                fix="name the batch's columns with inputs=(...) / prompt_column=...",
            )

    def _each_chunk(
        self, good: list[int], size: int, run: Callable[[list[int]], None], ids: list[Any], errors: list[str | None]
    ) -> dict[int, BaseException]:
        """``run`` over the rows ``good``, ``size`` at a time; a chunk that raises runs again row by row,
        so that each failing row gets its own error, named by its id, and the others their results.
        Returns each failed row's exception (the cause a RowError is raised from)."""
        causes: dict[int, BaseException] = {}
        for chunk in _chunks(good, size):
            try:
                run(chunk)
            except Exception:
                for index in chunk:
                    try:
                        run([index])
                    except Exception as error:
                        kind = "" if isinstance(error, OpcoreError) else f"{type(error).__name__}: "
                        errors[index] = f"row id {ids[index]!r}: {kind}{error}"
                        causes[index] = error
        return causes

    def _finish(
        self,
        batch: Any,
        drop: Sequence[str],
        outputs: dict[str, list[Any]],
        errors: list[str | None],
        causes: dict[int, BaseException],
    ) -> Any:
        """The output batch, or the first failed row's RowError where on_error is 'raise'."""
        failed = [message for message in errors if message is not None]
        if failed and self.on_error == "raise":
            index = next(i for i, m in enumerate(errors) if m is not None)
            error = RowError(
                errors[index],
                op=self.op,
                fix="fix the row, or map_batches(..., fn_constructor_kwargs="
                "{'on_error': 'record'}) to keep the job going and mark the row in opcore_error",
            )
            error.row_id = self._ids(batch)[index]
            raise error from causes.get(index)
        count = length_of(batch)
        add: dict[str, Any] = dict(outputs)
        if self.metadata:
            add["opcore_actor"] = numpy.full(count, self.load.actor)
            add["opcore_load_id"] = numpy.full(count, self.load.load_id)
            add["opcore_fingerprint_changes"] = numpy.full(count, ",".join(self.load.fingerprint_changes))
            add["opcore_threads"] = numpy.full(count, self.load.threads)
        if self.on_error == "record":
            add["opcore_error"] = numpy.array([message or "" for message in errors])
        return build(batch, set(drop), add)


def _chunks(indices: list[int], size: int) -> Iterator[list[int]]:
    for start in range(0, len(indices), size):
        yield indices[start : start + size]


class PlanPredictor(_Rows):
    """A Ray Data UDF that runs a saved plan (``Plan.save``) over batches: each row of the input
    columns is one row (dim 0) of the plan's inputs; each output's row is written to its column.

    plan: the folder's path (on every node) or ``opcore.ray.put_plan(path)``; inputs: the columns
    fed to the plan's inputs in order (None: the plan's input names, ``plan.graph.inputs``);
    outputs: the output columns' names (None: "output" for one output, else "output_0", ...);
    id_column: the column named in a failing row's error; on_error: "raise" (the batch, hence the
    job, fails with a RowError naming the row) or "record" (the row's outputs are zeros and
    ``opcore_error`` says why; the other rows are unaffected); threads: torch's and the runtimes'
    threads (None: the actor's num_cpus); rows_per_call: rows per plan call (None: the batch, or the
    captured batch size where dim 0 is static: rows are padded up to it).

    >>> predict = PlanPredictor("mlp.plan", threads=1)                                # doctest: +SKIP
    >>> predict({"id": numpy.arange(4), "input": numpy.zeros((4, 16), numpy.float32)})  # doctest: +SKIP
    """

    op = "PlanPredictor"

    def __init__(
        self,
        plan: Any,
        *,
        inputs: Sequence[str] | None = None,
        outputs: Sequence[str] | None = None,
        id_column: str = "id",
        on_error: str = "raise",
        threads: int | None = None,
        rows_per_call: int | None = None,
        metadata: bool = True,
    ) -> None:
        super().__init__(plan, id_column=id_column, on_error=on_error, threads=threads, metadata=metadata)
        if hasattr(self.loaded, "decode_plan"):
            raise ArgumentError(
                op=self.op,
                arg="plan",
                expected="a plan folder (Plan.save)",
                found=f"a language model ({self.load.path})",
                fix="run it with opcore.ray.GenerationPredictor",
            )
        graph = self.loaded.graph
        self.infos = [graph.values[name] for name in graph.inputs]
        self.inputs = tuple(inputs) if inputs is not None else tuple(graph.inputs)
        if len(self.inputs) != len(graph.inputs):
            raise ArgumentError(
                op=self.op,
                arg="inputs",
                expected=f"{len(graph.inputs)} column names ({', '.join(graph.inputs)})",
                found=f"{len(self.inputs)}: {', '.join(self.inputs)}",
            )
        count = len(graph.outputs)
        numbered = tuple(f"output_{i}" for i in range(count))
        names = tuple(outputs) if outputs is not None else ("output",) if count == 1 else numbered
        if len(names) != count:
            raise ArgumentError(op=self.op, arg="outputs", expected=f"{count} names", found=f"{len(names)}: {names}")
        self.outputs = names
        static = {i.dims[0] for i in self.infos if i.meta is not None and i.dims and isinstance(i.dims[0], int)}
        self.static_rows = min(static) if static else None
        self.rows_per_call = self.static_rows or rows_per_call

    def __call__(self, batch: Any) -> Any:
        import torch

        kind_of(batch)
        self._require(batch, self.inputs)
        count = length_of(batch)
        ids = self._ids(batch)
        columns = [rows_of(batch, name) for name in self.inputs]
        errors: list[str | None] = [None] * count
        rows: list[list[Any] | None] = []
        for index in range(count):
            prepared, problem = self._prepare([column[index] for column in columns], ids[index])
            rows.append(prepared)
            errors[index] = problem
        results: list[list[Any] | None] = [None] * count
        good = [i for i in range(count) if errors[i] is None]

        def run(chunk: list[int]) -> None:
            self._run(chunk, rows, results)

        with torch.no_grad():
            causes = self._each_chunk(good, self.rows_per_call or max(1, len(good)), run, ids, errors)
        outputs = self._columns(results, errors)
        return self._finish(batch, self.inputs, outputs, errors, causes)

    def _prepare(self, values: list[Any], row_id: Any) -> tuple[list[Any] | None, str | None]:
        """The row's inputs, or why the row cannot run (another rank, size or kind of dtype than captured)."""
        tensors = []
        for name, info, value in zip(self.inputs, self.infos, values):
            if info.meta is None:
                tensors.append(value.item() if hasattr(value, "item") else value)
                continue
            wanted = info.dims[1:]
            found = tuple(value.shape)
            sizes_ok = all(not isinstance(w, int) or w == f for w, f in zip(wanted, found))
            shape_ok = len(found) == len(wanted) and sizes_ok
            dtype = info.meta.dtype.to_torch()
            kind = numpy.asarray(value).dtype.kind
            dtype_ok = (kind == "f" and dtype.is_floating_point) or (kind in "iub" and not dtype.is_floating_point)
            if not shape_ok or not dtype_ok:
                expected = "[" + ", ".join(str(w) for w in wanted) + "]"
                return None, (
                    f"row id {row_id!r}: column {name!r} expected a row of shape {expected} ({info.meta.dtype.value}, "
                    f"as captured), found shape {list(found)} ({value.dtype})"
                )
            tensors.append(value)  # stacked per call: one copy, writable (Ray's batches may be read-only)
        return tensors, None

    def _run(self, chunk: list[int], rows: list[list[Any] | None], results: list[list[Any] | None]) -> None:
        import torch
        from torch.utils import _pytree

        plan = self.loaded
        size = len(chunk)
        padded = chunk + [chunk[-1]] * ((self.static_rows or size) - size) if self.static_rows else chunk
        args = []
        for position, info in enumerate(self.infos):
            values = [rows[i][position] for i in padded]  # type: ignore[index]
            if info.meta is None:
                args.append(values[0])
            else:
                stacked = torch.from_numpy(numpy.stack(values))
                args.append(stacked.to(device=plan.options.device, dtype=info.meta.dtype.to_torch()))
        flat = _pytree.tree_leaves(plan(*args))
        for number, out in enumerate(flat):
            if not isinstance(out, torch.Tensor) or out.dim() == 0 or out.shape[0] != len(padded):
                raise ArgumentError(
                    op=self.op,
                    arg=self.outputs[number],
                    expected=f"an output with the {len(padded)} rows as dim 0",
                    found=f"{type(out).__name__} {getattr(out, 'shape', '')}",
                    fix="capture a model whose outputs are batched along dim 0, or run the plan in a map() UDF",
                )
        arrays = [out[:size].detach().cpu().numpy() for out in flat]
        for offset, index in enumerate(chunk):
            results[index] = [array[offset] for array in arrays]

    def _columns(self, results: list[list[Any] | None], errors: list[str | None]) -> dict[str, list[Any]]:
        """Each output's rows; a failed row's are zeros shaped as the batch's other rows' (or as captured)."""
        template = next((r for r in results if r is not None), None)
        if template is None:
            template = [self._captured_row(value) for value in self.loaded.graph.outputs]
        columns: dict[str, list[Any]] = {name: [] for name in self.outputs}
        for result in results:
            values = result if result is not None else [numpy.zeros_like(t) for t in template]
            for name, value in zip(self.outputs, values):
                columns[name].append(value)
        return columns

    def _captured_row(self, ref: Any) -> Any:
        info = self.loaded.graph.values.get(getattr(ref, "name", ""))
        if info is None or info.meta is None:
            return numpy.zeros(())
        import torch

        return torch.zeros(info.meta.shape[1:], dtype=info.meta.dtype.to_torch()).numpy()


class GenerationPredictor(_Rows):
    """A Ray Data UDF that generates with a saved language model (``LanguageModel.save``): each row's
    prompt (1-D token ids, any length) becomes up to ``max_new_tokens`` new tokens in ``tokens`` (fewer
    where every row of its group reached an eos; a row that reached its eos earlier is padded with
    ``pad_token_id``, as transformers' generate does); the prompt column stays. ``max_length``
    instead: each row up to that many tokens, its own prompt included (as transformers counts a row
    generated alone; ``max_new_tokens`` wins where both are given; neither: 20 new tokens).
    Rows run ``lm.batch_size`` at a time (``lm.batch_size // num_beams`` with beam search), left-padded
    to the longest prompt of the group (each row gets what it gets alone: docs/generate.md); generate's
    options (greedy by default) apply, one output row per prompt (num_return_sequences 1).

    >>> GenerationPredictor("llama.lm", max_new_tokens=8)({"id": ..., "input_ids": ...})  # doctest: +SKIP
    """

    op = "GenerationPredictor"

    def __init__(
        self,
        plan: Any,
        *,
        prompt_column: str = "input_ids",
        output_column: str = "tokens",
        max_new_tokens: int | None = None,
        max_length: int | None = None,
        id_column: str = "id",
        on_error: str = "raise",
        threads: int | None = None,
        metadata: bool = True,
        **generate_options: Any,
    ) -> None:
        super().__init__(plan, id_column=id_column, on_error=on_error, threads=threads, metadata=metadata)
        if not hasattr(self.loaded, "decode_plan"):
            raise ArgumentError(
                op=self.op,
                arg="plan",
                expected="a language model folder (LanguageModel.save)",
                found=f"a plan ({self.load.path})",
                fix="run it with opcore.ray.PlanPredictor",
            )
        self.prompt_column = prompt_column
        self.output_column = output_column
        for name, value in (("max_new_tokens", max_new_tokens), ("max_length", max_length)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 1):
                raise ArgumentError(
                    op=self.op, arg=name, expected="an int >= 1 or None", found=repr(value), fix=f"pass {name}=<int>"
                )
        # transformers' precedence: max_new_tokens over max_length; neither: 20 new tokens
        self.max_new_tokens = max_new_tokens if max_new_tokens is not None or max_length is not None else 20
        self.max_length = max_length if self.max_new_tokens is None else None
        self.options = generate_options
        self.pad = int(generate_options.get("pad_token_id") or 0)
        records = sorted({"return_dict_in_generate", "output_scores", "output_logits"} & set(generate_options))
        if records:
            raise ArgumentError(
                op=self.op,
                arg=records[0],
                expected="generate's options that make tokens: the predictor writes each row's tokens",
                found=repr(generate_options[records[0]]),
                fix="call lm.generate(..., return_dict_in_generate=True) where the scores are wanted",
            )
        defaults = self.loaded.defaults
        returned = generate_options.get("num_return_sequences") or defaults.num_return_sequences or 1
        if returned != 1:
            raise ArgumentError(
                op=self.op,
                arg="num_return_sequences",
                expected="1: one output row per prompt row",
                found=repr(returned),
                fix="pass num_return_sequences=1 (a generation config asking for more is overridden so)",
            )
        # beam search takes num_beams cache rows per prompt: fewer prompts per generate call
        beams = generate_options.get("num_beams") or defaults.num_beams or 1
        if not isinstance(beams, int) or isinstance(beams, bool) or not 1 <= beams <= self.loaded.batch_size:
            raise ArgumentError(
                op=self.op,
                arg="num_beams",
                expected=f"an int from 1 to the captured batch_size ({self.loaded.batch_size}): each beam is a row",
                found=repr(beams),
                fix="capture_lm(..., batch_size=<prompts a call x num_beams>) and save again",
            )
        self.rows_per_call = self.loaded.batch_size // beams

    def __call__(self, batch: Any) -> Any:
        import torch

        kind_of(batch)
        self._require(batch, [self.prompt_column])
        lm = self.loaded
        ids = self._ids(batch)
        prompts = rows_of(batch, self.prompt_column)
        errors: list[str | None] = [None] * len(prompts)
        for index, prompt in enumerate(prompts):
            if prompt.ndim != 1 or prompt.dtype.kind not in "iu" or not len(prompt):
                errors[index] = (
                    f"row id {ids[index]!r}: column {self.prompt_column!r} expected 1-D integer token ids, found shape "
                    f"{list(prompt.shape)} ({prompt.dtype})"
                )
            elif self.max_length is not None and not len(prompt) < self.max_length <= lm.max_length:
                errors[index] = (
                    f"row id {ids[index]!r}: max_length {self.max_length} counts the prompt: it must be above the "
                    f"row's {len(prompt)} prompt tokens and at most the captured max_length {lm.max_length}"
                )
            elif self.max_new_tokens is not None and len(prompt) + self.max_new_tokens > lm.max_length:
                errors[index] = (
                    f"row id {ids[index]!r}: {len(prompt)} prompt tokens + max_new_tokens {self.max_new_tokens} exceed "
                    f"the captured max_length {lm.max_length}"
                )
        results: list[Any] = [None] * len(prompts)
        good = [i for i in range(len(prompts)) if errors[i] is None]
        with torch.no_grad():
            causes = self._each_chunk(
                good, self.rows_per_call, lambda chunk: self._generate(chunk, prompts, results), ids, errors
            )
        width = max((len(r) for r in results if r is not None), default=0)
        tokens = [r if r is not None else numpy.full(width, self.pad, numpy.int64) for r in results]
        return self._finish(batch, (), {self.output_column: tokens}, errors, causes)

    def _generate(self, chunk: list[int], prompts: list[Any], results: list[Any]) -> None:
        import torch

        longest = max(len(prompts[i]) for i in chunk)
        ids = torch.full((len(chunk), longest), self.pad, dtype=torch.long)
        mask = torch.zeros((len(chunk), longest), dtype=torch.long)
        for row, index in enumerate(chunk):
            prompt = torch.tensor(prompts[index], dtype=torch.long)  # a copy: Ray's batches may be read-only
            ids[row, longest - len(prompt) :] = prompt
            mask[row, longest - len(prompt) :] = 1
        # each row's own budget: with max_length, what is left of it after the row's own prompt (a
        # left-padded row gets what it gets alone, so a row's tokens past its budget are cut off). The
        # padded rows share the cache: a shorter row whose budget goes past the room the longest prompt
        # leaves is generated again with the rows like it (shorter prompts each time: it ends)
        budgets = [
            self.max_new_tokens if self.max_new_tokens is not None else int(self.max_length or 0) - len(prompts[i])
            for i in chunk
        ]
        steps = min(max(budgets), self.loaded.max_length - longest)
        # the tokens alone, also where the model's generation config asks for a record
        out = self.loaded.generate(ids, mask, max_new_tokens=steps, return_dict_in_generate=False, **self.options)
        new = out[:, longest:].numpy()
        again = [index for row, index in enumerate(chunk) if budgets[row] > steps]
        for row, index in enumerate(chunk):
            if budgets[row] <= steps:
                results[index] = new[row][: budgets[row]]
        if again:
            self._generate(again, prompts, results)
