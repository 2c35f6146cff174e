"""Plugin discovery: one pluggy manager over the `anarchon` entry-point group.

A plugin that fails (its entry point cannot be imported, a hook raises, its scheme map names a class
that is not there) fails alone: it is reported once, as a warning on the `anarchon` logger and in
`plugin_errors()`, and every other backend still resolves.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import types
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

import pluggy

from . import hookspecs
from ._entrypoints import entry_points
from ._errors import BackendNotFound
from ._process import PROCESS
from .backends import redact_url

__all__ = ["PluginError", "backend_classes", "backend_for_url", "each_plugin", "plugin_errors",
           "plugin_manager", "url_of"]

logger = logging.getLogger("anarchon")

_DISABLE = "ANARCHON_DISABLE_PLUGIN_AUTOLOAD"


@dataclass(frozen=True, slots=True)
class PluginError:
    """A plugin that failed: its backends are unavailable, every other one still works."""

    plugin: str
    """The plugin's name (its entry point's name)."""
    distribution: str | None
    """The installed distribution that declares it, when known."""
    where: str
    """What failed: its entry point, a hook, or a scheme's class."""
    error: str

    def __str__(self) -> str:
        dist = f" from distribution {self.distribution!r}" if self.distribution else ""
        fix = f"fix or uninstall {self.distribution!r}" if self.distribution else "fix or unregister it"
        return (
            f"anarchon plugin {self.plugin!r}{dist} failed ({self.where}): {self.error}. Its backends are "
            f"unavailable; every other backend still works. To fix: {fix}, or set {_DISABLE}=1 to load "
            "no plugin automatically"
        )


def plugin_errors() -> list[PluginError]:
    """The plugins that failed so far in this process, each once."""
    with PROCESS.errors_lock:
        return list(PROCESS.plugin_errors.values())


def _failed(plugin: str, distribution: str | None, where: str, exc: BaseException) -> None:
    """Record a plugin's failure, and report it the first time."""
    error = PluginError(plugin, distribution, where, f"{type(exc).__name__}: {exc}")
    with PROCESS.errors_lock:
        if (plugin, where) in PROCESS.plugin_errors:
            return
        PROCESS.plugin_errors[(plugin, where)] = error
    logger.warning("%s", error)


def _dist(plugin: str) -> str | None:
    """The distribution `plugin` was loaded from, when it came from an entry point."""
    return PROCESS.plugin_dists.get(plugin)


def _load_entry_points(pm: pluggy.PluginManager) -> None:
    """Register every plugin of the `anarchon` entry-point group; one that cannot load is reported."""
    for ep in entry_points("anarchon"):
        if pm.get_plugin(ep.name) is not None or pm.is_blocked(ep.name):
            continue
        dist = ep.dist_name
        try:
            pm.register(ep.load(), name=ep.name)
        except Exception as exc:
            _failed(ep.name, dist, f"entry point '{ep.name} = {ep.value}' in group 'anarchon'", exc)
            continue
        if dist is not None:
            PROCESS.plugin_dists[ep.name] = dist


class _Builtin:
    """The core's own plugin: the in-process backends."""

    @hookspecs.hookimpl
    def anarchon_backends(self) -> list[type[Any]]:
        from .backends import MemoryBackend, MemoryClaimBackend

        return [MemoryBackend, MemoryClaimBackend]

    @hookspecs.hookimpl
    def anarchon_backend_schemes(self) -> dict[str, str]:
        return {"memory": "anarchon.backends:MemoryBackend",
                "memory-claim": "anarchon.backends:MemoryClaimBackend"}


class _Manager(pluggy.PluginManager):
    """pluggy's manager, counting the changes to its plugins, so a caller can cache which hooks have
    implementations and look again only after a change."""

    def __init__(self, project_name: str) -> None:
        super().__init__(project_name)
        self.generation = 0
        """Bumped by every `register`, `unregister` and `add_hookspecs`."""

    def register(self, plugin: object, name: str | None = None) -> str | None:
        try:
            return super().register(plugin, name)
        finally:
            self.generation += 1

    def unregister(self, plugin: object | None = None, name: str | None = None) -> Any | None:
        try:
            return super().unregister(plugin, name)
        finally:
            self.generation += 1

    def add_hookspecs(self, module_or_class: types.ModuleType | type) -> None:
        try:
            super().add_hookspecs(module_or_class)
        finally:
            self.generation += 1


def plugin_manager() -> pluggy.PluginManager:
    """Return the process-wide plugin manager, loading entry points on first use."""
    with PROCESS.plugins_lock:
        if PROCESS.plugin_manager is None:
            pm = _Manager("anarchon")
            pm.add_hookspecs(hookspecs)
            pm.register(_Builtin(), name="anarchon-builtin")
            if not os.environ.get(_DISABLE):
                _load_entry_points(pm)
            PROCESS.plugin_manager = pm
        return PROCESS.plugin_manager


def backend_classes() -> list[type[Any]]:
    """Every backend class that an installed plugin provides."""
    pm = plugin_manager()
    found = _provided_classes(pm)
    # A plugin may name a class only in its scheme map; listing it costs an import, as listing does anyway.
    listed = {s for cls in found for s in cls.url_schemes}
    for scheme, (plugin, path) in _scheme_paths(pm).items():
        if scheme not in listed:
            try:
                cls = _import_backend(plugin, scheme, path)
            except (ImportError, TypeError) as exc:
                _failed(plugin, _dist(plugin), f"hook anarchon_backend_schemes, scheme {scheme!r}", exc)
                continue
            listed.update(cls.url_schemes)
            if cls not in found:
                found.append(cls)
    return found


def backend_for_url(url: str) -> Any:
    """Build the backend whose `url_schemes` include `url`'s scheme."""
    backend = _build(url)
    with contextlib.suppress(TypeError):  # a backend that cannot be weakly referenced is not remembered
        PROCESS.backend_urls[backend] = url
    return backend


def url_of(backend: object) -> str | None:
    """The URL `backend_for_url` built `backend` from, if it did."""
    try:
        return PROCESS.backend_urls.get(backend)
    except TypeError:
        return None


def _build(url: str) -> Any:
    scheme = urlsplit(url).scheme.lower()
    pm = plugin_manager()
    mapped = _scheme_paths(pm)
    if scheme in mapped:
        # The one import a start-up pays for: the class that handles this scheme, not every driver.
        plugin, path = mapped[scheme]
        return _import_backend(plugin, scheme, path).from_url(url)
    # Plugins that implement only `anarchon_backends` are found as before, at the cost of importing
    # every plugin's classes.
    classes = _provided_classes(pm)
    for cls in classes:
        if scheme in cls.url_schemes:
            return cls.from_url(url)
    known = sorted(set(mapped) | {s for cls in classes for s in cls.url_schemes})
    failed = "".join(f"\n- {error}" for error in plugin_errors())
    raise BackendNotFound(
        f"no installed backend handles {scheme or '(no scheme)'!r} in {redact_url(url)!r}: "
        f"{_scheme_hint(scheme, known)} (installed schemes: {', '.join(known)})"
        + (f". Plugins that failed:{failed}" if failed else "")
    )


# The schemes of this repository's drivers, so that a missing one is named; a third party's scheme
# gets the generic hint.
_DRIVERS = {
    "anarchon-sqlite": ("sqlite",),
    "anarchon-redis": ("redis", "rediss", "unix", "valkey", "valkeys", "redis+stream", "rediss+stream",
                       "unix+stream"),
    "anarchon-postgres": ("postgresql", "postgres"),
    "anarchon-rabbitmq": ("amqp", "amqps"),
    "anarchon-nats": ("nats", "tls", "nats-kv", "nats-kv+tls"),
}


def _scheme_hint(scheme: str, installed: list[str]) -> str:
    """How to fix an unknown scheme: the installed scheme it is a typo of, or the driver to install."""
    import difflib

    close = difflib.get_close_matches(scheme, installed, n=1, cutoff=0.75)
    if close:
        return f"did you mean {close[0] + '://'!r}?"
    for dist, schemes in _DRIVERS.items():
        if scheme in schemes:
            return f"install its driver, `pip install {dist}`"
    missing = [dist for dist, schemes in _DRIVERS.items() if not set(schemes) & set(installed)]
    if missing:
        return f"check the URL, or install the driver that handles it (not installed: {', '.join(missing)})"
    return "check the URL, or install the third-party driver that handles it"


def each_plugin(pm: pluggy.PluginManager, hook: str) -> list[tuple[str, pluggy.HookCaller]]:
    """The hook `hook` as one caller per plugin that implements it, with the plugin's name, in pluggy's
    call order (the plugin registered last first, unless `tryfirst` or `trylast` says otherwise).

    Each caller is pluggy's own (`subset_hook_caller`): it passes the arguments the plugin's
    implementation takes, and runs the hook's wrappers (`@hookimpl(wrapper=True)`) around it, so a
    wrapper sees each plugin's call on its own. A plugin that raises therefore fails alone, named,
    and the other plugins still run. A hook that only wrappers implement is one caller for them all.
    """
    caller: pluggy.HookCaller | None = getattr(pm.hook, hook, None)
    if caller is None:
        return []
    impls = caller.get_hookimpls()
    plain = [impl for impl in reversed(impls) if not (impl.wrapper or impl.hookwrapper)]
    if not plain:
        return [(", ".join(impl.plugin_name for impl in impls), caller)] if impls else []
    return [(impl.plugin_name,
             pm.subset_hook_caller(hook, [other.plugin for other in plain if other is not impl]))
            for impl in plain]


def _provided_classes(pm: pluggy.PluginManager) -> list[type[Any]]:
    """The classes that the `anarchon_backends` hooks return, in registration order."""
    found: list[type[Any]] = []
    for name, call in reversed(each_plugin(pm, "anarchon_backends")):  # registration order
        try:
            classes = [cls for result in call() for cls in cast(list[type[Any]], result or [])]
        except Exception as exc:
            _failed(name, _dist(name), "hook anarchon_backends", exc)
            continue
        for cls in classes:
            if not getattr(cls, "url_schemes", None) or not callable(getattr(cls, "from_url", None)):
                _failed(name, _dist(name), "hook anarchon_backends",
                        TypeError(f"{cls!r} lacks `url_schemes` or `from_url`"))
            elif cls not in found:
                found.append(cls)
    return found


def _scheme_paths(pm: pluggy.PluginManager) -> dict[str, tuple[str, str]]:
    """Each scheme in an `anarchon_backend_schemes` result, with the plugin's name and the class's path.

    When two plugins map one scheme, the first registered wins, as among `anarchon_backends` classes.
    """
    found: dict[str, tuple[str, str]] = {}
    for name, call in reversed(each_plugin(pm, "anarchon_backend_schemes")):  # registration order
        mapping: dict[str, str] = {}
        try:
            for result in call():
                if not isinstance(result, dict):
                    raise TypeError(f"returned {result!r}, not a dict of URL scheme to 'module:ClassName'")
                mapping.update(cast(dict[str, str], result))
        except Exception as exc:
            _failed(name, _dist(name), "hook anarchon_backend_schemes", exc)
            continue
        for scheme, path in mapping.items():
            found.setdefault(str(scheme).lower(), (name, path))
    return found


def _import_backend(plugin: str, scheme: str, path: str) -> type[Any]:
    """Import the class at `path` ("module:ClassName") that `plugin` maps `scheme` to, and check it."""
    where = f"plugin {plugin!r}, hook anarchon_backend_schemes, scheme {scheme!r}"
    module_name, _, qualname = path.partition(":") if isinstance(path, str) else ("", "", "")
    if not module_name or not qualname:
        raise TypeError(f"{where}: {path!r} is not an import path of the form 'package.module:ClassName'")
    try:
        value: Any = importlib.import_module(module_name)
        for attr in qualname.split("."):
            value = getattr(value, attr)
    except (ImportError, AttributeError) as exc:
        raise ImportError(f"{where}: cannot import {path!r}: {exc}") from exc
    if not isinstance(value, type):
        raise TypeError(f"{where}: {path!r} is {value!r}, not a backend class")
    schemes = getattr(value, "url_schemes", None)
    if not isinstance(schemes, tuple | list | frozenset | set) or scheme not in schemes:
        raise TypeError(f"{where}: {path!r} has `url_schemes` {schemes!r}, which lacks {scheme!r}")
    if not callable(getattr(value, "from_url", None)):
        raise TypeError(f"{where}: {path!r} lacks a callable `from_url`")
    return value
