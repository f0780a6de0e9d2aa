"""Settings of Monarch in Python: one registry that every package declares its
settings in, each with its kind, default, environment variables and meaning.

Users change settings with ``configure`` (``monarch.config.configure`` or
``monarch.configure``, as in Monarch) or through the environment; packages
read them with ``Setting.get()``. The configuration reference page of the
docs is generated from the registry.

Examples:
    >>> from monarch_config import Duration, declare, configured
    >>> wait = declare("example_wait", Duration(), 5.0, doc="An example.", owner="docs")
    >>> with configured(example_wait="2m") as config:
    ...     config["example_wait"], wait.get()
    ('2m', 120.0)
    >>> wait.get()
    5.0
"""

from . import _monarch  # noqa: F401  (Monarch's settings this runtime has no mechanism for)
from ._kinds import (
    Bool,
    Choice,
    Duration,
    Float,
    Int,
    Kind,
    Size,
    Text,
    format_duration,
    parse_duration,
)
from ._reference import reference_markdown
from ._registry import (
    ENTRY_POINT_GROUP,
    Setting,
    clear_runtime_config,
    configure,
    configured,
    declare,
    generation,
    get_global_config,
    get_runtime_config,
    inherit,
    runtime_values,
    settings,
)
from ._testing import Encoding, parametrize_config, parametrize_config_pointwise

__all__ = [
    "ENTRY_POINT_GROUP",
    "Bool",
    "Choice",
    "Duration",
    "Encoding",
    "Float",
    "Int",
    "Kind",
    "Setting",
    "Size",
    "Text",
    "clear_runtime_config",
    "configure",
    "configured",
    "declare",
    "format_duration",
    "generation",
    "get_global_config",
    "get_runtime_config",
    "inherit",
    "parametrize_config",
    "parametrize_config_pointwise",
    "parse_duration",
    "reference_markdown",
    "runtime_values",
    "settings",
]
