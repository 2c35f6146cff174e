"""Plugin discovery: a URL imports only the backend class that handles its scheme."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Any

import pytest

from anarchon import (
    BackendNotFound,
    MemoryBackend,
    backend_classes,
    backend_for_url,
    hookimpl,
    plugin_manager,
)

REPO = Path(__file__).resolve().parents[3]

# The drivers of this repository that are installed: all of them under `make install`.
PLUGINS = [ep for ep in entry_points(group="anarchon")
           if ep.dist is not None and ep.dist.name.startswith("anarchon-")]
# The drivers: this repository's plugins that provide backends (the others observe, e.g. metrics).
DRIVER_PLUGINS = sorted((ep for ep in PLUGINS if hasattr(ep.load(), "anarchon_backends")),
                        key=lambda ep: ep.name)
OBSERVER_PLUGINS = sorted((ep for ep in PLUGINS if ep not in DRIVER_PLUGINS), key=lambda ep: ep.name)

# Prints the top-level modules outside the standard library that argv[1] imports after `import anarchon`
# (the core's own modules imported on first use, such as the memory backend, are not counted).
_PROBE = """
import json, sys
import anarchon
before = set(sys.modules)
exec(sys.argv[1])
new = {name.partition(".")[0] for name in set(sys.modules) - before}
print(json.dumps(sorted(new - set(sys.stdlib_module_names) - {"anarchon"})))
"""


def _imported_by(code: str) -> set[str]:
    env = {k: v for k, v in os.environ.items() if k != "ANARCHON_DISABLE_PLUGIN_AUTOLOAD"}
    done = subprocess.run([sys.executable, "-c", _PROBE, code], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout))


def _package(ep: EntryPoint) -> str:
    return ep.module.partition(".")[0]


def test_starting_a_scheduler_imports_no_client_library() -> None:
    new = _imported_by("anarchon.Scheduler.from_url('memory://')")
    # Every plugin is loaded (its package is imported), and nothing else: no redis, asyncpg, aio_pika...
    every_plugin = {_package(ep) for ep in entry_points(group="anarchon")}
    assert {_package(ep) for ep in PLUGINS} <= new
    assert new <= every_plugin, f"start-up imported {sorted(new - every_plugin)}"


@pytest.mark.parametrize("ep", DRIVER_PLUGINS + OBSERVER_PLUGINS, ids=lambda ep: ep.name)
def test_loading_a_plugin_imports_only_its_package(ep: EntryPoint) -> None:
    """A driver imports no client library, and a metrics or tracing plugin none until its first event."""
    assert _imported_by(f"import {ep.module}") == {_package(ep)}


@pytest.mark.parametrize("ep", DRIVER_PLUGINS, ids=lambda ep: ep.name)
def test_driver_public_names_are_imported_on_first_use(ep: EntryPoint) -> None:
    package = importlib.import_module(_package(ep))
    assert set(package.__all__) <= set(dir(package))
    for name in package.__all__:
        assert getattr(package, name) is not None, name
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchBackend'"):
        _ = package.NoSuchBackend


@pytest.mark.parametrize("name", ["anarchon-builtin", *(ep.name for ep in DRIVER_PLUGINS)])
def test_scheme_map_names_the_classes_that_the_plugin_provides(name: str) -> None:
    plugin = plugin_manager().get_plugin(name)
    assert plugin is not None, f"plugin {name!r} is not registered"
    by_scheme = {scheme: cls for cls in plugin.anarchon_backends() for scheme in cls.url_schemes}
    mapping: dict[str, str] = plugin.anarchon_backend_schemes()
    assert sorted(mapping) == sorted(by_scheme), "the scheme map and the classes' url_schemes differ"
    for scheme, path in mapping.items():
        module, _, attr = path.partition(":")
        cls = getattr(importlib.import_module(module), attr)
        assert cls is by_scheme[scheme], f"{scheme!r} -> {path!r} is not {by_scheme[scheme]!r}"


# -- the scheme map and the fallback, with plugins registered in this process --------------------

class _SchemesOnly:
    def __init__(self, mapping: Any) -> None:
        self.mapping = mapping

    @hookimpl
    def anarchon_backend_schemes(self) -> Any:
        return self.mapping


class _ClassesOnly:
    def __init__(self, classes: list[type[Any]]) -> None:
        self.classes = classes
        self.calls = 0

    @hookimpl
    def anarchon_backends(self) -> list[type[Any]]:
        self.calls += 1
        return self.classes


PROBE_MODULE = "anarchon_probe_backend"


@pytest.fixture
def probe_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A module, not imported yet, holding a backend class for `probe://` and a few wrong things."""
    (tmp_path / f"{PROBE_MODULE}.py").write_text(textwrap.dedent("""
        class ProbeBackend:
            url_schemes = ("probe",)

            def __init__(self, url):
                self.url = url

            @classmethod
            def from_url(cls, url):
                return cls(url)

        class NoFromUrl:
            url_schemes = ("probe",)

        NOT_A_CLASS = 42
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield PROBE_MODULE
    sys.modules.pop(PROBE_MODULE, None)


@pytest.fixture
def register() -> Iterator[Callable[[object, str], Any]]:
    """Register plugins on the process-wide manager for one test."""
    pm = plugin_manager()
    added: list[object] = []

    def add(plugin: Any, name: str) -> Any:
        pm.register(plugin, name=name)
        added.append(plugin)
        return plugin

    yield add
    for plugin in added:
        pm.unregister(plugin)


def test_a_mapped_scheme_imports_only_its_class(probe_module: str, register: Callable[..., Any]) -> None:
    spy = register(_ClassesOnly([]), "spy")
    register(_SchemesOnly({"probe": f"{probe_module}:ProbeBackend"}), "probe-plugin")
    assert probe_module not in sys.modules
    backend = backend_for_url("probe://somewhere")
    assert type(backend).__name__ == "ProbeBackend" and backend.url == "probe://somewhere"
    assert probe_module in sys.modules
    assert isinstance(backend_for_url("memory://"), MemoryBackend)
    assert spy.calls == 0, "a mapped scheme asked every plugin for its classes"


@pytest.mark.parametrize(("scheme", "path", "error", "says"), [
    ("probe", "anarchon_probe_backend", TypeError, "not an import path"),
    ("probe", ":ProbeBackend", TypeError, "not an import path"),
    ("probe", "anarchon_no_such_module:ProbeBackend", ImportError, "No module named"),
    ("probe", "anarchon_probe_backend:Missing", ImportError, "no attribute 'Missing'"),
    ("probe", "anarchon_probe_backend:NOT_A_CLASS", TypeError, "42, not a backend class"),
    ("probe", "anarchon_probe_backend:NoFromUrl", TypeError, "lacks a callable `from_url`"),
    ("other", "anarchon_probe_backend:ProbeBackend", TypeError, "which lacks 'other'"),
])
def test_a_bad_path_names_the_plugin_and_the_path(probe_module: str, register: Callable[..., Any],
                                                  scheme: str, path: str, error: type[Exception],
                                                  says: str) -> None:
    register(_SchemesOnly({scheme: path}), "probe-plugin")
    with pytest.raises(error) as info:
        backend_for_url(f"{scheme}://somewhere")
    message = str(info.value)
    assert "plugin 'probe-plugin', hook anarchon_backend_schemes" in message
    assert repr(path) in message and says in message


def test_a_scheme_map_that_is_not_a_dict_names_the_plugin(register: Callable[..., Any]) -> None:
    register(_SchemesOnly([("probe", "x:Y")]), "listy")
    with pytest.raises(BackendNotFound,
                       match=r"plugin 'listy' failed \(hook anarchon_backend_schemes\): TypeError: returned"):
        backend_for_url("probe://somewhere")
    assert isinstance(backend_for_url("memory://"), MemoryBackend), "the failing plugin stopped the others"


def test_a_scheme_map_naming_a_missing_class_is_listed_with_the_rest(
    register: Callable[..., Any], capsys: pytest.CaptureFixture[str]
) -> None:
    from anarchon.cli import main

    register(_SchemesOnly({"ghost": "anarchon_no_such_module:Ghost"}), "ghost-plugin")
    assert main(["backends"]) == 0
    out = capsys.readouterr().out
    assert "memory://" in out
    assert "ghost-plugin (plugin failed)" in out and "No module named 'anarchon_no_such_module'" in out


def test_a_broken_entry_point_fails_alone(tmp_path: Path) -> None:
    # An installed distribution whose entry point names a module that does not exist.
    info = tmp_path / "broken_ep-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-ep\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[anarchon]\nbroken = broken_ep._plugn\n")
    code = textwrap.dedent(f"""
        import logging, sys
        logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")
        import anarchon
        from anarchon.cli import main
        assert type(anarchon.backend_for_url("memory://")).__name__ == "MemoryBackend"
        assert type(anarchon.backend_for_url("sqlite:///{tmp_path}/x.db")).__name__ == "SqliteBackend"
        sys.exit(main(["backends"]))
    """)
    env = {k: v for k, v in os.environ.items() if k != "ANARCHON_DISABLE_PLUGIN_AUTOLOAD"}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    reports = [line for line in done.stderr.splitlines() if "broken" in line]
    assert len(reports) == 1, f"the broken plugin must be reported once: {done.stderr}"
    for says in ("'broken-ep'", "entry point 'broken = broken_ep._plugn' in group 'anarchon'",
                 "No module named 'broken_ep'", "ANARCHON_DISABLE_PLUGIN_AUTOLOAD=1"):
        assert says in reports[0], f"the report does not say {says!r}: {reports[0]}"
    assert "sqlite://" in done.stdout and "broken (plugin failed)" in done.stdout, done.stdout


def test_a_plugin_with_only_anarchon_backends_is_still_found(register: Callable[..., Any], tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # The third-party example implements only `anarchon_backends`, as plugins written before the map do.
    monkeypatch.syspath_prepend(str(REPO / "examples" / "third-party-backend" / "src"))
    plugin = importlib.import_module("filelock_backend._plugin")
    assert not hasattr(plugin, "anarchon_backend_schemes")
    spy = register(_ClassesOnly([]), "spy")
    register(plugin, "filelock-example")
    backend = backend_for_url(f"filelock://{tmp_path}/claims.json")
    assert type(backend).__name__ == "FileLockBackend"
    assert spy.calls == 1
    assert any(cls.__name__ == "FileLockBackend" for cls in backend_classes())


def test_unknown_scheme_lists_mapped_schemes_without_importing_them(register: Callable[..., Any]) -> None:
    register(_SchemesOnly({"lazy-only": "anarchon_no_such_module:Backend"}), "lazy-only")
    register(_ClassesOnly([MemoryBackend]), "classes-only")
    with pytest.raises(BackendNotFound) as info:
        backend_for_url("cassandra://db")
    installed = str(info.value).partition("installed schemes: ")[2]
    assert "lazy-only" in installed and "memory" in installed


def test_a_class_named_only_in_a_scheme_map_is_listed(probe_module: str,
                                                      register: Callable[..., Any]) -> None:
    register(_SchemesOnly({"probe": f"{probe_module}:ProbeBackend"}), "probe-plugin")
    assert "ProbeBackend" in [cls.__name__ for cls in backend_classes()]


def _dist_info(where: Path, dist: str, entries: str, version: str = "0.1") -> None:
    """An installed distribution's metadata directory under `where`, declaring `entries`."""
    info = where / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n\n"
                                   "A long description.\n")
    (info / "entry_points.txt").write_text(entries)


def _listed(group: str) -> tuple[list[tuple[str, str, str | None]], list[tuple[str, str, str | None]]]:
    """`group`'s entry points as anarchon finds them, and as importlib.metadata does."""
    from anarchon._entrypoints import _plain_paths
    from anarchon._entrypoints import entry_points as found

    assert _plain_paths() is not None, "the directory listing is not in use: this compares nothing"

    mine = [(ep.name, ep.value, ep.dist_name) for ep in found(group)]
    theirs = [(ep.name, ep.value, ep.dist.name if ep.dist else None) for ep in entry_points(group=group)]
    return mine, theirs


def test_entry_points_are_found_as_importlib_metadata_finds_them() -> None:
    import importlib.metadata

    groups = {ep.group for dist in importlib.metadata.distributions() for ep in dist.entry_points}
    assert "anarchon" in groups and len(groups) > 3
    for group in sorted(groups):
        mine, theirs = _listed(group)
        assert mine == theirs, group


def test_the_first_distribution_of_a_name_on_the_path_wins(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    _dist_info(tmp_path / "a", "Dup.Ep", "# a comment\n[anarchon-probe]\nfirst = dup_a:plugin [extra]\n")
    _dist_info(tmp_path / "b", "dup-ep", "[anarchon-probe]\nsecond = dup_b:plugin\n", version="0.2")
    _dist_info(tmp_path / "b", "other-ep",
               "[console_scripts]\nx = y:z\n\n[anarchon-probe]\n  third=m.n:o.p\n")
    monkeypatch.syspath_prepend(str(tmp_path / "b"))
    monkeypatch.syspath_prepend(str(tmp_path / "a"))
    mine, theirs = _listed("anarchon-probe")
    assert mine == theirs
    assert mine == [("first", "dup_a:plugin [extra]", "Dup.Ep"), ("third", "m.n:o.p", "other-ep")]


def test_a_distribution_in_a_zip_on_the_path_is_found(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import zipfile

    archive = tmp_path / "zipped.zip"
    with zipfile.ZipFile(archive, "w") as z:
        info = "zipped_ep-0.1.dist-info"
        z.writestr(f"{info}/METADATA", "Metadata-Version: 2.1\nName: zipped-ep\nVersion: 0.1\n")
        z.writestr(f"{info}/entry_points.txt", "[anarchon-probe]\nzipped = zipped_ep:plugin\n")
    monkeypatch.syspath_prepend(str(archive))
    from anarchon._entrypoints import _plain_paths
    from anarchon._entrypoints import entry_points as found

    assert _plain_paths() is None
    assert [(ep.name, ep.value, ep.dist_name) for ep in found("anarchon-probe")] == [
        ("zipped", "zipped_ep:plugin", "zipped-ep")]


def test_an_entry_point_loads_the_attribute_it_names(probe_module: str) -> None:
    from anarchon._entrypoints import EntryPoint

    method = EntryPoint("p", f"{probe_module}:ProbeBackend.from_url [extra]", None).load()
    assert method.__name__ == "from_url"
    assert EntryPoint("p", probe_module, None).load().__name__ == probe_module
    with pytest.raises(ValueError, match="not an entry point value"):
        EntryPoint("p", "not a module!", None).load()


def test_finding_the_plugins_imports_no_importlib_metadata() -> None:
    # It costs a start-up about 20 ms; the scheme's backend is found without it.
    code = ("import sys, anarchon; anarchon.backend_for_url('memory://'); "
            "assert len(anarchon.plugin_manager().list_name_plugin()) > 2; "
            "print('importlib.metadata' in sys.modules)")
    env = {k: v for k, v in os.environ.items() if k != "ANARCHON_DISABLE_PLUGIN_AUTOLOAD"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_the_memory_backend_and_the_claim_table_are_imported_on_first_use(tmp_path: Path) -> None:
    code = textwrap.dedent(f"""
        import sys, anarchon
        anarchon.backend_for_url("sqlite:///{tmp_path}/x.db")
        lazy = ("anarchon.backends._memory", "anarchon.backends._decide")
        print(sorted(m for m in lazy if m in sys.modules))
        from anarchon import MemoryBackend
        from anarchon.backends import decide, MemoryStore
        assert MemoryBackend.__module__ == MemoryStore.__module__ == "anarchon.backends._memory"
        assert decide.__module__ == "anarchon.backends._decide"
    """)
    env = {k: v for k, v in os.environ.items() if k != "ANARCHON_DISABLE_PLUGIN_AUTOLOAD"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    # The SQLite driver applies the claim table, so it imports that; the memory backend stays out.
    assert done.stdout.strip() == "['anarchon.backends._decide']"


def test_a_distribution_with_unreadable_metadata_is_passed_over(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    from anarchon._entrypoints import entry_points as found

    _dist_info(tmp_path, "good-ep", "[anarchon-probe]\ngood = good_ep:plugin\n")
    bad = tmp_path / "bad_ep-0.1.dist-info"
    bad.mkdir()
    (bad / "entry_points.txt").write_bytes(b"[anarchon-probe]\nbad = bad_ep:\xff\xfe\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert [(ep.name, ep.dist_name) for ep in found("anarchon-probe")] == [("good", "good-ep")]


def test_an_egg_info_in_the_working_directory_is_found(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # "" on sys.path is the working directory; an egg-info names its distribution in PKG-INFO.
    info = tmp_path / "Egg.Probe.egg-info"
    info.mkdir()
    (info / "PKG-INFO").write_text("Metadata-Version: 1.0\nName: Egg.Probe\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[anarchon-probe]\negg = egg_probe.plugin\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend("")
    mine, theirs = _listed("anarchon-probe")
    assert mine == theirs == [("egg", "egg_probe.plugin", "Egg.Probe")]
