"""Running a function when a module is first imported.

Some patches apply to other libraries' modules (accelerate's device choice,
Dynamo's registered inductor backend) that importing torch_pjrt must not
import: they are heavy, or not installed. `when_imported(name, fn)` calls
`fn(module)` right after the module named `name` has executed, or at once
if it already has.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from typing import Callable, Optional

_hooks: dict[str, list[Callable]] = {}


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module) -> None:
        self._inner.exec_module(module)
        for fn in _hooks.get(module.__name__, ()):
            fn(module)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname: str, path, target=None) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname not in _hooks:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Loader(spec.loader)
                return spec
        return None


def when_imported(name: str, fn: Callable) -> None:
    """Calls `fn(module)` once the module `name` is imported (now, if it is).
    `fn` must tolerate being called for a module it has already patched."""
    _hooks.setdefault(name, []).append(fn)
    if name in sys.modules:
        fn(sys.modules[name])
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())
