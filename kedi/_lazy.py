"""PEP 562 lazy exports: a package's public names import their modules on first use.

`kedi`, `kedi.history` and `kedi.agent_adapter` keep `import` cheap this way;
each maps its lazy names to `(module, attribute)` and takes its `__getattr__`
and `__dir__` from `lazy_exports`. This module imports nothing from kedi.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], lazy: Mapping[str, tuple[str, str]]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module `__getattr__` and `__dir__` of a package with lazily imported names.

    `namespace` is the package's `globals()`; `lazy` maps each public name to
    the module and attribute it comes from. `__dir__` reads the package's
    `__all__` when called, so the package may define it after this call.
    """
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        """Import a public name's module on first use and keep the name (PEP 562)."""
        try:
            module, attribute = lazy[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module), attribute)
        namespace[name] = value  # later look-ups find it without calling __getattr__
        return value

    def __dir__() -> list[str]:
        """List the public names too, imported or not, so `dir(package)` shows the API."""
        return sorted({*namespace, *namespace.get("__all__", ())})

    return __getattr__, __dir__
