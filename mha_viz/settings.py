"""Every environment variable mha-viz reads, parsed once, in one place.

A bad value fails with a message that names the variable and what it accepts; nothing else in the package
reads `os.environ` for its own settings.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"
# An installed wheel carries its own copy of the run-time assets inside the package (setup.py); a checkout and an
# editable install read the repository's assets/ above.
if (Path(__file__).resolve().parent / "_checkout" / "assets").is_dir():
    ASSETS = Path(__file__).resolve().parent / "_checkout" / "assets"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


class SettingsError(ValueError):
    """An environment variable holds a value mha-viz cannot use; the message names it and what it accepts."""


def _flag(env, name: str, default: bool) -> bool:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingsError(f"{name}={raw!r} is not a yes/no value; use 1 or 0")


def _int(env, name: str, default: int | None, minimum: int) -> int | None:
    raw = env.get(name)
    if raw is None or not raw.strip():
        return default
    try:
        value = int(float(raw)) if "e" in raw.lower() else int(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r} is not a whole number; use e.g. {name}={default or minimum}") from None
    if value < minimum:
        raise SettingsError(f"{name}={raw!r} is too small; it must be at least {minimum}")
    return value


@dataclass(frozen=True)
class Settings:
    allow_custom: bool = field(default=True, metadata={"env": "MHA_VIZ_ALLOW_CUSTOM", "help":
                               "0 turns off custom model ids and folders (for public deployments)"})
    max_params: int | None = field(default=None, metadata={"env": "MHA_VIZ_MAX_PARAMS", "help":
                                   "refuse custom models larger than this many parameters, estimated from the config"})
    max_tokens: int = field(default=512, metadata={"env": "MHA_VIZ_MAX_TOKENS", "help":
                            "the most tokens a run shows (attention memory grows with layers x heads x tokens²)"})
    cache: Path = field(default=Path("~/.cache/mha-viz").expanduser(), metadata={"env": "MHA_VIZ_CACHE", "help":
                        "where SmolLM2's converted weights are kept"})
    run_cache_mb: int = field(default=1024, metadata={"env": "MHA_VIZ_RUN_CACHE_MB", "help":
                              "memory for runs shared by all sessions (least recently used go first)"})
    torch_threads: int = field(default=1, metadata={"env": "MHA_VIZ_TORCH_THREADS", "help":
                               "torch threads per forward in the app; one keeps sessions from stalling each other"})

    @classmethod
    def from_env(cls, env=None) -> "Settings":
        env = os.environ if env is None else env
        cache = env.get("MHA_VIZ_CACHE") or os.path.join(
            env.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "mha-viz")
        return cls(
            allow_custom=_flag(env, "MHA_VIZ_ALLOW_CUSTOM", True),
            max_params=_int(env, "MHA_VIZ_MAX_PARAMS", None, 1),
            # Fewer than 8 tokens leaves nothing to look at.
            max_tokens=_int(env, "MHA_VIZ_MAX_TOKENS", 512, 8),
            cache=Path(cache).expanduser(),
            run_cache_mb=_int(env, "MHA_VIZ_RUN_CACHE_MB", 1024, 1),
            torch_threads=_int(env, "MHA_VIZ_TORCH_THREADS", 1, 1),
        )

    @staticmethod
    def documented() -> list[tuple[str, str]]:
        """(variable, help) for every setting, for the README and error messages."""
        return [(f.metadata["env"], f.metadata["help"]) for f in fields(Settings)]


@functools.lru_cache(maxsize=1)
def settings() -> Settings:
    """The settings of this process, read once. Tests that change the environment call `settings.cache_clear()`."""
    return Settings.from_env()
