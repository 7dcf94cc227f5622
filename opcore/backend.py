"""The record a plugin returns to announce its backend.

>>> spec = BackendSpec(name="mine", version="1.0", priority=50, device_types=(DeviceType.CPU,))
>>> spec.check_availability()
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import field

from opcore.fast_records import record
from opcore.types import DeviceType

__all__ = ["API_VERSION", "BackendSpec", "DEFAULT_PRIORITIES", "version_mismatch"]

# The plugin API this opcore speaks. A plugin built for another one fails to load with a
# message saying which versions match; the number changes only when a hook or a record changes.
API_VERSION = 1

# Published defaults; a backend may choose its own. Higher is preferred.
DEFAULT_PRIORITIES: Mapping[str, int] = {
    "cuda": 400,
    "cpu": 300,
    "openvino": 200,
    "onnxruntime": 100,
    "reference": 0,
}


@record
class BackendSpec:
    """What a backend says about itself.

    Only ``is_available`` runs at load time, so it must be cheap (no heavy imports);
    ``describe`` runs only for the doctor and may import its runtime.
    """

    name: str
    version: str
    # Higher is preferred (see DEFAULT_PRIORITIES).
    priority: int
    device_types: tuple[DeviceType, ...]
    # The opcore plugin API version the backend was built for.
    api_version: int = API_VERSION
    # None: always available. Else returns True, or a string saying why it is not
    # ("no CUDA build of torch (2.13.0+cpu)"); an unavailable backend registers no kernels.
    is_available: Callable[[], bool | str] | None = None
    # None: nothing to add. Else returns name -> value lines for the doctor (runtime
    # library versions, ISA, devices); may import the runtime, must not raise.
    describe: Callable[[], Mapping[str, str]] | None = None
    description: str = ""
    # Packages that, once installed, would make this backend work (for messages).
    install_hint: str = field(default="", compare=False)

    def check_availability(self) -> bool | str:
        return True if self.is_available is None else self.is_available()


def version_mismatch(surface: str, built_for: int, provided: int, distribution: str) -> str | None:
    """None where a plugin built for version ``built_for`` of one of opcore's versioned surfaces
    (``ONEMODEL_API_VERSION``, ``TORCHKIT_API_VERSION``) can use this opcore's ``provided``; else the
    reason its ``is_available`` returns, so the backend is unavailable (with why) rather than broken.
    Versions count incompatible changes only, so they must be equal.

    >>> version_mismatch("torchkit", 1, 1, "opcore-cpu") is None
    True
    >>> version_mismatch("torchkit", 1, 2, "opcore-cpu").split(": ")[0]
    "opcore-cpu was built for opcore's torchkit API 1, this opcore provides torchkit API 2"
    """
    if built_for == provided:
        return None
    return (
        f"{distribution} was built for opcore's {surface} API {built_for}, this opcore provides {surface} API "
        f"{provided}: install the {distribution} release made for this opcore (pip install -U {distribution})"
    )
