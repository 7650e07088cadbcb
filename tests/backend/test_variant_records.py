"""A wheel's two variant records (dist-info for installers, package copy for the import
guard) must agree, or the backend refuses the wheel before installing it (issue 12)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from selector_backend.engine import variant_json
from selector_backend.engine.catalog import load_catalog
from selector_backend.errors import IntegrityError
from selector_backend.install.build import verify_wheel_variant

V3 = "target=x86_64_v3 cuda=none cuda_arch=none tensor_ops=gloo controllers=gloo frameworks=pytorch"
V4 = V3.replace("x86_64_v3", "x86_64_v4")


def wheel(tmp: Path, dist_info: str, guard: str | None) -> Path:
    catalog = load_catalog()
    path = tmp / "hvd_selector-0.1.0-cp311-cp311-linux_x86_64.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(
            "hvd_selector-0.1.0.dist-info/variant.json", variant_json.dumps(catalog.parse_variant(dist_info), catalog)
        )
        if guard is not None:
            archive.writestr("hvd_selector/variant.json", variant_json.dumps(catalog.parse_variant(guard), catalog))
    return path


def test_agreeing_records_pass(tmp_path: Path) -> None:
    catalog = load_catalog()
    verify_wheel_variant(wheel(tmp_path, V3, V3), catalog.parse_variant(V3), catalog)


def test_disagreeing_records_are_refused(tmp_path: Path) -> None:
    """dist-info says x86_64_v3 (what the backend selected), the guard's copy says v4."""
    catalog = load_catalog()
    with pytest.raises(IntegrityError, match=r"hvd_selector/variant\.json says target=x86_64_v4.*records disagree"):
        verify_wheel_variant(wheel(tmp_path, V3, V4), catalog.parse_variant(V3), catalog)


def test_missing_guard_record_is_refused(tmp_path: Path) -> None:
    catalog = load_catalog()
    with pytest.raises(IntegrityError, match=r"has no hvd_selector/variant\.json"):
        verify_wheel_variant(wheel(tmp_path, V3, None), catalog.parse_variant(V3), catalog)
