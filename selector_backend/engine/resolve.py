"""Ranked resolution: every candidate, whether it runs here and why, best first.

The shape follows packaging.tags: small pure functions, and one sort key that
reads like the preference list it encodes. ``ideal_variant`` answers "what
would a source build target" from the same rules.
"""

from collections.abc import Iterable, Iterator, Mapping
from operator import itemgetter
from types import MappingProxyType
from typing import Any, NamedTuple

from selector_backend.engine import compat, targets
from selector_backend.engine.catalog import Catalog
from selector_backend.engine.compat import Finding
from selector_backend.engine.host import HostProfile
from selector_backend.engine.policy import Selector
from selector_backend.engine.variant import AxisValue, Variant, format_variant
from selector_backend.files.safeparse import only_chars


class CandidateFile(NamedTuple):
    """One file of a candidate that comes as several (an index lists a variant once per wheel).

    It stands for the candidate ``Candidate(variant, source, {**extra,
    **candidate.extra}, candidate.findings + findings, order)``; the variant's
    verdict is reached once for all its files. ``position`` is where the file
    was listed: incompatible ones keep that order.
    """

    filename: str
    url: str
    sha256: str
    findings: tuple[Finding, ...]
    order: int
    position: int

    @property
    def extra(self) -> dict[str, str]:
        """The file's fields in the candidate's JSON."""
        return {"filename": self.filename, "url": self.url, "sha256": self.sha256}


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
        return _reasons(self.findings)

    def __repr__(self) -> str:
        return f"Ranked({self.candidate!r}, {self.compatible!r}, {self.findings!r})"

    def to_json(self, variant_json: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The contract shape; ``variant_json`` may pass the variant's JSON already built."""
        return _entry_json(self.candidate, self.compatible, self.reasons, variant_json)


class RankedCandidate:
    """A candidate with its verdict and, for one that comes as files, its files ranked.

    ``findings`` are the variant's (engine rules, selector, the candidate's
    own); ``files`` are ranked among themselves, the ``fitting`` ones (whose
    own findings pass as well) first. ``compatible``: the variant fits and,
    for a candidate with files, at least one file does. This is what
    ``resolve --json`` lists: a variant once, its wheels under it.
    """

    __slots__ = ("candidate", "compatible", "excluded", "files", "findings", "fitting", "rank_key")

    def __init__(
        self,
        candidate: Candidate,
        compatible: bool,
        findings: tuple[Finding, ...],
        files: tuple[CandidateFile, ...] = (),
        fitting: int = 0,
        rank_key: "RankKey | None" = None,
        excluded: bool = False,
    ) -> None:
        self.candidate = candidate
        self.compatible = compatible
        self.findings = findings
        self.files = files
        self.fitting = fitting
        self.rank_key = rank_key  # a compatible one's preference (variant_rank)
        self.excluded = excluded  # the selector rules its variant out

    @property
    def variant(self) -> Variant:
        return self.candidate.variant

    @property
    def reasons(self) -> tuple[str, ...]:
        """The variant's reasons, failures first."""
        return _reasons(self.findings)

    def first_failure(self) -> str | None:
        """Why it does not fit: the variant's first failure, else its best file's."""
        for findings in (self.findings, *(f.findings for f in self.files[:1])):
            for finding in findings:
                if not finding.ok:
                    return finding.reason
        return None

    def ranked_files(self) -> Iterator[Ranked]:
        """Each file as the candidate it stands for, in rank order."""
        for number, file in enumerate(self.files):
            yield Ranked(self.candidate, self.compatible and number < self.fitting, self.findings, file)

    def to_json(self, variant_json: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """The contract shape, its files under it; ``variant_json`` may pass the variant's JSON already built."""
        out = _entry_json(self.candidate, self.compatible, self.reasons, variant_json)
        if self.candidate.files:
            out["files"] = [
                {
                    **file.extra,
                    "compatible": self.compatible and number < self.fitting,
                    "reasons": list(_reasons(file.findings)),
                }
                for number, file in enumerate(self.files)
            ]
        return out


def _entry_json(
    candidate: Candidate, compatible: bool, reasons: tuple[str, ...], variant_json: Mapping[str, Any] | None
) -> dict[str, Any]:
    """One candidate's object in ``resolve --json``: variant, source, its own fields, verdict, reasons."""
    return {
        "variant": candidate.variant.to_json() if variant_json is None else variant_json,
        "source": candidate.source,
        **dict(candidate.extra),
        "compatible": compatible,
        "reasons": list(reasons),
    }


def _reasons(findings: tuple[Finding, ...]) -> tuple[str, ...]:
    return tuple([f.reason for f in findings if not f.ok] + [f.reason for f in findings if f.ok])


class Resolution:
    """Every candidate ranked (``ranked``), the selected one, and the source build (or, where none
    fits, ``source_build_error``, the error that says why).

    ``candidates`` is the same ranking one entry per installable thing (a
    catalog entry, a wheel), built only when asked for: an index lists each
    variant once per wheel, and a ``resolve --json`` needs only ``ranked``.
    """

    __slots__ = ("_candidates", "notes", "ranked", "selected", "selector", "source_build", "source_build_error")

    def __init__(
        self,
        selected: Ranked | None,
        ranked: tuple[RankedCandidate, ...],
        source_build: Variant | None,
        selector: Selector,
        notes: tuple[str, ...] = (),
        source_build_error: Exception | None = None,
    ) -> None:
        self.selected = selected
        self.ranked = ranked
        self.source_build = source_build
        self.selector = selector
        self.notes = notes
        self.source_build_error = source_build_error
        self._candidates: tuple[Ranked, ...] | None = None

    def __repr__(self) -> str:
        return f"Resolution(selected={self.selected!r}, {len(self.ranked)} ranked, selector={self.selector})"

    @property
    def candidates(self) -> tuple[Ranked, ...]:
        """One Ranked per catalog entry or wheel: compatible ones by preference, then the near misses.

        A wheel ranks as if its variant were listed once per wheel: compatible
        ones by variant preference, then ``order``, then position; the rest by
        (excluded by the selector, failed rules, position).
        """
        if self._candidates is None:
            self._candidates = _flatten(self)
        return self._candidates

    def to_json(self) -> dict[str, Any]:
        """The contract: the selected wheel in full, then every candidate once with its files under it."""
        shared: dict[Variant, dict[str, Any]] = {}
        return {
            "selected": None if self.selected is None else self.selected.to_json(),
            "candidates": [
                c.to_json(shared.get(c.variant) or shared.setdefault(c.variant, c.variant.to_json()))
                for c in self.ranked
            ],
            "source_build": None
            if self.source_build is None
            else {"variant": self.source_build.to_json(), "spec": format_variant(self.source_build)},
            "selector": str(self.selector),
            "notes": list(self.notes),
        }

    def to_json_text(self) -> str:
        """``json.dumps(self.to_json(), separators=(",", ":"))``, built from parts candidates share.

        Thousands of wheels share a few thousand variants, one source, a
        handful of wheel-tag findings and reason strings: each of those is
        encoded once, and a wheel adds only its own fields.
        """
        return _JsonText().resolution(self)


def _flatten(res: Resolution) -> tuple[Ranked, ...]:
    """Resolution.candidates from the ranked candidates (the rule is in its docstring)."""
    good: list[tuple[Any, ...]] = []
    bad: list[tuple[int, Ranked]] = []
    shared: dict[int, int] = {}
    listed = 0
    for group in res.ranked:
        cand = group.candidate
        own = _failures(group.findings)
        if not cand.files:
            if group.compatible:
                good.append((group.rank_key, cand.order, listed, Ranked(cand, True, group.findings)))
            else:
                bad.append((_near_miss_key(group.excluded, own, listed), Ranked(cand, False, group.findings)))
            listed += 1
            continue
        for number, file in enumerate(group.files):
            if group.compatible and number < group.fitting:
                good.append((group.rank_key, file.order, file.position, Ranked(cand, True, group.findings, file)))
                continue
            key = _near_miss_key(group.excluded, own + _failures(file.findings, shared), file.position)
            bad.append((key, Ranked(cand, False, group.findings, file)))
    good.sort(key=_GOOD_KEY)
    bad.sort(key=_BAD_KEY)
    ranked = [item[3] for item in good] + [item[1] for item in bad]
    if res.selected is not None:
        ranked[0] = res.selected  # the same object: `selected is candidates[0]`
    return tuple(ranked)


class _JsonText:
    """Resolution.to_json_text's encoder: what candidates share is encoded once.

    Shared things are memoised by identity, each memo entry holding the
    object so its id stays taken. A wheel costs one f-string: its three
    fields (as they are where none of its candidate's wheels needs escaping),
    its verdict and the reasons of its wheel tag looked up.
    A variant's JSON is put together from its axis values' encoded forms,
    and each reason string is encoded once however many verdicts share it.
    """

    def __init__(self) -> None:
        import json

        self.dumps = json.JSONEncoder(separators=(",", ":")).encode  # one encoder: json.dumps builds one a call
        self.string = json.encoder.encode_basestring_ascii  # what json.dumps uses for a str
        self.variants: dict[Variant, str] = {}
        self.values: dict[tuple[str, AxisValue], str] = {}  # (axis, value) -> '"axis":value'
        self.reasons: dict[str, str] = {}  # reason -> its JSON string
        self.shared: dict[Any, tuple[Any, ...]] = {}
        self.verdicts: dict[tuple[Finding, ...], tuple[Any, ...]] = {}  # findings -> _split's answer
        self.tails: dict[tuple[bool, int], str] = {}  # (fits, id(findings)) -> a file's verdict and reasons

    def resolution(self, res: Resolution) -> str:
        build = None
        if res.source_build is not None:
            build = {"variant": res.source_build.to_json(), "spec": format_variant(res.source_build)}
        tail = self.dumps({"source_build": build, "selector": str(res.selector), "notes": list(res.notes)})
        selected = "null" if res.selected is None else self.ranked(res.selected)
        candidates = ",".join([self.candidate(c) for c in res.ranked])
        return f'{{"selected":{selected},"candidates":[{candidates}],{tail[1:]}'

    def ranked(self, r: Ranked) -> str:
        """One Ranked (the selected wheel) in full."""
        if r._file is not None:
            return str(self.dumps(r.to_json()))
        head, fields = self._head(r._candidate)[1:]
        flag = "true" if r.compatible else "false"
        return f'{head}{fields}"compatible":{flag},"reasons":[{self._split(r._findings)[3]}]}}'

    def candidate(self, c: RankedCandidate) -> str:
        head, fields = self._head(c.candidate)[1:]
        flag = "true" if c.compatible else "false"
        text = f'{head}{fields}"compatible":{flag},"reasons":[{self._split(c.findings)[3]}]'
        if not c.candidate.files:
            return text + "}"
        tails = self.tails
        fitting = c.fitting if c.compatible else 0
        plain = only_chars("".join([field for file in c.files for field in file[:3]]), _PLAIN_JSON)
        string = self.string
        files = []
        for number, (filename, url, sha256, findings, _, _) in enumerate(c.files):
            tail = tails.get((number < fitting, id(findings)))
            if tail is None:
                tail = self._tail(number < fitting, findings)
            if plain:  # their JSON is themselves in quotes
                files.append(f'{{"filename":"{filename}","url":"{url}","sha256":"{sha256}",{tail}')
            else:
                files.append(f'{{"filename":{string(filename)},"url":{string(url)},"sha256":{string(sha256)},{tail}')
        return f'{text},"files":[{",".join(files)}]}}'

    def _tail(self, fits: bool, findings: tuple[Finding, ...]) -> str:
        """A file's ``"compatible":...,"reasons":[...]}``: one per verdict and findings tuple."""
        text = f'"compatible":{"true" if fits else "false"},"reasons":[{self._split(findings)[3]}]}}'
        self.tails[fits, id(findings)] = text
        self.shared[id(findings), "tail"] = (findings,)  # keeps the tuple, so its id stays taken
        return text

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

    def _head(self, cand: Candidate) -> tuple[Any, ...]:
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

    def _split(self, findings: tuple[Finding, ...]) -> tuple[Any, ...]:
        """(findings, encoded failures, encoded supporting facts, both), each comma-separated; looked up
        by identity, then by content (candidates of different variants often reach the same verdict)."""
        got = self.shared.get(id(findings))
        if got is None:
            got = self.verdicts.get(findings)
            if got is None:
                fails = ",".join([self._reason(f.reason) for f in findings if not f.ok])
                oks = ",".join([self._reason(f.reason) for f in findings if f.ok])
                got = self.verdicts[findings] = (
                    findings,
                    fails,
                    oks,
                    f"{fails},{oks}" if fails and oks else fails or oks,
                )
            self.shared[id(findings)] = (findings, *got[1:])
        return got

    def _reason(self, reason: str) -> str:
        text = self.reasons.get(reason)
        if text is None:
            text = self.reasons[reason] = self.string(reason)
        return text


#: What JSON writes as itself inside quotes (printable ASCII but quote and backslash): strings made only of
#: these need no pass through the encoder.
_PLAIN_JSON = bytes(c for c in range(0x20, 0x7F) if c not in b'"\\')


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
    #: a project's own axes (its catalog's others, in catalog order), each by its [preferences]
    project_axes: tuple[tuple[int, ...], ...] = ()


#: The axes the fields above rank, and hvd-selector's frameworks (a choice of the user's, never ranked).
RANKED_AXES = frozenset({"target", "cuda", "cuda_arch", "tensor_ops", "controllers", "frameworks"})


def variant_rank(v: Variant, catalog: Catalog, host: HostProfile) -> RankKey:
    """The preference part of the sort key: it depends on the variant and host alone."""
    is_gpu = v.get("cuda", "none") != "none"
    support = compat.worst_cuda_support(v.values_of("cuda_arch"), host) if is_gpu else None
    return RankKey(
        cpu_only=0 if is_gpu else 1,
        tensor_ops=catalog.preference("tensor_ops", str(v.get("tensor_ops", ""))),
        code_kind={"sass": 0, "ptx": 1, None: 2}[support] if is_gpu else 0,
        code_distance=tuple(-a for a in compat.cuda_code_used(v.values_of("cuda_arch"), host)) if is_gpu else (),
        cuda_line=catalog.preference("cuda", str(v.get("cuda", ""))),
        target=-targets.specificity(str(v["target"])) if targets.known_target(str(v["target"])) else 0,
        arch_count=len(v.values_of("cuda_arch")),
        controllers=tuple(sorted(catalog.preference("controllers", c) for c in v.values_of("controllers"))),
        project_axes=tuple(
            tuple(sorted(catalog.preference(axis, value) for value in v.values_of(axis)))
            for axis in catalog.axes
            if axis not in RANKED_AXES
        ),
    )


def resolve(host: HostProfile, candidates: Iterable[Candidate], catalog: Catalog, selector: Selector) -> Resolution:
    """Rank every candidate; the best compatible one (or its best file) is selected.

    Compatible candidates sort by their variant's RankKey, then ``order``
    (a candidate with files: its best fitting file's order, then position);
    incompatible ones after them, near misses first (admitted by the
    selector, fewest failed rules, a file's own failures counted), then as
    listed. The rules run once per distinct variant (``compat.check_variant``
    shares their parts through a memo); a candidate's files share that
    verdict and add only their own findings (a wheel tag), counted once per
    distinct findings tuple. Per-file ranking (``Resolution.candidates``) is
    derived only when asked for.
    """
    memo: dict[Any, tuple[Finding, ...]] = {}
    keys: dict[Variant, RankKey] = {}
    shared: dict[int, int] = {}  # _failures' memo: a wheel tag's findings are shared by its wheels
    good: list[tuple[RankKey, int, int, RankedCandidate]] = []
    bad: list[tuple[int, RankedCandidate]] = []  # sort key: excluded, failed rules, position, as one integer
    listed = 0
    for cand in candidates:
        chosen = selector.check(cand.variant)
        findings = (*compat.check_variant(cand.variant, catalog, host, memo), *chosen, *cand.findings)
        misses = _failures(findings)
        excluded = not compat.compatible(chosen)
        if not cand.files:
            if misses:
                group = RankedCandidate(cand, False, findings, excluded=excluded)
                bad.append((_near_miss_key(excluded, misses, listed), group))
            else:
                key = _rank(cand.variant, keys, catalog, host)
                good.append((key, cand.order, listed, RankedCandidate(cand, True, findings, rank_key=key)))
            listed += 1
            continue
        fit: list[tuple[int, int, CandidateFile]] = []  # (order, position, file)
        unfit: list[tuple[int, int, CandidateFile]] = []  # (own failures, position, file)
        for file in cand.files:
            own = _failures(file.findings, shared)
            if own or misses:
                unfit.append((misses + own, file.position, file))
            else:
                fit.append((file.order, file.position, file))
        fit.sort(key=_FILE_KEY)
        unfit.sort(key=_FILE_KEY)
        files = tuple([item[2] for item in fit] + [item[2] for item in unfit])
        if fit:
            key = _rank(cand.variant, keys, catalog, host)
            good.append((key, fit[0][0], fit[0][1], RankedCandidate(cand, True, findings, files, len(fit), key)))
        else:
            group = RankedCandidate(cand, False, findings, files, excluded=excluded)
            bad.append((_near_miss_key(excluded, unfit[0][0], unfit[0][1]), group))
    good.sort(key=_GOOD_KEY)
    bad.sort(key=_BAD_KEY)
    ranked = tuple([item[3] for item in good] + [item[1] for item in bad])
    notes: list[str] = []
    source, source_error = None, None
    try:
        source = ideal_variant(host, catalog, selector)
    except Exception as exc:  # an impossible selector on this host: say so, do not crash ranking
        source_error = exc
        notes.append(f"no source build is possible: {exc}")
    selected = None
    if good:
        best = ranked[0]
        selected = next(best.ranked_files()) if best.files else Ranked(best.candidate, True, best.findings)
    warning = gpu_host_warning(host, selected, ranked, selector, catalog)
    if warning:
        notes.insert(0, warning)
    return Resolution(selected, ranked, source, selector, tuple(notes), source_error)


_GOOD_KEY = itemgetter(0, 1, 2)
_BAD_KEY = itemgetter(0)
_OK = itemgetter(0)  # Finding.ok, counted in C


def _failures(findings: tuple[Finding, ...], shared: dict[int, int] | None = None) -> int:
    """How many findings fail; with ``shared``, counted once per findings tuple (by identity: the
    tuples stay alive in the candidates that hold them)."""
    if shared is None:
        return len(findings) - sum(map(_OK, findings))
    count = shared.get(id(findings))
    if count is None:
        count = shared[id(findings)] = len(findings) - sum(map(_OK, findings))
    return count


def _near_miss_key(excluded: bool, failures: int, position: int) -> int:
    """Sort key of what does not fit, as one integer: admitted by the selector first, then the
    fewest failed rules, then as listed."""
    return (excluded << 62) + (failures << 40) + position


_FILE_KEY = itemgetter(0, 1)


def _rank(variant: Variant, keys: dict[Variant, RankKey], catalog: Catalog, host: HostProfile) -> RankKey:
    key = keys.get(variant)
    if key is None:
        key = keys[variant] = variant_rank(variant, catalog, host)
    return key


def gpu_host_warning(
    host: HostProfile,
    selected: Ranked | None,
    candidates: Iterable[RankedCandidate],
    selector: Selector,
    catalog: Catalog,
) -> str | None:
    """The loud note when a host with NVIDIA GPUs gets no GPU build (DESIGN: never silently).

    Says why the closest GPU build was rejected (how many were, and where to
    see each) and which GPU source build would fit; a few hundred characters
    however many GPU builds an index offers. None when a GPU build was
    selected, the host has no NVIDIA GPU, or the selector itself asked for a
    CPU build.
    """
    gpus = host.nvidia_gpus()
    if not gpus or selector.wants_gpu() is False:
        return None
    if selected is not None and selected.variant.get("cuda", "none") != "none":
        return None
    rejected: dict[Variant, str] = {}  # ranked order: the closest miss first
    for one in candidates:  # a variant may come from several sources or releases: count it once
        if one.variant.get("cuda", "none") != "none" and not one.compatible and one.variant not in rejected:
            rejected[one.variant] = one.first_failure() or ""
    if rejected:
        (closest, reason), *_ = rejected.items()
        more = f"; {len(rejected) - 1} more: hvd-selector resolve --explain" if len(rejected) > 1 else ""
        why = (
            f"none of the {len(rejected)} prebuilt GPU builds fits (closest: cuda={closest['cuda']} "
            f"cuda_arch={','.join(closest.values_of('cuda_arch'))}: {reason}{more})"
        )
    else:
        why = "no prebuilt GPU build is offered"
    got = "a CPU build" if selected is not None else "no build"
    try:
        gpu = gpu_build(host, catalog, str(selector.pins["cuda"]) if "cuda" in selector.pins else None)
    except Exception:
        gpu = None
    if gpu is None:
        fit = "No GPU source build fits either (the driver's CUDA is unknown or older than every CUDA line)."
    else:
        fit = (
            f"A GPU source build would fit: cuda={gpu[0]} cuda_arch={','.join(gpu[1])}; pip install builds it "
            f"where the CUDA {gpu[0]} toolkit (nvcc) and a C++ toolchain are installed."
        )
    return (
        f"WARNING: this host has {len(gpus)} NVIDIA GPU(s) [{host.describe_nvidia_gpus(capability=True)}, "
        f"driver CUDA {host.cuda_driver or 'unknown'}] but gets {got}: {why}. {fit}"
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
    wants_gpu = selector.wants_gpu() if "cuda" in catalog.axes else False
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
        if "tensor_ops" in catalog.axes:
            values["tensor_ops"] = "nccl"
    elif "cuda" in catalog.axes:
        values["cuda"], values["cuda_arch"] = "none", ("none",)
    if gpu is None and "tensor_ops" in catalog.axes:
        options = [t for t in catalog.preferences.get("tensor_ops", catalog.axes["tensor_ops"].values) if t != "nccl"]
        usable = [
            t
            for t in options
            if all(compat.has_capability(cap, host).ok for cap in catalog.host_requirements.get(("tensor_ops", t), ()))
        ]
        values["tensor_ops"] = usable[0] if usable else options[-1]
    values.update({k: v for k, v in pins.items() if k not in ("target",)})
    if "controllers" not in values and "controllers" in catalog.axes and "tensor_ops" in values:
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
