"""``monarch.config``: Monarch's configuration functions, over the registry of
``monarch_config`` that every package declares its settings in.

A setting's value comes from the first layer that has one: what
``configure`` set in this process (processes spawned afterwards inherit it),
its environment variables, its default. The configuration reference of
the documentation lists every setting.

Examples:
    >>> from monarch.config import configured, get_global_config
    >>> with configured(cleanup_timeout="10s") as config:
    ...     config["cleanup_timeout"]
    '10s'
    >>> get_global_config()["cleanup_timeout"]
    '3s'
"""

from monarch_config import (
    Encoding,
    clear_runtime_config,
    configure,
    configured,
    get_global_config,
    get_runtime_config,
    parametrize_config,
    parametrize_config_pointwise,
)

# Monarch's module has it too (not in its __all__), for default_transport
from monarch_transport import ChannelTransport as ChannelTransport

__all__ = [
    "Encoding",
    "clear_runtime_config",
    "configure",
    "configured",
    "get_global_config",
    "get_runtime_config",
    "parametrize_config",
    "parametrize_config_pointwise",
]
