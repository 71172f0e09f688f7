"""The engine's public names: ``__all__`` lists exactly what the package exports."""

from __future__ import annotations

import types

import quotaflow.engine as engine


def test_all_matches_exports() -> None:
    # submodules become package attributes when imported; they are not exports
    public = {n for n, v in vars(engine).items() if not n.startswith("_") and not isinstance(v, types.ModuleType)}
    lazy = engine._KERNEL_NAMES - public  # the numba kernel loads on first use
    assert set(engine.__all__) == public | lazy
    assert all(getattr(engine, n) is not None for n in lazy)
    assert len(engine.__all__) == len(set(engine.__all__))
