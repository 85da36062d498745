"""An import-time stand-in for `hyper_parallel`, which MindFormers 2.0.0
requires (hyper-parallel~=1.0.0) but which is not on PyPI. Only MindFormers'
PyNative (DTensor) code imports it when a module loads; the configuration
code tests/trainers/mindformers_check.py runs never calls it. Any name
imported from it is an empty class. Installed into the MindFormers venv by
tests/trainers/venvs.py with a .pth line that imports this module."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types


class _Module(types.ModuleType):
    def __getattr__(self, name: str) -> type:
        if name.startswith("__"):
            raise AttributeError(name)
        cls = type(name, (), {"__init__": lambda self, *args, **kwargs: None})
        setattr(self, name, cls)
        return cls


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.split(".")[0] == "hyper_parallel":
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        module = _Module(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module) -> None:
        pass


sys.meta_path.insert(0, _Finder())
