"""The two forms of a module Cython compiles (setup.py's COMPILED_MODULES): the extension ``make setup`` built, and
its pure-Python twin, the very same source executed as Python under another name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest


def pure_twin(module: ModuleType) -> ModuleType:
    """``module``'s source (``<name>.py`` beside the extension) loaded as a Python module of its own."""
    name = module.__name__.rsplit(".", 1)[-1]
    source = Path(module.__file__ or "").with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"quotaflow_pure_twin_{name}", source)
    assert spec is not None and spec.loader is not None
    twin = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = twin  # as an import does: a dataclass in it looks its module up there
    spec.loader.exec_module(twin)
    assert not twin.COMPILED
    return twin


def forms(module: ModuleType) -> list[object]:
    """pytest params: the compiled module and its pure twin."""
    return [pytest.param(module, id="compiled"), pytest.param(pure_twin(module), id="pure")]


def assert_compiled(module: ModuleType) -> None:
    assert module.COMPILED, f"{module.__file__} is the pure-Python source: run `make setup`"
