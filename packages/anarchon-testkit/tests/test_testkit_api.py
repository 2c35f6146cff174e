"""The test rig's modules: `__all__` is honest, and the core wheel no longer carries them."""

from __future__ import annotations

import importlib
import importlib.util

import pytest

MODULES = ["anarchon_testkit", "anarchon_testkit.cluster", "anarchon_testkit.chaos",
           "anarchon_testkit.faultproxy", "anarchon_testkit.topology"]


@pytest.mark.parametrize("name", MODULES)
def test_all_is_honest(name: str) -> None:
    module = importlib.import_module(name)
    exported = set(module.__all__)
    assert len(exported) == len(module.__all__), "duplicates in __all__"
    for attr in exported:
        assert hasattr(module, attr), f"{name}.__all__ lists {attr!r}, which does not exist"
    public = {n for n, v in vars(module).items()
              if not n.startswith("_") and isinstance(v, type | type(test_all_is_honest))
              and v.__module__ == name}
    missing = public - exported
    assert not missing, f"{name} defines public names missing from __all__: {sorted(missing)}"


MOVED = ["anarchon.testing.cluster", "anarchon.testing.chaos", "anarchon.testing.faultproxy",
         "anarchon.testing.topology", "anarchon._replica"]


@pytest.mark.parametrize("name", MOVED)
def test_the_core_does_not_ship_the_rig(name: str) -> None:
    assert importlib.util.find_spec(name) is None, f"{name} is back in anarchon-core (see anarchon-testkit)"
