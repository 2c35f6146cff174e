"""Plugin discovery: one pluggy manager over the `anarchon` entry-point group."""

from __future__ import annotations

import os
import threading
from typing import Any, cast
from urllib.parse import urlsplit

import pluggy

from . import hookspecs
from ._errors import BackendNotFound
from .backends import MemoryBackend, MemoryClaimBackend, redact_url

__all__ = ["backend_classes", "backend_for_url", "plugin_manager"]

_lock = threading.Lock()
_manager: pluggy.PluginManager | None = None


class _Builtin:
    """The core's own plugin: the in-process backends."""

    @hookspecs.hookimpl
    def anarchon_backends(self) -> list[type[Any]]:
        return [MemoryBackend, MemoryClaimBackend]


def plugin_manager() -> pluggy.PluginManager:
    """Return the process-wide plugin manager, loading entry points on first use."""
    global _manager
    with _lock:
        if _manager is None:
            pm = pluggy.PluginManager("anarchon")
            pm.add_hookspecs(hookspecs)
            pm.register(_Builtin(), name="anarchon-builtin")
            if not os.environ.get("ANARCHON_DISABLE_PLUGIN_AUTOLOAD"):
                pm.load_setuptools_entrypoints("anarchon")
            _manager = pm
        return _manager


def backend_classes() -> list[type[Any]]:
    """Every backend class that an installed plugin provides."""
    pm = plugin_manager()
    found: list[type[Any]] = []
    for impl in pm.hook.anarchon_backends.get_hookimpls():
        classes = cast(list[type[Any]], impl.function() or [])
        for cls in classes:
            if not getattr(cls, "url_schemes", None) or not callable(getattr(cls, "from_url", None)):
                raise TypeError(
                    f"plugin {impl.plugin_name!r}, hook anarchon_backends: {cls!r} lacks "
                    "`url_schemes` or `from_url`"
                )
            if cls not in found:
                found.append(cls)
    return found


def backend_for_url(url: str) -> Any:
    """Build the backend whose `url_schemes` include `url`'s scheme."""
    scheme = urlsplit(url).scheme.lower()
    classes = backend_classes()
    for cls in classes:
        if scheme in cls.url_schemes:
            return cls.from_url(url)
    known = sorted({s for cls in classes for s in cls.url_schemes})
    raise BackendNotFound(
        f"no installed backend handles {scheme or '(no scheme)'!r} in {redact_url(url)!r}; "
        f"installed schemes: {', '.join(known)}. Install a driver, e.g. `pip install anarchon-redis`"
    )
