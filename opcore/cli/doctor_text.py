"""The text form of ``opcore doctor``: ``name: value`` lines in indented sections, problems flagged
next to the value that shows them. It is for people and may change; scripts use ``--json``.
"""

from __future__ import annotations

from opcore.cli.doctor import DoctorReport, PluginInfo
from opcore.cli.render import Style, format_seconds, table
from opcore.plugins import disable_name
from opcore.reports import PluginStatus

__all__ = ["render_text"]

NOTE = "opcore doctor: for people (the layout may change); scripts should use `opcore doctor --json` (docs/cli.md)"


def _status(info: PluginInfo, style: Style) -> str:
    report = info.report
    text = report.status_text.split(" Fix: ")[0]  # the fix goes on its own line
    if report.status is PluginStatus.LOADED:
        return style.good(text)
    if report.status is PluginStatus.FAILED:
        return style.bad(text)
    if report.status is PluginStatus.UNAVAILABLE:
        return style.warn(text)
    return style.dim(text)


def _plugin_lines(info: PluginInfo, style: Style, verbose: bool) -> list[str]:
    report = info.report
    spec = report.backend
    rows: list[tuple[str, str]] = []
    dist = report.distribution or "(not from a distribution)"
    if report.distribution_version:
        dist += f" {report.distribution_version}"
    rows.append(("distribution", dist))
    rows.append(("entry point", report.entry_point or "-"))
    if spec is not None:
        devices = ", ".join(str(d) for d in spec.device_types) or "-"
        parts = [
            f"version {spec.version}",
            f"api {spec.api_version}",
            f"devices {devices}",
            f"priority {spec.priority}",
        ]
        rows.append(("backend", " · ".join(parts)))
        if spec.description:
            rows.append(("description", spec.description))
    if report.status is PluginStatus.LOADED:
        contracts = f" · {_plural(report.contract_count, 'op contract')} added" if report.contract_count else ""
        rows.append(("kernels", f"{report.kernel_count}{contracts} · loaded in {format_seconds(report.load_time_s)}"))
    elif report.load_time_s > 0:
        rows.append(("load time", format_seconds(report.load_time_s)))
    compiler = info.compiler
    if compiler is not None:
        if compiler.loads:
            shown = ", ".join(compiler.ops[:6]) + (f", ... ({len(compiler.ops)} ops)" if len(compiler.ops) > 6 else "")
            said = ", ".join(f"{dtype} in {wide}" for dtype, wide in compiler.computes)
            computes = f" · computes {said}" if said else ""
            rows.append(("partition compiler", f"loads · claims {shown or 'no registered op'}{computes}"))
        else:
            rows.append(("partition compiler", style.warn(f"does not load: {compiler.error}")))
    if report.status is PluginStatus.UNAVAILABLE and spec is not None and spec.install_hint:
        rows.append(("to enable", spec.install_hint))
    if info.describe is not None:
        taken = {label for label, _ in rows} | {"load time", "to enable", "to fix", "or", "traceback", "describe"}
        rows.extend((f"{key} (describe)" if key in taken else key, value) for key, value in info.describe)
    if info.describe_error:
        rows.append(("describe", style.warn(info.describe_error)))
    if report.status is PluginStatus.FAILED:
        _, _, own_fix = report.reason.partition(" Fix: ")
        if own_fix:
            rows.append(("to fix", own_fix))
        remove = f"pip uninstall {report.distribution}" if report.distribution else "remove the plugin"
        skip = disable_name(report)
        rows.append(("or", f"{remove}, or set OPCORE_DISABLE={skip} to skip it"))
        if report.traceback and not verbose:
            rows.append(("traceback", style.dim("run `opcore doctor --verbose` to see it")))
    lines = [table(rows, indent="      ", header=False)]
    if report.status is PluginStatus.FAILED and report.traceback and verbose:
        lines.append("      traceback:")
        lines.extend("        " + line for line in report.traceback.splitlines())
    return lines


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" + ("" if count == 1 else "s")


def _yes_no(value: object) -> str:
    if value is None:
        return "(not set: by priority)"
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, list):
        return ", ".join(value) if value else "(none)"
    return str(value)


def _compiled_parts(report: DoctorReport, style: Style) -> str:
    """The ``built`` row: each optional compiled part, and what building a missing one takes."""
    return " · ".join(
        name if state == "built" else style.warn(f"{name} {state}") for name, state in report.compiled_parts
    )


def render_text(report: DoctorReport, style: Style, verbose: bool = False) -> str:
    """The doctor's text form; ``verbose`` adds the tracebacks of failed plugins."""
    out: list[str] = [style.dim(NOTE), ""]
    cpu = report.cpu
    cores = f"{cpu.logical_cores} logical cores" if cpu.logical_cores else "cores unknown"
    if cpu.usable_cores is not None and cpu.usable_cores != cpu.logical_cores:
        cores += f" ({cpu.usable_cores} usable by this process)"
    if cpu.isa is None:
        isa = style.warn(cpu.reason or "unknown")
    else:
        has = " ".join(name for name, present in cpu.isa if present) or "none of the tracked ones"
        missing = " ".join(name for name, present in cpu.isa if not present)
        isa = has + (style.dim(f" · missing: {missing}") if missing else "")
    gpu = ", ".join(report.gpu.devices) if report.gpu.visible else style.dim(report.gpu.evidence)
    rows = [
        ("opcore", f"{report.opcore_version}  {report.opcore_path}"),
        ("run", report.fast_path if report.fast_path.startswith("compiled") else style.warn(report.fast_path)),
        ("guard", report.tensor_guard if report.tensor_guard.startswith("opcore") else style.dim(report.tensor_guard)),
        ("built", _compiled_parts(report, style)),
        ("python", f"{report.python_version} ({report.python_implementation})  {report.python_executable}"),
        ("platform", report.platform),
        ("cpu", f"{cpu.model or 'unknown model'} · {cpu.machine} · {cores}"),
        ("isa", isa),
        ("gpu", gpu),
    ]
    out.append(table(rows, indent="", header=False))

    out.append("")
    counts = ", ".join(f"{report.count(s)} {s.value}" for s in PluginStatus if report.count(s))
    if report.settings_error is not None:
        out.append(style.head("plugins") + " " + style.bad("not loaded: the settings are invalid (see settings)"))
    else:
        out.append(style.head("plugins") + f"  {len(report.plugins)} found: {counts or 'none'}")
    for info in report.plugins:
        out.append(f"  {style.head(info.name)}  {_status(info, style)}")
        out.extend(_plugin_lines(info, style, verbose))

    out.append("")
    out.append(style.head("libraries"))
    lib_rows: list[tuple[str, str]] = []
    for lib in report.libraries:
        lib_rows.append((lib.name, lib.version or style.dim(lib.reason)))
        lib_rows.extend((f"  {key}", style.dim(value) if key == "details" else value) for key, value in lib.details)
    out.append(table(lib_rows, indent="  ", header=False))

    out.append("")
    out.append(style.head("settings") + style.dim("  (value, and where it comes from)"))
    if report.settings_error is not None:
        out.append("  " + style.bad(f"invalid: {report.settings_error}"))
    else:
        out.append(table([(s.name, _yes_no(s.value), style.dim(s.source)) for s in report.settings], header=False))
    if report.environment:
        out.extend(f"  {name}={value}" for name, value in report.environment)
    else:
        out.append("  " + style.dim("no OPCORE_* variable is set"))

    if report.tuning is not None:
        out.append("")
        out.append(style.head("tuning") + style.dim("  (measured ranking: opcore tune, OPCORE_TUNE=1)"))
        tuning = report.tuning
        if tuning.status == "current":
            noun = "entry" if tuning.entries == 1 else "entries"
            state = f"{tuning.entries} {noun}, measured on this machine and these versions"
        elif tuning.status == "absent":
            state = style.dim("no file: kernels rank by static priority")
        else:
            state = style.warn(f"{tuning.status}, ignored: {tuning.reason}")
        out.append(table([("file", tuning.path), ("state", state)], header=False))

    if report.loading is not None:
        out.append("")
        out.append(style.head("loading") + style.dim("  (the plugins, at the first call; OPCORE_LOAD_CACHE=0 scans)"))
        loading = report.loading
        if loading.source == "cache":
            found = f"from the cache ({format_seconds(loading.discovery_seconds)})"
        else:
            found = f"scanned ({format_seconds(loading.discovery_seconds)}): {loading.reason}"
        rows = [("took", format_seconds(loading.seconds)), ("entry points", found)]
        if loading.path:
            rows.append(("cache file", loading.path))
        if loading.written:
            rows.append(("cache", style.warn(loading.written)))
        out.append(table(rows, header=False))

    if report.hints:
        out.append("")
        out.append(style.head("hints"))
        for hint in report.hints:
            marks = {"error": style.bad("x"), "warning": style.warn("!")}
            mark = marks.get(hint.level, style.dim("i"))
            out.append(f"  {mark} {hint.message}" + (f"; {hint.fix}" if hint.fix else ""))

    out.append("")
    failed = report.count(PluginStatus.FAILED)
    took = f"collected in {format_seconds(report.collect_time_s)}"
    if report.settings_error is not None:
        out.append(style.bad("problem: the OPCORE_* settings are invalid") + f" · {took} · exit status 1")
    elif failed:
        noun = "plugin" if failed == 1 else "plugins"
        out.append(style.bad(f"problem: {failed} {noun} failed to load") + f" · {took} · exit status 1")
    elif report.exit_status:
        out.append(style.bad("problem: calls will fail (see the hints marked x)") + f" · {took} · exit status 1")
    else:
        out.append(style.good("no problems found") + f" · {took}")
    return "\n".join(out)
