"""User settings: one typed model (``model``), its field types (``types``), one source chain (``sources``).

``load_settings`` merges ``-C`` > ``HVD_SELECTOR_*`` > config file >
``[tool.hvd-selector]`` > default into a frozen ``Settings``; read it by
attribute (``settings.build_policy``). ``apply_host_overrides`` lays the
user's host facts over a HostProfile; detection sits above settings and
imports them (``detect.host_profile_for``), never the other way. The docs
tables are generated from the model (``settings.docs``).
"""

from __future__ import annotations

from selector_backend.settings.host_facts import apply_host_overrides
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
    "load_settings",
]
