"""Settings: defaults, then an optional TOML file, then GPUSLO_* environment; built once and passed in."""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from gpuslo.engine.errors import ConfigError


@dataclass(frozen=True)
class Settings:
    """Every knob of the service. Field docs are in docs/configuration.md."""

    database_url: str = "sqlite:///var/gpuslo.db"
    rules_dir: Path = Path("rules")
    # Site overrides `<rulebook>.yaml` (docs/rulebooks.md#site-overrides); None: shipped rulebooks as they are.
    rules_overrides_dir: Path | None = None
    host: str = "127.0.0.1"
    port: int = 8080
    max_body_bytes: int = 8 * 1024 * 1024
    max_events_per_request: int = 10_000
    engine_queue_size: int = 10_000
    # The engine (evaluation, its store writes, the outbox rows) in a child process fed from the stored,
    # unevaluated events, so that ingest and the engine use two cores (engine/engine_process.py).
    engine_process: bool = False
    max_clock_skew_seconds: float = 60.0  # ingest refuses event times further ahead of the server's clock
    rules_poll_seconds: float = 2.0
    secret_key: str = field(default="", repr=False)
    page_size: int = 50
    public_url: str = "http://127.0.0.1:8080"
    # A trace UI's URL with {trace_id} (and optionally {span_id}): events that carry a W3C trace link to it.
    trace_url_template: str = ""
    alerts_config: Path | None = None
    # Delivery (docs/alerts.md#delivery): threads per receiver, maximum age, and the dead-letter receiver.
    delivery_per_receiver: int = 2
    notification_max_age_hours: float = 6.0
    dead_letter_receiver: str = ""
    # Access control and audit (docs/configuration.md#access-control).
    auth_required: bool = True
    auth_proxy_header: str = ""
    auth_proxy_role_header: str = ""
    auth_proxy_default_role: str = "viewer"
    trusted_proxies: str = ""  # addresses/CIDRs of reverse proxies whose X-Forwarded-For/-Proto are believed
    secret_key_file: Path = Path("var/secret_key")
    session_cookie_secure: bool = False
    session_hours: float = 12.0
    login_failures_per_minute: int = 5  # per user name and client address
    login_failures_per_address_per_minute: int = 30  # per client address, whatever the user names
    refused_audit_per_minute: int = 10  # audit rows of refused (401/403) requests per client address per minute
    ingest_requests_per_second: float = 50.0
    ingest_burst: int = 200
    event_retention_days: int = 30
    audit_retention_days: int = 0  # 0: the audit log is kept for ever; else rows older than this are pruned
    # Start even when the database may lose acknowledged writes (SQLite pragmas not as set, PostgreSQL
    # synchronous_commit or fsync off): a warning instead of a refusal.
    allow_unsafe_durability: bool = False

    def with_overrides(self, **changes: object) -> Settings:
        """A copy with some fields replaced (used by the CLI and tests)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


_ENV_PREFIX = "GPUSLO_"
_OPTIONAL_PATHS = ("alerts_config", "rules_overrides_dir")


def _coerce(name: str, raw: object, target: object) -> object:
    kind = type(target)
    try:
        if isinstance(target, bool):
            if isinstance(raw, bool):
                return raw
            return str(raw).strip().lower() in {"1", "true", "yes", "on"}
        if isinstance(target, Path) or (target is None and name.lower().endswith(_OPTIONAL_PATHS)):
            return Path(str(raw))  # these default to None, so their type cannot come from the default
        return kind(raw)  # type: ignore[call-arg]
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"setting {name!r}: cannot read {raw!r} as {kind.__name__}: {exc}") from exc


def load_settings(
    config_file: Path | None = None, environ: Mapping[str, str] | None = None, **overrides: object
) -> Settings:
    """Build Settings from defaults, an optional TOML file, the environment and explicit overrides."""
    environ = os.environ if environ is None else environ
    defaults = Settings()
    known = {f.name for f in dataclasses.fields(Settings)}
    values: dict[str, object] = {}
    path = config_file or (Path(environ["GPUSLO_CONFIG"]) if "GPUSLO_CONFIG" in environ else None)
    if path is not None:
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except OSError as exc:
            raise ConfigError(f"{path}: cannot read config file: {exc.strerror}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: invalid TOML: {exc}") from exc
        for key, raw in data.items():
            if key not in known:
                raise ConfigError(f"{path}: unknown setting {key!r}")
            values[key] = _coerce(key, raw, getattr(defaults, key))
    for key in known:
        env_name = _ENV_PREFIX + key.upper()
        if env_name in environ:
            values[key] = _coerce(env_name, environ[env_name], getattr(defaults, key))
    for key, raw in overrides.items():
        if raw is not None:
            values[key] = _coerce(key, raw, getattr(defaults, key))
    return dataclasses.replace(defaults, **values)  # type: ignore[arg-type]
