"""User settings: one typed model (``model``), its field types (``types``), one source chain (``sources``).

``load_settings`` merges ``-C`` > ``HVD_SELECTOR_*`` > config file >
``[tool.hvd-selector]`` > default into a frozen ``Settings``; read it by
attribute (``settings.build_policy``). ``host_profile_for`` gives the
HostProfile those settings describe. The docs tables are generated from the
model (``settings.docs``). Import-light: the backend loads this on every
cold start.
"""

from __future__ import annotations

from selector_backend.settings.host_facts import apply_host_overrides, host_profile_for
from selector_backend.settings.model import ENV_PREFIX, OPTIONS, OTHER_ENV, HostFacts, Option, Settings
from selector_backend.settings.sources import config_file_candidates, env_setting, load_settings
from selector_backend.settings.types import BUILD_POLICIES

__all__ = [
    "BUILD_POLICIES",
    "ENV_PREFIX",
    "OPTIONS",
    "OTHER_ENV",
    "HostFacts",
    "Option",
    "Settings",
    "apply_host_overrides",
    "config_file_candidates",
    "env_setting",
    "host_profile_for",
    "load_settings",
]
