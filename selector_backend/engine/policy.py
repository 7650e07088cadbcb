"""Selector policy: which kind of build the user wants (auto, cpu, gpu-nvidia, pins).

A selector is a whitespace- (or ';'-) separated list of one mode and any
number of pins ``axis=value``. A misspelled mode or value is an error with a
suggestion — never silently something else (the JAX anti-goal).
"""

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from selector_backend.engine.catalog import Catalog
from selector_backend.engine.compat import Finding
from selector_backend.engine.variant import AxisValue, Variant
from selector_backend.errors import InputError, unknown_choice

MODES = ("auto", "cpu", "gpu-nvidia")


class Selector(NamedTuple):
    mode: str = "auto"
    pins: Mapping[str, AxisValue] = MappingProxyType({})

    def __str__(self) -> str:
        pins = [f"{k}={','.join(v) if isinstance(v, tuple) else v}" for k, v in self.pins.items()]
        return " ".join([self.mode, *pins])

    def wants_gpu(self) -> bool | None:
        """True/False when the selector decides, None when the host decides (auto)."""
        if self.mode == "cpu":
            return False
        if self.mode == "gpu-nvidia":
            return True
        cuda = self.pins.get("cuda")
        if cuda is not None:
            return cuda != "none"
        return None

    def check(self, variant: Variant) -> list[Finding]:
        """Findings for how the selector restricts ``variant`` (empty: no restriction)."""
        findings = []
        is_gpu = variant.get("cuda", "none") != "none"
        if self.mode == "cpu" and is_gpu:
            findings.append(Finding(False, "selector cpu excludes CUDA builds"))
        if self.mode == "gpu-nvidia" and not is_gpu:
            findings.append(Finding(False, "selector gpu-nvidia needs a CUDA build"))
        for axis, pinned in self.pins.items():
            have = variant.values_of(axis)
            want = pinned if isinstance(pinned, tuple) else (pinned,)
            text = ",".join(want)
            ok = set(want) <= set(have) if isinstance(pinned, tuple) else have == want
            findings.append(
                Finding(ok, f"selector pins {axis}={text}" + ("" if ok else f"; candidate has {','.join(have)}"))
            )
        return findings


def parse_selector(text: str | None, catalog: Catalog) -> Selector:
    """Parse 'gpu-nvidia cuda_arch=80' style text; errors name the bad token."""
    mode = None
    pins: dict[str, AxisValue] = {}
    for token in (text or "").replace(";", " ").split():
        if "=" in token:
            axis, _, value = token.partition("=")
            if axis in pins:
                raise InputError(f"selector pins {axis} twice")
            pins[axis] = catalog.parse_value(axis, value)
        elif token in MODES:
            if mode is not None and mode != token:
                raise InputError(f"selector names two modes: {mode} and {token}")
            mode = token
        else:
            raise unknown_choice("selector", token, MODES)
    selector = Selector(mode or "auto", pins)
    if selector.mode == "gpu-nvidia" and "cuda" not in catalog.axes:
        raise InputError(f"selector gpu-nvidia: {catalog.name}'s catalog has no GPU builds (no cuda axis)")
    _check_consistent(selector)
    return selector


def _check_consistent(selector: Selector) -> None:
    gpu_pins = [a for a in ("cuda", "cuda_arch") if a in selector.pins and selector.pins[a] not in ("none", ("none",))]
    if selector.mode == "cpu" and (gpu_pins or selector.pins.get("tensor_ops") == "nccl"):
        raise InputError(f"selector cpu contradicts {', '.join(gpu_pins) or 'tensor_ops=nccl'}; drop one of them")
    if selector.mode == "gpu-nvidia" and selector.pins.get("cuda") == "none":
        raise InputError("selector gpu-nvidia contradicts cuda=none; drop one of them")
