"""The project the selector serves: its ``[tool.hvd-selector]`` table, read once, as one typed value.

The engine is generic; what makes it serve one project is this description:
which catalog holds the project's axes and prebuilt matrix, which Python
package carries the build's variant records, and how one variant is built
(the project's own PEP 517 backend, with compiler flags, config settings and
environment per axis value). hvd-selector's own ``pyproject.toml`` is the
first user; another project adds the same table to its own.

One schema: each field of ``ProjectConfig`` has its parser (``Annotated``)
and the doc string under it, which the docs table reads (``settings.docs.field_docs``,
as for the settings). The rest of the table is the user-turnable settings
(``index-url`` ...): ``settings_table`` hands them to the settings' source
chain, so ``[tool.hvd-selector]`` is read in this one place.
"""

import functools
from collections.abc import Callable, Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Annotated, Any, NamedTuple, get_type_hints

from selector_backend import PACKAGE_DIR
from selector_backend.errors import InputError, did_you_mean

TABLE = "[tool.hvd-selector]"
#: What a variant's build is handed: ``flags`` for any PEP 517 backend, ``cmake-file`` for a CMakeLists.txt
#: that reads the whole build description from one script (hvd-selector's own).
DESCRIPTIONS = ("flags", "cmake-file")
Parser = Callable[[Any, str], Any]


def _text(value: Any, where: str) -> str:
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{where} must be a non-empty string")
    return value.strip()


def _identifier(value: Any, where: str) -> str:
    text = _text(value, where)
    if not all(part.isidentifier() for part in text.split(".")):
        raise InputError(f"{where} must be a Python import name (e.g. mypackage), got {text!r}")
    return text


def _strings(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise InputError(f"{where} must be a list of strings")
    return tuple(value)


def _description(value: Any, where: str) -> str:
    text = _text(value, where)
    if text not in DESCRIPTIONS:
        raise InputError(f"{where}: {text!r} is not one of {', '.join(DESCRIPTIONS)}{did_you_mean(text, DESCRIPTIONS)}")
    return text


def _per_value(value: Any, where: str) -> Mapping[str, Mapping[str, str]]:
    """``{"axis=value" = {KEY = "text"}}``: what one axis value adds to the build (axes checked against the catalog
    when a variant is built, since the catalog is named by this same table)."""
    if not isinstance(value, dict):
        raise InputError(f'{where} must be a table of "axis=value" = {{KEY = "text"}}')
    out: dict[str, Mapping[str, str]] = {}
    for key, items in value.items():
        if "=" not in key:
            raise InputError(f'{where}: key {key!r} is not "axis=value"')
        if not isinstance(items, dict) or not all(isinstance(v, str) for v in items.values()):
            raise InputError(f'{where}."{key}" must be a table of KEY = "text"')
        out[key] = MappingProxyType(dict(items))
    return MappingProxyType(out)


class ProjectConfig(NamedTuple):
    """One project's description: what the selector's engine needs to serve it."""

    root: Path
    catalog: Annotated[str, _text] = "variants/catalog.toml"
    """the variant catalog (axes, values, constraints, preferences, prebuilt matrix), relative to pyproject.toml"""
    import_name: Annotated[str, _identifier] = ""
    """the Python package the wheel installs (default: the catalog's namespace); the build's variant.json and build_config.json are written into it, where the import guard and doctor read them"""  # noqa: E501
    build_backend: Annotated[str, _text] = "setuptools.build_meta"
    """the project's own PEP 517 backend, which compiles one variant at a time (setuptools.build_meta, scikit_build_core.build, ...)"""  # noqa: E501
    build_requires: Annotated[tuple[str, ...], _strings] = ("setuptools>=61",)
    """what that backend needs in pip's build environment for a source build"""
    build_description: Annotated[str, _description] = "flags"
    """how a variant reaches the build: flags (archspec's -march/-mtune for the target in CFLAGS and CXXFLAGS, plus the per-value tables below) or cmake-file (one CMake script holding the whole description, read by hvd-selector's own CMakeLists.txt)"""  # noqa: E501
    config_settings: Annotated[Mapping[str, Mapping[str, str]], _per_value] = MappingProxyType({})
    """per axis value, config settings handed to the build backend: "target=x86_64_v3" = {"cmake.define.USE_AVX2" = "ON"}"""  # noqa: E501
    environment: Annotated[Mapping[str, Mapping[str, str]], _per_value] = MappingProxyType({})
    """per axis value, environment variables set while the build backend runs: "target=x86_64_v3" = {MYLIB_SIMD = "avx2"}"""  # noqa: E501
    ci_paths: Annotated[tuple[str, ...], _strings] = ()
    """the paths whose change runs the generated wheels workflow on a pull request (matrix --format github's path filter); none: every pull request runs it"""  # noqa: E501
    ci_deps_prefix: Annotated[str, _text] = ""
    """where the project's manylinux recipes install dependencies inside the CI build container (each job's CMAKE_PREFIX_PATH and PATH); none: the image's own environment"""  # noqa: E501
    settings_table: Mapping[str, Any] = MappingProxyType({})
    """not a key: the table's settings (index-url ...), for the settings' source chain"""
    declared: bool = False
    """not a key: True when pyproject.toml names the catalog (a project of its own), False for the built-in default"""

    @property
    def catalog_path(self) -> Path:
        return self.root / self.catalog

    def package(self, namespace: str) -> str:
        """The import name: the configured one, else the catalog's namespace."""
        return self.import_name or namespace

    def per_value(self, table: Mapping[str, Mapping[str, str]], variant: Mapping[str, Any]) -> dict[str, str]:
        """The entries of ``table`` (config_settings or environment) whose ``axis=value`` the variant has."""
        out: dict[str, str] = {}
        for key, items in table.items():
            axis, _, value = key.partition("=")
            have = variant.get(axis)
            if value == have or (isinstance(have, tuple) and value in have):
                out.update(items)
        return out


class Key(NamedTuple):
    """One ``[tool.hvd-selector]`` key of the project description."""

    name: str  # catalog, import-name ...
    attr: str
    parse: Parser
    default: Any


def _keys() -> tuple[Key, ...]:
    hints = get_type_hints(ProjectConfig, include_extras=True)
    out = []
    for attr, hint in hints.items():
        meta = getattr(hint, "__metadata__", None)
        if meta:
            out.append(Key(attr.replace("_", "-"), attr, meta[0], ProjectConfig._field_defaults[attr]))
    return tuple(out)


PROJECT_KEYS: tuple[Key, ...] = _keys()


def read_project(root: Path, table: Mapping[str, Any], where: str = TABLE) -> ProjectConfig:
    """The description from a ``[tool.hvd-selector]`` table; keys that are not project keys are settings."""
    if not isinstance(table, Mapping):
        raise InputError(f"{where} must be a table")
    by_name = {k.name: k for k in PROJECT_KEYS}
    values: dict[str, Any] = {}
    settings: dict[str, Any] = {}
    for name, raw in table.items():
        key = by_name.get(name)
        if key is None:
            settings[name] = raw
        else:
            values[key.attr] = key.parse(raw, f"{where} {name}")
    declared = "catalog" in values
    if not declared and values:
        first = next(k.name for k in PROJECT_KEYS if k.attr in values)
        raise InputError(
            f"{where}: {first} describes a project, so the table must also name its catalog (catalog = ...)"
        )
    project = ProjectConfig(root=root, settings_table=MappingProxyType(settings), declared=declared, **values)
    if declared and not project.catalog_path.is_file():
        raise InputError(f"{where} catalog: {project.catalog_path} is not a file")
    return project


def read_pyproject(pyproject: Path) -> ProjectConfig:
    """The description in ``pyproject``'s ``[tool.hvd-selector]`` (absent: an undeclared, empty one)."""
    from selector_backend.files.tomlfile import load_toml_remembered

    tool = load_toml_remembered(pyproject).data.get("tool", {})  # read on every start, as the catalog is
    table = tool.get("hvd-selector", {}) if isinstance(tool, dict) else {}
    return read_project(pyproject.parent, table, f"{pyproject} {TABLE}")


def load_project(root: Path | None = None) -> ProjectConfig:
    """The project whose source tree is ``root`` (default: the current directory, where pip runs the hooks).

    A ``pyproject.toml`` that names a catalog is a project of its own; otherwise the project is the one this
    ``selector_backend`` belongs to: its source checkout's table, or, in an installed copy, the catalog installed
    beside it. The table's settings keys stay with ``root``'s table either way.
    """
    return _load_project((root or Path.cwd()).resolve())


@functools.lru_cache(maxsize=8)
def _load_project(root: Path) -> ProjectConfig:
    pyproject = root / "pyproject.toml"
    here = read_pyproject(pyproject) if pyproject.is_file() else None
    if here is not None and here.declared:
        return here
    own = own_project()
    return own._replace(settings_table=here.settings_table if here is not None else MappingProxyType({}))


@functools.lru_cache(maxsize=1)
def own_project() -> ProjectConfig:
    """The project this copy of the engine came with: the checkout's table, or the installed catalog's defaults."""
    checkout = PACKAGE_DIR.parent
    pyproject = checkout / "pyproject.toml"
    if pyproject.is_file():
        project = read_pyproject(pyproject)
        if project.declared:
            return project._replace(settings_table=MappingProxyType({}))
    installed = PACKAGE_DIR / "variants" / "catalog.toml"
    if installed.is_file():
        return ProjectConfig(root=PACKAGE_DIR, declared=False)
    raise InputError(
        f"no project: {Path.cwd() / 'pyproject.toml'} names no catalog ({TABLE} catalog = ...) and no catalog is "
        f"installed beside {PACKAGE_DIR}; run from the project's source tree or pass --catalog FILE"
    )
