"""The config file, whole: ``GatewayDocument``, each field one of its sections
in the file's order, and the two slices the services take of it
(``ProxySettings``, ``EdgeSettings``; the stub takes ``[stub]`` alone).

The one description of the file: ``gateway.document`` reads and checks it
(each service its sections), ``gateway.effective`` prints it. No I/O.
"""

from __future__ import annotations

import msgspec

from flatgate.proxy.document.callers import AuthConfig, KeyConfig, ModelConfig
from flatgate.proxy.document.limits import LimitRule, LimitsConfig, StateSection, TenantConfig
from flatgate.proxy.document.routing import BackendConfig, RouteConfig
from flatgate.proxy.document.servers import EdgeSection, ProxySection, StubSection
from flatgate.proxy.document.telemetry import TelemetrySection

__all__ = ["EdgeSettings", "GatewayDocument", "ProxySettings"]


class _Shared(msgspec.Struct, frozen=True, kw_only=True):
    """The sections both services read: tenants' limits and where their
    counts live (checked by ``limits.sections``), and traces."""

    state: StateSection = StateSection()
    limits: tuple[LimitRule, ...] = ()
    tenants: tuple[TenantConfig, ...] = ()
    telemetry: TelemetrySection = TelemetrySection()

    def limits_config(self) -> LimitsConfig:
        """``[state]``, ``[[limits]]`` and ``[[tenants]]`` together (the limiter's)."""
        return LimitsConfig(self.state, self.limits, self.tenants)


class ProxySettings(_Shared, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """What the proxy runs with: its sections of the config file."""

    proxy: ProxySection = ProxySection()
    backends: list[BackendConfig] = []
    routes: list[RouteConfig] = []

    def backend(self, name: str) -> BackendConfig:
        for b in self.backends:
            if b.name == name:
                return b
        raise KeyError(name)


class EdgeSettings(_Shared, frozen=True, kw_only=True):
    """What the edge runs with: its sections of the config file."""

    edge: EdgeSection = EdgeSection()
    models: tuple[ModelConfig, ...] = ()
    keys: tuple[KeyConfig, ...] = ()
    auth: AuthConfig = AuthConfig()

    def model_index(self) -> dict[str, ModelConfig]:
        """Every name and alias to its model entry."""
        out: dict[str, ModelConfig] = {}
        for m in self.models:
            out[m.name] = m
            for alias in m.aliases:
                out[alias] = m
        return out


class GatewayDocument(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """The config file: each field one of its sections, in the file's order."""

    proxy: ProxySection = ProxySection()
    stub: StubSection = StubSection()
    backends: list[BackendConfig] = []
    routes: list[RouteConfig] = []
    edge: EdgeSection = EdgeSection()
    models: tuple[ModelConfig, ...] = ()
    keys: tuple[KeyConfig, ...] = ()
    auth: AuthConfig = AuthConfig()
    state: StateSection = StateSection()
    limits: tuple[LimitRule, ...] = ()
    tenants: tuple[TenantConfig, ...] = ()
    telemetry: TelemetrySection = TelemetrySection()

    def proxy_settings(self) -> ProxySettings:
        """The proxy's part."""
        return ProxySettings(
            proxy=self.proxy,
            backends=self.backends,
            routes=self.routes,
            state=self.state,
            limits=self.limits,
            tenants=self.tenants,
            telemetry=self.telemetry,
        )

    def edge_settings(self) -> EdgeSettings:
        """The edge's part."""
        return EdgeSettings(
            edge=self.edge,
            models=self.models,
            keys=self.keys,
            auth=self.auth,
            state=self.state,
            limits=self.limits,
            tenants=self.tenants,
            telemetry=self.telemetry,
        )
