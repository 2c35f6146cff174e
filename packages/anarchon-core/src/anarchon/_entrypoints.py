"""The entry points of one group in the installed distributions, as `importlib.metadata` finds them.

Importing `importlib.metadata` costs a process about 20 ms of CPU (it brings email, zipfile, csv and
pathlib), a tenth of a scheduler's start-up. Where every entry on `sys.path` is a directory and no
import hook of its own lists distributions, the same search is done here with `os.listdir`: the
`*.dist-info` and `*.egg-info` directories of each path entry in order, the first of each normalized
name winning, as `importlib.metadata.entry_points` does. Anything else (a zip file or an egg on the
path, a finder with `find_distributions`) is left to `importlib.metadata` itself. A line with no `=`
in the group, or a distribution whose files are not UTF-8, is passed over, where `importlib.metadata`
would raise for every distribution.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import os
import re
import sys
from typing import Any

__all__ = ["EntryPoint", "entry_points"]

_VALUE = re.compile(r"(?P<module>[\w.]+)\s*(:\s*(?P<attr>[\w.]+)\s*)?((?P<extras>\[.*\])\s*)?$")
_SEPARATORS = re.compile(r"[-_.]+")


class EntryPoint:
    """One entry point: its name, its `module:attribute` value and the distribution that declares it."""

    __slots__ = ("dist_name", "name", "value")

    def __init__(self, name: str, value: str, dist_name: str | None) -> None:
        self.name = name
        self.value = value
        self.dist_name = dist_name
        """The declaring distribution's `Name`, when its metadata has one."""

    def load(self) -> Any:
        """Import the module the value names and return the attribute it names."""
        match = _VALUE.match(self.value)
        if match is None:
            raise ValueError(f"{self.value!r} is not an entry point value (module or module:attribute)")
        module = importlib.import_module(match.group("module"))
        return functools.reduce(getattr, filter(None, (match.group("attr") or "").split(".")), module)

    def __repr__(self) -> str:
        return f"EntryPoint({self.name!r}, {self.value!r}, {self.dist_name!r})"


def entry_points(group: str) -> list[EntryPoint]:
    """Every entry point of `group` in the distributions installed on `sys.path`."""
    paths = _plain_paths()
    if paths is None:
        return _from_metadata(group)
    found: list[EntryPoint] = []
    seen: set[str] = set()
    for path in paths:
        try:
            children = os.listdir(path or os.getcwd())
        except (OSError, ValueError):  # (ValueError: a NUL in the path)
            continue
        for child in children:
            low = child.lower()
            if not low.endswith((".dist-info", ".egg-info")):
                continue
            name = _SEPARATORS.sub("_", low.rpartition(".")[0].partition("-")[0])
            if name in seen:
                continue
            seen.add(name)
            found += _declared(os.path.join(path, child), group)
    return found


def _plain_paths() -> list[str] | None:
    """`sys.path` when a directory listing finds every distribution on it, else None."""
    for finder in sys.meta_path:
        if finder is not importlib.machinery.PathFinder and getattr(finder, "find_distributions", None):
            return None
    paths: list[str] = []
    for entry in sys.path:
        if not isinstance(entry, str) or entry.lower().endswith(".egg") or os.path.isfile(entry):
            return None
        paths.append(entry)
    return paths


def _declared(info: str, group: str) -> list[EntryPoint]:
    """The entry points of `group` that the metadata directory `info` declares."""
    try:
        with open(os.path.join(info, "entry_points.txt"), encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError):
        return []
    found: list[EntryPoint] = []
    section: str | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("[") and line.endswith("]"):
            section = line.strip("[]")
        elif section == group and "=" in line:
            name, _, value = line.partition("=")
            found.append(EntryPoint(name.strip(), value.strip(), None))
    if found:
        dist = _dist_name(info)
        for ep in found:
            ep.dist_name = dist
    return found


def _dist_name(info: str) -> str | None:
    """The `Name` field of a metadata directory's METADATA (or PKG-INFO, for an egg-info)."""
    for file in ("METADATA", "PKG-INFO"):
        try:
            with open(os.path.join(info, file), encoding="utf-8") as f:
                for line in f:
                    if not line.strip():
                        break  # the headers end at the first blank line
                    if line.lower().startswith("name:"):
                        return line[5:].strip()
        except (OSError, UnicodeDecodeError):
            continue
    return None


def _from_metadata(group: str) -> list[EntryPoint]:
    import importlib.metadata

    return [EntryPoint(ep.name, ep.value, ep.dist.name if ep.dist is not None else None)
            for ep in importlib.metadata.entry_points(group=group)]
