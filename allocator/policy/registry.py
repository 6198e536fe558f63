"""Criteria and selections by name, each built by its own factory from its own parameters.

As in Kubernetes' scheduler framework, where every plugin is registered under its name with a
factory and built with its own validated arguments: a criterion or selection module
registers itself (`@CRITERIA.register("drf")` on its class or factory), naming the type of
its parameters if it takes any (a frozen dataclass that checks itself, e.g. `FugaParams`).
Whoever builds one looks it up by name and hands over the parameters it holds, by plugin name
(`EngineConfig.policy_params()`: `{"fuga": FugaParams(...)}`); a plugin given none gets its
parameters' defaults, or an error naming them when they have none.

`allocator.policy` imports every plugin module, so both registries (`base.CRITERIA`,
`selection.SELECTIONS`) are complete whenever any part of the package is imported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from allocator.errors import ScenarioError, did_you_mean

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Plugin(Generic[T]):
    name: str
    factory: Callable[..., T]
    #: The type of its parameters (the factory's first argument), or None if it takes none.
    params: type | None


class Registry(Generic[T]):
    """Plugins of one kind (`kind` names it in errors): name -> factory."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._plugins: dict[str, Plugin[T]] = {}

    def register(self, name: str, params: type | None = None) -> Callable[[F], F]:
        """Decorator: `factory(*context)`, or `factory(params, *context)` with `params`."""
        name = str(name)  # a StrEnum member names itself by its value

        def add(factory: F) -> F:
            if name in self._plugins:
                raise ValueError(f"{self.kind} {name!r} is registered twice")
            self._plugins[name] = Plugin(name, factory, params)
            return factory

        return add

    def names(self) -> tuple[str, ...]:
        return tuple(self._plugins)

    def plugin(self, name: str) -> Plugin[T]:
        try:
            return self._plugins[str(name)]
        except KeyError:
            known = ", ".join(self._plugins)
            hint = did_you_mean(name, self._plugins)
            raise ScenarioError(f"{self.kind}: unknown {name!r} (known: {known}){hint}") from None

    def build(self, name: str, params: Mapping[str, object] | None = None, *context: Any) -> T:
        """The plugin `name` built with `params[name]` (if it takes parameters) and
        `context` (what every plugin of this kind is built on)."""
        plugin = self.plugin(name)
        if plugin.params is None:
            return plugin.factory(*context)
        given = (params or {}).get(plugin.name)
        if given is None:
            try:
                given = plugin.params()
            except TypeError:
                raise ScenarioError(
                    f"{self.kind} {plugin.name}: needs its parameters "
                    f"({plugin.params.__name__}, e.g. from EngineConfig.policy_params())"
                ) from None
        elif not isinstance(given, plugin.params):
            raise TypeError(
                f"{self.kind} {plugin.name}: parameters must be {plugin.params.__name__}, "
                f"got {type(given).__name__}"
            )
        return plugin.factory(given, *context)
