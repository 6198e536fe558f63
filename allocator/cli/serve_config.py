"""`fairbroker serve`'s configuration: one validated object built from four layers.

Precedence, highest first: command-line flags, `FAIRBROKER_<KEY>` environment variables,
the YAML file given with `--config` (or `FAIRBROKER_CONFIG`), and the defaults below. The
keys of the file are the field names of `ServeConfig`; the environment variable of a key is
its upper-cased name (`state_dir` -> `FAIRBROKER_STATE_DIR`; lists are comma-separated).
Every error names the key and where its value came from, in one line.

The engine's keys are not written here: they are `EngineConfig`'s fields, with its types,
defaults and ranges (`_EngineKeys` is built from them), checked by building the
`EngineConfig` itself.
"""

from __future__ import annotations

import difflib
import getpass
import os
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from allocator.backends.sandbox import SandboxConfig
from allocator.broker.grpc_front import CONNECTIONS_PER_ADDRESS
from allocator.broker.ports import DEFAULT_GRPC_PORT, DEFAULT_HTTP_PORT, DEFAULT_METRICS_PORT
from allocator.broker.tls import TlsFiles
from allocator.engine_config import (
    EngineConfig,
    default_of,
    parse_role_weights,
    setting_of,
    setting_types,
)
from allocator.errors import FairbrokerError, did_you_mean
from allocator.scenarios.files import read_yaml

ENV_PREFIX = "FAIRBROKER_"
CONFIG_ENV = "FAIRBROKER_CONFIG"
MASK = "********"
_PATH_KEYS = (
    "state_dir", "cluster", "token_file", "secret_file", "tls_cert", "tls_key", "tls_ca",
)  # fmt: skip
#: Flags not spelt --<key with dashes> (serve's own, and the engine's from EngineConfig).
_FLAGS = {"roles": "--role", "limits": "--limit"} | {
    f.name: setting_of(f).flag for f in fields(EngineConfig) if setting_of(f).flag
}
_ENGINE_MAPPINGS = tuple(f.name for f in fields(EngineConfig) if f.default_factory is dict)
_ENGINE_LISTS = tuple(f.name for f in fields(EngineConfig) if isinstance(f.default, tuple))
_LIST_KEYS = (
    "roles",
    "executor_env",
    "executor_python",
    "sandbox_hide",
    "limits",
    *_ENGINE_MAPPINGS,
    *_ENGINE_LISTS,
)
_MESOS_ONLY = (
    "master", "roles", "principal", "secret_file", "framework_name", "user", "allow_root",
    "hostname", "webui_url", "gpus", "spark_uri",
)  # fmt: skip


class ConfigError(FairbrokerError):
    """A serve configuration value is invalid; the message names the key and its source."""


_MODEL_CONFIG = ConfigDict(extra="forbid", frozen=True)


def _engine_keys() -> dict[str, Any]:
    """EngineConfig's fields as pydantic fields: their types, defaults and ranges."""
    types, keys = setting_types(), {}
    for item in fields(EngineConfig):
        kind, spec = types[item.name], setting_of(item)
        if item.default_factory is dict:  # role_weights: GROUP -> weight
            keys[item.name] = (dict[str, float], Field(default_factory=dict))
            continue
        bounds: dict[str, Any] = {}
        if spec.minimum is not None:
            bounds["gt" if spec.exclusive else "ge"] = spec.minimum
            if kind is float:
                bounds["allow_inf_nan"] = False
        default = default_of(item) if spec.serve_default is None else spec.serve_default
        keys[item.name] = (kind, Field(default, validate_default=True, **bounds))
    return keys


#: The allocation policy: EngineConfig's fields, first in the file and in --print-config.
_EngineKeys = create_model("_EngineKeys", __config__=_MODEL_CONFIG, **_engine_keys())


class ServeConfig(_EngineKeys):  # type: ignore[misc, valid-type]
    """Everything `fairbroker serve` needs, validated once and passed whole."""

    model_config = _MODEL_CONFIG

    # where the broker listens and keeps its state
    host: str = "127.0.0.1"
    port: int = Field(DEFAULT_HTTP_PORT, ge=0, le=65535)
    grpc_port: int = Field(DEFAULT_GRPC_PORT, ge=0, le=65535)
    # gRPC connections one client address may hold at once (beyond: reset at once)
    grpc_connections_per_address: int = Field(CONNECTIONS_PER_ADDRESS, ge=1, le=256)
    metrics: bool = True
    metrics_token: bool = False  # /metrics requires the tenant API's token too
    metrics_port: int = Field(DEFAULT_METRICS_PORT, ge=0, le=65535)
    state_dir: Path = Path(".fairbroker")
    state_recover: bool = False  # start on a damaged state file, keeping what is readable
    # zk://HOST:PORT[,HOST:PORT...]/PATH: elect a leader among brokers and keep the state
    # there (docs/operations.md, "Fail-over"); None: one broker, its state in state_dir
    ha: str | None = None
    cluster: Path | None = None  # local backend: the embedded cluster's agents
    token: SecretStr | None = None
    token_file: Path | None = None
    # TLS on the tenant API (HTTP and gRPC) and /metrics: PEM certificate (chain) and key
    tls_cert: Path | None = None
    tls_key: Path | None = None
    # the CA certificate that issued tls_cert: checked against it at start, and what
    # `fairbroker status|configure|explain --config FILE` trust
    tls_ca: Path | None = None
    lease: float = Field(30.0, ge=1, allow_inf_nan=False)
    log_level: Literal["debug", "info", "warning"] = "info"
    # what tenants may put in their executors' environment (docs/security.md)
    executor_env: tuple[str, ...] = ()
    executor_python: tuple[str, ...] = ()
    # the embedded cluster's executor sandbox (docs/security.md, "The executor sandbox"; on
    # Mesos the agent's containerizer is the sandbox and these are not used)
    sandbox: Literal["auto", "bwrap", "user", "none"] = "auto"
    sandbox_user: str = Field("nobody", min_length=1)  # executors' user when serve runs as root
    sandbox_hide: tuple[Path, ...] = ()  # more paths executors must not see (bwrap)
    # executors' CPU in their cgroups: shares (by cores, work-conserving), quota (capped at
    # their cores too), off (docs/security.md, "Resource limits")
    sandbox_cpu: Literal["off", "shares", "quota"] = "shares"
    limits: tuple[str, ...] = ()  # NAME=VALUE changes to allocator.broker.limits.Limits
    # None: the backend's safe default (local: stop the executors; mesos: fail over)
    teardown_on_exit: bool | None = None
    # the Mesos framework
    backend: Literal["local", "mesos"] = "local"
    master: str | None = None
    roles: tuple[str, ...] = ("*",)
    principal: str | None = None
    secret_file: Path | None = None
    failover_timeout: float = Field(7 * 24 * 3600.0, ge=0, allow_inf_nan=False)
    framework_name: str = Field("fairbroker", min_length=1)
    user: str | None = None  # the user tasks run as (default: the broker's own)
    allow_root: bool = False
    hostname: str | None = None  # advertised to Mesos and in webui_url (default: host)
    webui_url: str | None = None
    gpus: bool = False  # ask for GPU agents' offers (the GPU_RESOURCES capability)
    spark_home: str = "/opt/spark"
    spark_uri: str | None = None

    @field_validator("role_weights", mode="before")
    @classmethod
    def _weights_from_strings(cls, value: Any) -> Any:
        """GROUP=WEIGHT strings (flags, FAIRBROKER_ROLE_WEIGHTS=a=2,b=1) as a mapping."""
        if isinstance(value, str):
            value = [v for v in value.split(",") if v.strip()]
        if isinstance(value, list | tuple):
            try:
                return parse_role_weights(value)
            except FairbrokerError as error:
                raise ValueError(str(error).removeprefix("role_weights: ")) from None
        return value

    @field_validator("token", mode="before")
    @classmethod
    def _token_not_empty(cls, value: Any) -> Any:
        """An empty token would turn authentication off while --print-config shows it set."""
        if isinstance(value, str) and not value.strip():
            raise ValueError("must not be empty (leave it out to serve without a token)")
        return value

    @field_validator("ha")
    @classmethod
    def _zk_url(cls, value: str | None) -> str | None:
        if value is None:
            return None
        from allocator.broker.zk_url import parse_zk_url

        return str(parse_zk_url(value.strip()))

    @model_validator(mode="after")
    def _consistent(self) -> ServeConfig:
        try:
            self.engine_config()  # the engine's own checks, each naming its key
        except ConfigError as error:
            raise ValueError(str(error)) from None
        if self.backend == "mesos" and not self.master:
            raise ValueError("master: --backend mesos needs a master (HOST:5050 or zk://...)")
        if self.backend == "local":
            given = sorted(k for k in _MESOS_ONLY if k in self.model_fields_set)
            if given:
                raise ValueError(f"{given[0]}: only with backend mesos")
        if (self.principal is None) != (self.secret_file is None):
            raise ValueError("principal: principal and secret_file go together")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise ValueError("tls_cert: tls_cert and tls_key go together")
        if self.tls_ca is not None and self.tls_cert is None:
            raise ValueError("tls_ca: the CA of tls_cert; give tls_cert and tls_key too")
        if self.token is not None and self.token_file is not None:
            raise ValueError("token: give token or token_file, not both")
        if self.metrics_token and self.token is None and self.token_file is None:
            raise ValueError("metrics_token: needs token or token_file")
        if self.ha is not None and self.state_recover:
            raise ValueError("state_recover: repairs the SQLite state; with ha it is in ZooKeeper")
        if not self.roles or any(not r.strip() for r in self.roles):
            raise ValueError("roles: role names must not be empty")
        return self

    # ---- derived values ------------------------------------------------------------------
    def engine_config(self) -> EngineConfig:
        """The engine's part, checked as the engine checks it (one line naming the key)."""
        engine = {item.name: getattr(self, item.name) for item in fields(EngineConfig)}
        try:
            return EngineConfig(**engine)
        except FairbrokerError as error:
            raise ConfigError(str(error)) from None

    @property
    def teardown(self) -> bool:
        """Whether stopping the broker stops its executors (Mesos: tears the framework down)."""
        return self.backend == "local" if self.teardown_on_exit is None else self.teardown_on_exit

    @property
    def advertised_host(self) -> str:
        if self.hostname:
            return self.hostname
        return self.host if self.host not in ("0.0.0.0", "::", "") else _hostname()

    @property
    def effective_webui_url(self) -> str:
        return self.webui_url or f"http://{self.advertised_host}:{self.port}/v1/GetAllocation"

    def sandbox_config(self) -> SandboxConfig:
        """The executor sandbox: the token and secret files hidden too."""
        secrets = tuple(
            p for p in (self.token_file, self.secret_file, self.tls_key) if p is not None
        )
        return SandboxConfig(
            mode=self.sandbox, user=self.sandbox_user, state_dir=self.state_dir,
            hide=(*secrets, *self.sandbox_hide), cpu=self.sandbox_cpu,
        )  # fmt: skip

    @property
    def task_user(self) -> str:
        return self.user or getpass.getuser()

    def tls_files(self) -> TlsFiles | None:
        if self.tls_cert is None or self.tls_key is None:
            return None
        return TlsFiles(self.tls_cert, self.tls_key, self.tls_ca)

    def read_token(self) -> str | None:
        if self.token_file is not None:
            return _read_secret(self.token_file, "token_file")
        return self.token.get_secret_value() if self.token else None

    def read_mesos_secret(self) -> str | None:
        return None if self.secret_file is None else _read_secret(self.secret_file, "secret_file")

    def check_runtime(self) -> None:
        """What can only be checked on this host: secrets readable, state directory usable,
        and no tasks launched as root unless allowed."""
        self.read_token()
        self.read_mesos_secret()
        _check_state_dir(self.state_dir)
        if self.backend == "mesos" and self.task_user == "root" and not self.allow_root:
            raise ConfigError(
                "user: executors would run as root on the agents; set user to an unprivileged "
                "account or allow_root: true"
            )

    def render(self, sources: Mapping[str, str]) -> str:
        """The effective configuration as YAML (a valid --config file), secrets masked, each
        key followed by where its value came from."""
        lines = ["# fairbroker serve: effective configuration (flags > env > file > defaults)"]
        for key in type(self).model_fields:
            value = getattr(self, key)
            if isinstance(value, SecretStr):
                value = MASK
            elif isinstance(value, Path):
                value = str(value)
            elif isinstance(value, tuple):
                value = list(value)
            elif hasattr(value, "value"):  # enums
                value = value.value
            text = yaml.safe_dump({key: value}, default_flow_style=True, width=1000).strip()
            text = text.removeprefix("{").removesuffix("}")
            lines.append(f"{text:<44} # {sources.get(key, 'default')}")
        return "\n".join(lines)


def _hostname() -> str:
    import socket

    return socket.getfqdn()


def _read_secret(path: Path, key: str) -> str:
    try:
        text = path.read_text().strip()
    except OSError as error:
        raise ConfigError(f"{key}: cannot read {path} ({error.strerror})") from None
    if not text:
        raise ConfigError(f"{key}: {path} is empty")
    return text


def _check_state_dir(path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ConfigError(f"state_dir: cannot create {path} ({error.strerror})") from None
    if not os.access(path, os.R_OK | os.W_OK | os.X_OK):
        raise ConfigError(f"state_dir: {path} is not readable and writable by this user")


#: FAIRBROKER_* variables that are not serve settings: the config file's path, the client
#: commands' broker address, the progress bar's delay, an executor's own marker, fault tests.
OTHER_ENV = ("CONFIG", "BROKER", "PROGRESS_DELAY", "EXECUTOR", "FAULT")


def unknown_env(environ: Mapping[str, str]) -> list[str]:
    """FAIRBROKER_* variables serve does not know, each with the setting it may mean: they
    are ignored, and a typo would otherwise change nothing without a word."""
    keys = list(ServeConfig.model_fields)
    known = {ENV_PREFIX + k.upper() for k in keys} | {ENV_PREFIX + o for o in OTHER_ENV}
    warnings = []
    for name in sorted(n for n in environ if n.startswith(ENV_PREFIX) and n not in known):
        close = difflib.get_close_matches(name.removeprefix(ENV_PREFIX).lower(), keys, n=1)
        hint = f" (did you mean {ENV_PREFIX}{close[0].upper()}?)" if close else ""
        warnings.append(f"{name} is not a setting{hint}; ignored")
    return warnings


def _env_layer(environ: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key in ServeConfig.model_fields:
        value = environ.get(ENV_PREFIX + key.upper())
        if value is None or value == "":
            continue
        out[key] = [v.strip() for v in value.split(",")] if key in _LIST_KEYS else value
    return out


def _file_layer(path: Path) -> dict[str, Any]:
    try:
        data = read_yaml(path)
    except FairbrokerError as error:
        raise ConfigError(str(error)) from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of serve options")
    out = {}
    for key, value in data.items():
        if key in _PATH_KEYS and isinstance(value, str) and value:
            value = str(path.parent / Path(value).expanduser())  # relative to the file
        out[key] = value
    return out


def load_serve_config(
    flags: Mapping[str, Any], file: str | Path | None, environ: Mapping[str, str]
) -> tuple[ServeConfig, dict[str, str]]:
    """The configuration from flags (only those given), the environment and a file, and
    where each non-default value came from."""
    layers: list[tuple[str, dict[str, Any]]] = []
    if file is not None:
        path = Path(file)
        layers.append((f"file {path}", _file_layer(path)))
    layers.append(("env", _env_layer(environ)))
    layers.append(("flag", dict(flags)))
    merged: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for kind, values in layers:
        for key, value in values.items():
            merged[key] = value
            sources[key] = _source(kind, key)
    try:
        config = ServeConfig.model_validate(merged)
    except ValidationError as error:
        raise ConfigError(_describe(error, sources)) from None
    return config, sources


def _source(kind: str, key: str) -> str:
    if kind == "env":
        return ENV_PREFIX + key.upper()
    if kind == "flag":
        return _FLAGS.get(key) or "--" + key.replace("_", "-")
    return kind


def _describe(error: ValidationError, sources: Mapping[str, str]) -> str:
    first = error.errors()[0]
    loc = [str(part) for part in first["loc"]]
    message = first["msg"].removeprefix("Value error, ")
    if first["type"] == "extra_forbidden":
        message = "unknown key" + did_you_mean(str(loc[0]), ServeConfig.model_fields)
    if loc:
        key = loc[0]
    else:  # a cross-field check names its key first
        key, _, message = message.partition(": ")
    where = sources.get(key)
    where = f" (from {where})" if where else ""
    if first["type"] not in ("extra_forbidden", "missing") and "input" in first and loc:
        message += f", got {first['input']!r}" if key != "token" else ""
    return f"{key}{where}: {message}"
