"""Bad settings through the page's path (AppTest runs app.py as a visitor's browser does): every bad value of
every variable shows the page's own "this server's settings are wrong" message, naming the variable, the value and
an example that works, never a traceback. The same values through `make serve`'s start-up check are in
tests/unit/test_serve_config.py."""
from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from mha_viz.settings import Settings, SettingsError

from helpers import APP

# (variable, bad value): non-numbers, negatives, zero where not allowed, 1e400, an unusable cache path, an unknown
# boolean. Each must be named with its value and an example `VAR=value`.
BAD = [
    ("MHA_VIZ_MAX_TOKENS", "1e400"),
    ("MHA_VIZ_MAX_TOKENS", "abc"),
    ("MHA_VIZ_MAX_TOKENS", "-5"),
    ("MHA_VIZ_MAX_TOKENS", "0"),
    ("MHA_VIZ_MAX_TOKENS", "12.5"),
    ("MHA_VIZ_MAX_TOKENS", "40000"),
    ("MHA_VIZ_MAX_PARAMS", "abc"),
    ("MHA_VIZ_MAX_PARAMS", "0"),
    ("MHA_VIZ_MAX_PARAMS", "inf"),
    ("MHA_VIZ_RUN_CACHE_MB", "abc"),
    ("MHA_VIZ_RUN_CACHE_MB", "-1"),
    ("MHA_VIZ_RUN_CACHE_MB", "nan"),
    ("MHA_VIZ_RUN_CACHE_MB", "1e400"),
    ("MHA_VIZ_TORCH_THREADS", "0"),
    ("MHA_VIZ_TORCH_THREADS", "two"),
    ("MHA_VIZ_ALLOW_CUSTOM", "maybe"),
    ("MHA_VIZ_CACHE", "~nouser/x"),
    ("MHA_VIZ_CACHE", "{file}"),
    ("MHA_VIZ_CACHE", "{file}/below"),
]


def _value(raw: str, tmp_path) -> str:
    if "{file}" in raw:
        target = tmp_path / "a-file"
        target.write_text("not a folder")
        raw = raw.format(file=target)
    return raw


@pytest.mark.parametrize("name,raw", BAD, ids=[f"{n}={v}" for n, v in BAD])
def test_a_bad_setting_is_named_with_its_value_and_an_example(monkeypatch, tmp_path, name, raw):
    raw = _value(raw, tmp_path)
    with pytest.raises(SettingsError) as err:
        Settings.from_env({name: raw})
    (problem,) = err.value.problems
    assert f"{name}={raw!r}" in problem, problem
    assert f"e.g. {name}=" in problem or f"such as {name}=" in problem, problem
    example = problem.rsplit(f"{name}=", 1)[1].rstrip(".)")
    Settings.from_env({name: example})  # the example works


@pytest.mark.parametrize("name,raw", BAD, ids=[f"{n}={v}" for n, v in BAD])
def test_the_page_shows_a_bad_setting_instead_of_a_traceback(monkeypatch, tmp_path, name, raw):
    raw = _value(raw, tmp_path)
    monkeypatch.setenv(name, raw)
    import mha_viz.app.cache as cache

    cache.runs.cache_clear()  # the run cache is made from the settings on first use
    try:
        at = AppTest.from_file(APP, default_timeout=120).run()
    finally:
        cache.runs.cache_clear()
    assert not at.exception, [e.value for e in at.exception]
    errors = [e.value for e in at.error]
    assert len(errors) == 1 and errors[0].startswith("This server's settings are wrong"), errors
    shown = errors[0].replace("\\", "")  # md_safe escapes Markdown characters such as ~ and _
    assert f"{name}={raw!r}" in shown, errors[0]


def test_every_bad_variable_is_reported_at_once():
    with pytest.raises(SettingsError) as err:
        Settings.from_env({"MHA_VIZ_MAX_TOKENS": "1e400", "MHA_VIZ_MAX_PARAMS": "abc", "MHA_VIZ_RUN_CACHE_MB": "x"})
    assert [p.split("=")[0] for p in err.value.problems] == ["MHA_VIZ_RUN_CACHE_MB", "MHA_VIZ_MAX_PARAMS",
                                                             "MHA_VIZ_MAX_TOKENS"]


def test_more_threads_than_cores_is_a_warning_and_uses_the_cores():
    import os

    cores = len(os.sched_getaffinity(0))
    found = Settings.from_env({"MHA_VIZ_TORCH_THREADS": "1000"})
    assert found.torch_threads == cores
    (warning,) = found.warnings
    assert "MHA_VIZ_TORCH_THREADS=1000" in warning and f"{cores} cores" in warning


def test_good_values_pass_as_written():
    found = Settings.from_env({"MHA_VIZ_MAX_PARAMS": "2e8", "MHA_VIZ_MAX_TOKENS": "128", "MHA_VIZ_ALLOW_CUSTOM": "no",
                               "MHA_VIZ_RUN_CACHE_MB": "1_024", "MHA_VIZ_TORCH_THREADS": "1"})
    assert (found.max_params, found.max_tokens, found.allow_custom, found.run_cache_mb) == (200_000_000, 128, False,
                                                                                            1024)
    assert found.warnings == ()


def test_more_threads_than_cores_on_the_page_runs_with_the_cores(monkeypatch):
    """The page runs (no error box), with the cores as its thread count. Read from the settings the page used:
    torch's count is per thread under OpenMP, and AppTest runs the script in a thread of its own."""
    import os

    from mha_viz.settings import settings

    monkeypatch.setenv("MHA_VIZ_TORCH_THREADS", "1000")
    at = AppTest.from_file(APP, default_timeout=180).run()
    assert not at.exception and not at.error, [e.value for e in at.exception] + [e.value for e in at.error]
    assert len(at.toggle) > 0
    assert settings().torch_threads == len(os.sched_getaffinity(0))
