"""Ranked resolution: every candidate, whether it runs here and why, best first.

The shape follows packaging.tags: small pure functions, and one sort key that
reads like the preference list it encodes. ``ideal_variant`` answers "what
would a source build target" from the same rules.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from operator import itemgetter
from types import MappingProxyType
from typing import Any

from selector_backend.engine import compat, targets
from selector_backend.engine.catalog import Catalog
from selector_backend.engine.compat import Finding
from selector_backend.engine.host import HostProfile
from selector_backend.engine.policy import Selector
from selector_backend.engine.variant import AxisValue, Variant, format_variant
from selector_backend.records import NamedTuple


class CandidateFile(NamedTuple):
    """One file of a candidate that comes as several (an index lists a variant once per wheel).

    It stands for the candidate ``Candidate(variant, source, {**extra,
    **candidate.extra}, candidate.findings + findings, order)``; the variant's
    verdict is reached once for all its files. ``position`` is where the file
    was listed: incompatible ones keep that order.
    """

    extra: Mapping[str, Any]
    findings: tuple[Finding, ...]
    order: int
    position: int


class Candidate(NamedTuple):
    """One thing that could be installed: a variant from some source.

    ``extra`` carries source details (url, sha256, filename, spack hash) into
    the JSON; ``findings`` are source-specific checks (wheel tags, Spack os).
    ``order`` breaks ties after every preference (lower first). With
    ``files``, the candidate is one per file (see CandidateFile) and its own
    ``order`` is unused.
    """

    variant: Variant
    source: str = "catalog"
    extra: Mapping[str, Any] = MappingProxyType({})
    findings: tuple[Finding, ...] = ()
    order: int = 0
    files: tuple[CandidateFile, ...] = ()


class Ranked:
    """A candidate with its verdict. ``findings`` are kept, and the
    human-readable ``reasons`` derived from them only when asked for.

    ``Ranked(candidate, compatible, findings)``; with ``file``, ``candidate``
    is the variant's candidate and ``findings`` its verdict, and the file's
    own candidate and findings are put together only when asked for.
    """

    __slots__ = ("_candidate", "_file", "_findings", "compatible")

    def __init__(
        self,
        candidate: Candidate,
        compatible: bool,
        findings: tuple[Finding, ...],
        file: CandidateFile | None = None,
    ) -> None:
        self._candidate = candidate
        self.compatible = compatible
        self._findings = findings
        self._file = file

    @property
    def candidate(self) -> Candidate:
        file = self._file
        if file is not None:  # the file's own candidate, built once
            group = self._candidate
            self._candidate = Candidate(
                group.variant, group.source, {**file.extra, **group.extra}, group.findings + file.findings, file.order
            )
            self._findings += file.findings
            self._file = None
        return self._candidate

    @property
    def findings(self) -> tuple[Finding, ...]:
        return self._findings if self._file is None else self._findings + self._file.findings

    @property
    def variant(self) -> Variant:
        return self._candidate.variant

    @property
    def reasons(self) -> tuple[str, ...]:
        """Failures first (they are why), then the supporting facts."""
        findings = self.findings
        return tuple([f.reason for f in findings if not f.ok] + [f.reason for f in findings if f.ok])

    def __repr__(self) -> str:
        return f"Ranked({self.candidate!r}, {self.compatible!r}, {self.findings!r})"

    def to_json(self, variant_json: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The contract shape; ``variant_json`` may pass the variant's JSON already built."""
        return {
            "variant": self.variant.to_json() if variant_json is None else variant_json,
            "source": self.candidate.source,
            **dict(self.candidate.extra),
            "compatible": self.compatible,
            "reasons": list(self.reasons),
        }


class Resolution(NamedTuple):
    selected: Ranked | None
    candidates: tuple[Ranked, ...]
    source_build: Variant | None
    selector: Selector
    notes: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Every candidate in full; a variant's JSON object is built once and shared by its wheels."""
        shared: dict[Variant, dict[str, Any]] = {}
        return {
            "selected": None if self.selected is None else self.selected.to_json(),
            "candidates": [
                c.to_json(shared.get(c.variant) or shared.setdefault(c.variant, c.variant.to_json()))
                for c in self.candidates
            ],
            "source_build": None
            if self.source_build is None
            else {"variant": self.source_build.to_json(), "spec": format_variant(self.source_build)},
            "selector": str(self.selector),
            "notes": list(self.notes),
        }

    def to_json_text(self) -> str:
        """``json.dumps(self.to_json(), separators=(",", ":"))``, built from parts a candidate shares.

        Thousands of wheels share a few thousand variants, one source, a
        handful of wheel-tag findings and reason strings: each of those is
        encoded once, and a wheel adds only its own fields.
        """
        return _JsonText().resolution(self)


class _JsonText:
    """Resolution.to_json_text's encoder: what candidates share is encoded once.

    Shared things are memoised by identity, each memo entry holding the
    object so its id stays taken. A wheel of an index costs one template
    fill: its own string fields encoded, the rest (variant, source, the
    candidate's fields, the reasons of its verdict and wheel tag) looked up.
    A variant's JSON is put together from its axis values' encoded forms, and
    each reason string is encoded once however many verdicts share it.
    """

    def __init__(self) -> None:
        import json

        self.dumps = json.JSONEncoder(separators=(",", ":")).encode  # one encoder: json.dumps builds one a call
        self.string = json.encoder.encode_basestring_ascii  # what json.dumps uses for a str
        self.variants: dict[Variant, str] = {}
        self.values: dict[tuple[str, AxisValue], str] = {}  # (axis, value) -> '"axis":value'
        self.reasons: dict[str, str] = {}  # reason -> its JSON string
        self.shared: dict[Any, tuple[Any, ...]] = {}

    def resolution(self, res: Resolution) -> str:
        build = None
        if res.source_build is not None:
            build = {"variant": res.source_build.to_json(), "spec": format_variant(res.source_build)}
        tail = self.dumps({"source_build": build, "selector": str(res.selector), "notes": list(res.notes)})
        candidates = [self.ranked(r) for r in res.candidates]
        selected = "null" if res.selected is None else candidates[0]
        return f'{{"selected":{selected},"candidates":[{",".join(candidates)}],{tail[1:]}'

    def ranked(self, r: Ranked) -> str:
        cand, file = r._candidate, r._file
        flag = "true" if r.compatible else "false"
        if file is None:
            head, fields = self._candidate(cand)[1:]
            return f'{head}{fields}"compatible":{flag},"reasons":[{self._reasons(r._findings, ())}]}}'
        keys = tuple(file.extra)
        template = self.shared.get((id(cand), keys))
        if template is None:
            template = self.shared[id(cand), keys] = (cand, self._file_template(cand, keys))
        reasons = self._reasons(r._findings, file.findings)
        if template[1] is not None:
            try:
                return str(template[1] % (*map(self.string, file.extra.values()), flag, reasons))
            except TypeError:  # a field that is not a string
                pass
        return str(self.dumps(r.to_json()))

    def _variant(self, variant: Variant) -> str:
        """``json.dumps(variant.to_json())``, from each (axis, value)'s encoded form."""
        text = self.variants.get(variant)
        if text is None:
            parts = []
            for item in variant._items:
                part = self.values.get(item)
                if part is None:
                    axis, value = item  # a multi-valued axis is a tuple: JSON writes it as the list to_json has
                    part = self.values[item] = f"{self.string(axis)}:{self.dumps(value)}"
                parts.append(part)
            text = self.variants[variant] = "{" + ",".join(parts) + "}"
        return text

    def _candidate(self, cand: Candidate) -> tuple[Any, ...]:
        """(cand, ``{"variant":...,"source":...,``, its extra fields each followed by a comma)."""
        got = self.shared.get(id(cand))
        if got is None:
            head = f'{{"variant":{self._variant(cand.variant)},"source":{self.string(cand.source)},'
            fields = "".join(
                f"{self.string(k)}:{self.string(v) if type(v) is str else self.dumps(v)},"
                for k, v in cand.extra.items()
            )
            got = self.shared[id(cand)] = (cand, head, fields)
        return got

    def _file_template(self, cand: Candidate, keys: tuple[str, ...]) -> str | None:
        """A %-template of a file's object with these fields, or None where cand.extra overrides one."""
        if not cand.extra.keys().isdisjoint(keys):
            return None
        head, fields = (text.replace("%", "%%") for text in self._candidate(cand)[1:])
        own = "".join(f"{self.string(k).replace('%', '%%')}:%s," for k in keys)
        return f'{head}{own}{fields}"compatible":%s,"reasons":[%s]}}'

    def _reasons(self, findings: tuple[Finding, ...], more: tuple[Finding, ...]) -> str:
        """The encoded reasons (Ranked.reasons): failures of both, then the rest of both; one
        string for every wheel whose variant verdict and wheel-tag finding are the same objects."""
        got = self.shared.get((id(findings), id(more)))
        if got is None:
            first = self._split(findings)
            if not more:
                text = str(first[3])
            else:
                second = self._split(more)
                text = ",".join([part for part in (first[1], second[1], first[2], second[2]) if part])
            got = self.shared[id(findings), id(more)] = (findings, more, text)
        return str(got[2])

    def _split(self, findings: tuple[Finding, ...]) -> tuple[Any, ...]:
        """(findings, encoded failures, encoded supporting facts, both), each comma-separated."""
        got = self.shared.get(id(findings))
        if got is None:
            fails = ",".join([self._reason(f.reason) for f in findings if not f.ok])
            oks = ",".join([self._reason(f.reason) for f in findings if f.ok])
            got = self.shared[id(findings)] = (
                findings,
                fails,
                oks,
                f"{fails},{oks}" if fails and oks else fails or oks,
            )
        return got

    def _reason(self, reason: str) -> str:
        text = self.reasons.get(reason)
        if text is None:
            text = self.reasons[reason] = self.string(reason)
        return text


def evaluate(candidate: Candidate, catalog: Catalog, host: HostProfile, selector: Selector) -> list[Finding]:
    """All findings for one candidate: engine rules, selector, source-specific."""
    findings = compat.check_variant(candidate.variant, catalog, host)
    findings += selector.check(candidate.variant)
    findings += candidate.findings
    return findings


class RankKey(NamedTuple):
    """How much a compatible variant is preferred on a host; smaller is better, field by field."""

    cpu_only: int  # a GPU build (0) before a CPU build (1); only compatible ones are ranked
    tensor_ops: int  # the communication library, by catalog preference
    code_kind: int  # SASS (0) before PTX (1) on the weakest GPU
    code_distance: tuple[int, ...]  # code closest to each GPU (sm_86 before sm_80 on an 8.6 GPU)
    cuda_line: int  # the newer CUDA line, by catalog preference
    target: int  # the most specific CPU target
    arch_count: int  # the thinnest arch list
    controllers: tuple[int, ...]  # controllers by catalog preference


def variant_rank(v: Variant, catalog: Catalog, host: HostProfile) -> RankKey:
    """The preference part of the sort key: it depends on the variant and host alone."""
    is_gpu = v["cuda"] != "none"
    support = compat.worst_cuda_support(v.values_of("cuda_arch"), host) if is_gpu else None
    return RankKey(
        cpu_only=0 if is_gpu else 1,
        tensor_ops=catalog.preference("tensor_ops", str(v["tensor_ops"])),
        code_kind={"sass": 0, "ptx": 1, None: 2}[support] if is_gpu else 0,
        code_distance=tuple(-a for a in compat.cuda_code_used(v.values_of("cuda_arch"), host)) if is_gpu else (),
        cuda_line=catalog.preference("cuda", str(v["cuda"])),
        target=-targets.specificity(str(v["target"])) if targets.known_target(str(v["target"])) else 0,
        arch_count=len(v.values_of("cuda_arch")),
        controllers=tuple(sorted(catalog.preference("controllers", c) for c in v.values_of("controllers"))),
    )


def rank_key(candidate: Candidate, catalog: Catalog, host: HostProfile) -> tuple[RankKey, int]:
    """Sort key of a compatible candidate: its variant's RankKey, then source order."""
    return variant_rank(candidate.variant, catalog, host), candidate.order


def resolve(host: HostProfile, candidates: Iterable[Candidate], catalog: Catalog, selector: Selector) -> Resolution:
    """Rank every candidate; the best compatible one is selected.

    Compatible candidates sort by their variant's RankKey, then ``order``;
    incompatible ones after them, near misses first (admitted by the
    selector, fewest failed rules), then as listed. The rules run once per
    distinct variant (``compat.check_variant`` shares their parts through a
    memo) and a candidate's files share that verdict, adding only their own
    findings (a wheel tag).
    """
    memo: dict[Any, tuple[Finding, ...]] = {}
    keys: dict[Variant, RankKey] = {}
    good: list[tuple[RankKey, int, int, Ranked]] = []
    bad: list[tuple[int, Ranked]] = []  # sort key: excluded, failed rules, position, as one integer
    listed = 0
    for cand in candidates:
        chosen = selector.check(cand.variant)
        findings = (*compat.check_variant(cand.variant, catalog, host, memo), *chosen, *cand.findings)
        misses = sum(1 for f in findings if not f.ok)
        excluded = 0 if compat.compatible(chosen) else 1 << 62
        if not cand.files:
            if misses:
                bad.append((excluded + (misses << 40) + listed, Ranked(cand, False, findings)))
            else:
                good.append(
                    (_rank(cand.variant, keys, catalog, host), cand.order, listed, Ranked(cand, True, findings))
                )
            listed += 1
            continue
        for file in cand.files:
            own = misses + sum(1 for f in file.findings if not f.ok) if file.findings else misses
            if own:
                bad.append((excluded + (own << 40) + file.position, Ranked(cand, False, findings, file)))
            else:
                key = _rank(cand.variant, keys, catalog, host)
                good.append((key, file.order, file.position, Ranked(cand, True, findings, file)))
    good.sort(key=_GOOD_KEY)
    bad.sort(key=_BAD_KEY)
    ranked = tuple([item[3] for item in good] + [item[1] for item in bad])
    notes: list[str] = []
    try:
        source = ideal_variant(host, catalog, selector)
    except Exception as exc:  # an impossible selector on this host: say so, do not crash ranking
        source = None
        notes.append(f"no source build is possible: {exc}")
    selected = ranked[0] if good else None
    warning = gpu_host_warning(host, selected, ranked, selector, catalog)
    if warning:
        notes.insert(0, warning)
    return Resolution(selected, ranked, source, selector, tuple(notes))


_GOOD_KEY = itemgetter(0, 1, 2)
_BAD_KEY = itemgetter(0)


def _rank(variant: Variant, keys: dict[Variant, RankKey], catalog: Catalog, host: HostProfile) -> RankKey:
    key = keys.get(variant)
    if key is None:
        key = keys[variant] = variant_rank(variant, catalog, host)
    return key


GPU_HOST_HOWTO = (
    "install it with the CUDA toolchain present: pip install hvd-selector -C build-policy=always-build "
    "-C selector=gpu-nvidia (recipes/cuda/ installs the toolkit)"
)


def gpu_host_warning(
    host: HostProfile,
    selected: Ranked | None,
    candidates: Iterable[Ranked],
    selector: Selector,
    catalog: Catalog,
) -> str | None:
    """The loud note when a host with NVIDIA GPUs gets no GPU build (DESIGN: never silently).

    Says why each GPU build was rejected and which GPU source build would fit.
    None when a GPU build was selected, the host has no NVIDIA GPU, or the
    selector itself asked for a CPU build.
    """
    gpus = host.nvidia_gpus()
    if not gpus or selector.wants_gpu() is False:
        return None
    if selected is not None and selected.variant["cuda"] != "none":
        return None
    names = ", ".join(sorted({f"{g.name} ({g.compute_capability})" for g in gpus}))
    why: dict[Variant, str] = {}
    for one in candidates:  # an index lists a variant once per wheel: say each variant once
        if one.variant["cuda"] != "none" and not one.compatible and one.variant not in why:
            why[one.variant] = one.reasons[0]
    rejected = "; ".join(f"{format_variant(v)}: {reason}" for v, reason in why.items()) or "no GPU build is offered"
    got = "a CPU build" if selected is not None else "no build"
    try:
        gpu = gpu_build(host, catalog, str(selector.pins["cuda"]) if "cuda" in selector.pins else None)
    except Exception:
        gpu = None
    if gpu is None:
        fit = "no GPU source build fits either (the driver's CUDA is unknown or older than every CUDA line)"
    else:
        fit = f"a GPU source build would fit: cuda={gpu[0]} cuda_arch={','.join(gpu[1])}; {GPU_HOST_HOWTO}"
    return (
        f"WARNING: this host has {len(gpus)} NVIDIA GPU(s) [{names}, driver CUDA {host.cuda_driver or 'unknown'}] "
        f"but gets {got}: no prebuilt GPU build fits. Why, per GPU build: {rejected}. {fit}"
    )


# ------------------------------------------------------------------ ideal variant
def best_target(host: HostProfile, catalog: Catalog) -> str:
    """The most specific catalog target that runs on the host."""
    runnable = [t for t in catalog.axes["target"].values if compat.check_target(t, host).ok]
    if not runnable:
        from selector_backend.errors import NothingFitsError

        where = host.cpu.microarch if host.cpu else host.machine or "unknown"
        raise NothingFitsError(f"no catalog target runs on host CPU {where}")
    return max(runnable, key=lambda t: (targets.specificity(t), -catalog.axes["target"].order(t)))


def _arch_for(cc: str, line_archs: tuple[str, ...]) -> str | None:
    """The line's arch with SASS for ``cc`` (compat.gpu_code: the closest same-major one)."""
    code = compat.gpu_code(line_archs, cc)
    return code[1] if code is not None and code[0] == "sass" else None


def gpu_build(
    host: HostProfile, catalog: Catalog, pinned_cuda: str | None = None
) -> tuple[str, tuple[str, ...]] | None:
    """(cuda line, arch list) giving every host GPU SASS, newest line first."""
    ccs = sorted({g.compute_capability for g in host.nvidia_gpus()})
    if not ccs:
        return None
    lines = (
        [pinned_cuda]
        if pinned_cuda
        else list(catalog.preferences.get("cuda", ()))
        + [c for c in catalog.cuda_lines if c not in catalog.preferences.get("cuda", ())]
    )
    for name in lines:
        line = catalog.cuda_lines.get(name)
        if line is None:
            continue
        if not compat.check_driver(line.toolkit, host.cuda_driver).ok:  # SASS only: minor-version rule
            continue
        archs = [_arch_for(cc, line.archs) for cc in ccs]
        if all(archs):
            axis = catalog.axes["cuda_arch"]
            return name, tuple(sorted({a for a in archs if a}, key=axis.order))
    return None


def ideal_variant(host: HostProfile, catalog: Catalog, selector: Selector) -> Variant:
    """What an exact source build for this host and selector would target."""
    from selector_backend.errors import InputError

    pins = dict(selector.pins)
    values: dict[str, AxisValue] = {"target": pins.get("target") or best_target(host, catalog)}
    wants_gpu = selector.wants_gpu()
    gpu = None
    if wants_gpu is not False:
        if "cuda_arch" in pins and "cuda" in pins and pins["cuda"] != "none":
            gpu = (
                str(pins["cuda"]),
                pins["cuda_arch"] if isinstance(pins["cuda_arch"], tuple) else (str(pins["cuda_arch"]),),
            )
        else:
            gpu = gpu_build(host, catalog, str(pins["cuda"]) if "cuda" in pins else None)
        if gpu is None and wants_gpu:
            raise InputError(
                "selector asks for a GPU build but no NVIDIA GPU with a usable driver is known "
                "here; set HVD_SELECTOR_GPUS and HVD_SELECTOR_CUDA_DRIVER or pin cuda and cuda_arch"
            )
    if gpu is not None:
        values["cuda"], values["cuda_arch"] = gpu
        values["tensor_ops"] = "nccl"
    else:
        values["cuda"], values["cuda_arch"] = "none", ("none",)
        options = [t for t in catalog.preferences.get("tensor_ops", catalog.axes["tensor_ops"].values) if t != "nccl"]
        usable = [
            t
            for t in options
            if all(compat.has_capability(cap, host).ok for cap in catalog.host_requirements.get(("tensor_ops", t), ()))
        ]
        values["tensor_ops"] = usable[0] if usable else options[-1]
    values.update({k: v for k, v in pins.items() if k not in ("target",)})
    if "controllers" not in values:
        values["controllers"] = _controllers_for(str(values["tensor_ops"]), catalog)
    variant = catalog.make_variant(values, fill_defaults=True)
    catalog.check(variant)
    return variant


def _controllers_for(tensor_ops: str, catalog: Catalog) -> tuple[str, ...]:
    """The smallest controller set the controller constraints accept, by preference."""
    order = list(catalog.preferences.get("controllers", catalog.axes["controllers"].values))
    rules = [c for c in catalog.constraints if "controllers" in (*c.require, *c.include, *c.forbid)]
    for ctrl in order:
        probe = catalog.make_variant({"tensor_ops": tensor_ops, "controllers": (ctrl,)}, fill_defaults=True)
        if not any(c.violated_by(probe) for c in rules):
            return (ctrl,)
    return tuple(order)
