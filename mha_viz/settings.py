"""Every environment variable mha-viz reads, parsed once, in one place.

A bad value fails with a message that names the variable, the value it holds and a value that works; nothing
else in the package reads `os.environ` for its own settings. Every variable is checked before any of them is
used, and all the bad ones are reported at once (`SettingsError.problems`), so an operator fixes them in one go.
`deploy/serve.py` runs the same check before it starts any app process, and the page shows it instead of a
traceback (page.main). Values that work but make little sense (more torch threads than cores) are warnings
(`Settings.warnings`), printed by the server.
"""
from __future__ import annotations

import functools
import math
import os
import sys
from dataclasses import dataclass, field, fields
from pathlib import Path

ASSETS = Path(__file__).resolve().parent.parent / "assets"
# An installed wheel carries its own copy of the run-time assets inside the package (setup.py); a checkout and an
# editable install read the repository's assets/ above.
if (Path(__file__).resolve().parent / "_checkout" / "assets").is_dir():
    ASSETS = Path(__file__).resolve().parent / "_checkout" / "assets"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")
# MHA_VIZ_DTYPE's values: what the weights are stored and multiplied in.
DTYPES = ("float32", "bfloat16", "float16")
_FLOAT16_ON_CPU = ("MHA_VIZ_DTYPE=float16 needs a CUDA device (the CPU has no fast float16 matrix products, and "
                   "torch computes some of them in float32 there anyway); on the CPU use MHA_VIZ_DTYPE=bfloat16 or "
                   "float32 (the default).")
# One head of one layer at this many tokens already holds 4 GiB of attention (T² x 4 bytes): no run longer than
# this can be shown, whatever the model.
MAX_TOKENS_CEILING = 32768


class SettingsError(ValueError):
    """Environment variables hold values mha-viz cannot use. `problems` has one sentence per variable, each
    naming it, its value and an example that works; str() joins them."""

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        super().__init__(" ".join(self.problems))


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _ram_mb() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2**20
    except (ValueError, OSError, AttributeError):
        return None


class _Reader:
    """Reads variables from `env`, collecting every problem instead of stopping at the first."""

    def __init__(self, env):
        self.env = env
        self.problems: list[str] = []
        self.warnings: list[str] = []

    def raw(self, name: str) -> str | None:
        raw = self.env.get(name)
        return None if raw is None or not raw.strip() else raw

    def flag(self, name: str, default: bool) -> bool:
        raw = self.raw(name)
        if raw is None:
            return default
        value = raw.strip().lower()
        if value in _TRUE:
            return True
        if value in _FALSE:
            return False
        self.problems.append(f"{name}={raw!r} is not a yes/no value: use 1 or 0 (e.g. {name}={int(default)}).")
        return default

    def whole(self, name: str, default: int | None, minimum: int, example: int,
              maximum: int | None = None, why_max: str = "") -> int | None:
        """A whole number >= `minimum` (and <= `maximum`); `2e8` and `200_000_000` are accepted."""
        raw = self.raw(name)
        if raw is None:
            return default
        text = raw.strip().replace("_", "")
        use = f"use a whole number such as {name}={example}"
        try:
            value: float | int = int(text)
        except ValueError:
            try:
                value = float(text)
            except ValueError:
                self.problems.append(f"{name}={raw!r} is not a number; {use}.")
                return default
        if isinstance(value, float):
            if math.isnan(value):
                self.problems.append(f"{name}={raw!r} is not a number; {use}.")
                return default
            if math.isinf(value) and value < 0:
                value = -math.inf
            elif math.isinf(value) or (maximum is None and value > 1e18):
                bound = f"at most {maximum}" if maximum is not None else "a finite number"
                self.problems.append(f"{name}={raw!r} is too large: it must be {bound}{why_max}; {use}.")
                return default
            elif value != int(value):
                self.problems.append(f"{name}={raw!r} is not a whole number; {use}.")
                return default
        if value < minimum:
            self.problems.append(f"{name}={raw!r} is too small: it must be at least {minimum}; {use}.")
            return default
        if maximum is not None and value > maximum:
            self.problems.append(f"{name}={raw!r} is too large: it must be at most {maximum}{why_max}; {use}.")
            return default
        return int(value)

    def choice(self, name: str, default: str, choices: tuple[str, ...]) -> str:
        raw = self.raw(name)
        if raw is None:
            return default
        value = raw.strip().lower()
        if value not in choices:
            self.problems.append(f"{name}={raw!r} is not one of {', '.join(choices)} (e.g. {name}={default}).")
            return default
        return value

    def cache_dir(self, name: str) -> Path:
        raw = self.raw(name)
        example = f"use a full path this user can write, such as {name}={Path.home() / '.cache' / 'mha-viz'}"
        if raw is None:
            base = self.env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
            return Path(base) / "mha-viz"  # the default is only checked when something is written there
        try:
            path = Path(raw.strip()).expanduser()
        except RuntimeError:  # "~nouser/x": no such user, or no home directory to expand "~" to
            self.problems.append(f"{name}={raw!r} starts with a '~' this machine cannot expand (no such user or "
                                 f"no home directory); {example}.")
            return Path(raw)
        if path.exists() and not path.is_dir():
            self.problems.append(f"{name}={raw!r} is a file, not a folder; {example}.")
            return path
        existing = path
        while not existing.exists() and existing != existing.parent:
            existing = existing.parent
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            self.problems.append(f"{name}={raw!r} cannot be created or written: {existing} is not a folder this "
                                 f"user can write; {example}.")
        return path


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
    run_cache_mb: int = field(default=2048, metadata={"env": "MHA_VIZ_RUN_CACHE_MB", "help":
                              "memory for runs, kept for reuse and in the making (a page's work counts 4 x its "
                              "run's attention), shared by all sessions of a process; kept runs go first, least "
                              "recently used first; work that does not fit waits, then is refused"})
    torch_threads: int = field(default=1, metadata={"env": "MHA_VIZ_TORCH_THREADS", "help":
                               "torch threads per forward in the app; one keeps sessions from stalling each other"})
    device: str = field(default="auto", metadata={"env": "MHA_VIZ_DEVICE", "help":
                        "where every model runs, the in-repo ones included: auto (a CUDA GPU when there is one, "
                        "else the CPU), cpu or cuda; every tensor a run returns is on the CPU either way"})
    dtype: str = field(default="float32", metadata={"env": "MHA_VIZ_DTYPE", "help":
                       "the weights' number format: float32, bfloat16 (CPU or a GPU that has it) or float16 (CUDA "
                       "only); attention weights and every score shown stay float32 (the attention itself is "
                       "computed in float32); the compiled (written) programs stay float32"})
    warnings: tuple[str, ...] = field(default=(), compare=False)

    @classmethod
    def from_env(cls, env=None) -> "Settings":
        """Every variable of `env` (default os.environ) checked; raises SettingsError naming all the bad ones."""
        r = _Reader(os.environ if env is None else env)
        cores, ram = _cores(), _ram_mb()
        threads = r.whole("MHA_VIZ_TORCH_THREADS", 1, 1, 1)
        if threads > cores:
            r.warnings.append(f"MHA_VIZ_TORCH_THREADS={threads} is more than this machine's {cores} cores; using "
                              f"{cores} (e.g. MHA_VIZ_TORCH_THREADS=1, the default, keeps sessions from stalling "
                              "each other).")
            threads = cores
        run_mb = r.whole("MHA_VIZ_RUN_CACHE_MB", 2048, 1, 2048)
        if ram and run_mb > ram:
            r.warnings.append(f"MHA_VIZ_RUN_CACHE_MB={run_mb} is more than this machine's {ram} MB of memory; a "
                              f"process can be killed for lack of memory before the budget stops it (e.g. "
                              f"MHA_VIZ_RUN_CACHE_MB={min(2048, max(ram // 4, 1))}).")
        values = dict(
            allow_custom=r.flag("MHA_VIZ_ALLOW_CUSTOM", True),
            max_params=r.whole("MHA_VIZ_MAX_PARAMS", None, 1, 200_000_000),
            # Fewer than 8 tokens leaves nothing to look at.
            max_tokens=r.whole("MHA_VIZ_MAX_TOKENS", 512, 8, 512, MAX_TOKENS_CEILING,
                               f" (one head of one layer at {MAX_TOKENS_CEILING} tokens already holds 4 GiB of "
                               "attention)"),
            cache=r.cache_dir("MHA_VIZ_CACHE"),
            run_cache_mb=run_mb,
            torch_threads=threads,
            device=r.choice("MHA_VIZ_DEVICE", "auto", ("auto", "cpu", "cuda")),
            dtype=r.choice("MHA_VIZ_DTYPE", "float32", DTYPES),
        )
        if values["device"] == "cpu" and values["dtype"] == "float16":
            r.problems.append(_FLOAT16_ON_CPU)
        elif values["device"] == "cpu" and values["dtype"] == "bfloat16":
            r.warnings.append("MHA_VIZ_DTYPE=bfloat16 on the CPU halves the weights' memory but is slower than "
                              "float32 on most CPUs (4-9x on the one benchmarks/RESULTS.md measured); "
                              "MHA_VIZ_DTYPE=float32 (the default) is the fast choice there.")
        if r.problems:
            raise SettingsError(r.problems)
        return cls(**values, warnings=tuple(r.warnings))

    @staticmethod
    def documented() -> list[tuple[str, str]]:
        """(variable, help) for every setting, for docs/settings.md and error messages."""
        return [(f.metadata["env"], f.metadata["help"]) for f in fields(Settings) if "env" in f.metadata]


@functools.lru_cache(maxsize=1)
def settings() -> Settings:
    """The settings of this process, read once (its warnings printed once, to the server's log). Tests that change
    the environment call `settings.cache_clear()`. A device or dtype this machine's torch cannot give (MHA_VIZ_DEVICE
    =cuda without a GPU, float16 where "auto" found none) is a SettingsError here too, so the page says so first
    instead of failing when a model loads; torch is imported for that only when either is not its default."""
    found = Settings.from_env()
    if found.device != "auto" or found.dtype != "float32":
        _dtype_on(found.dtype, _device_for(found.device))
    for warning in found.warnings:
        print(f"mha-viz: {warning}", file=sys.stderr)
    return found


def torch_device():
    """The torch device models are placed on (MHA_VIZ_DEVICE): the one place the device is chosen. "auto" is a CUDA
    GPU when torch sees one, else the CPU; "cuda" without one is a SettingsError naming the fix."""
    return _device_for(settings().device)


def torch_dtype(device=None):
    """The torch dtype models keep their weights in (MHA_VIZ_DTYPE) on `device` (default `torch_device()`): the one
    place it is chosen. float16 on the CPU, or bfloat16 on a GPU without it, is a SettingsError naming what works
    (no silent fallback: a number format the operator did not ask for would change every number shown)."""
    return _dtype_on(settings().dtype, torch_device() if device is None else device)


def _device_for(wanted: str):
    import torch

    if wanted == "cuda" and not torch.cuda.is_available():
        raise SettingsError(["MHA_VIZ_DEVICE=cuda, but torch sees no CUDA device here; use MHA_VIZ_DEVICE=cpu or "
                             "auto (the default)."])
    if wanted == "cpu" or not torch.cuda.is_available():
        return torch.device("cpu")
    return torch.device("cuda")


def _dtype_on(wanted: str, device):
    import torch

    device = torch.device(device)
    if wanted == "float16" and device.type != "cuda":
        raise SettingsError([_FLOAT16_ON_CPU])
    if wanted == "bfloat16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise SettingsError(["MHA_VIZ_DTYPE=bfloat16, but this GPU has no bfloat16 arithmetic; use "
                             "MHA_VIZ_DTYPE=float16 or float32 (the default)."])
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[wanted]
