"""The `mha-viz` command line, through `mha_viz.cli.main` as the installed script calls it: its version, `check`
on a folder that loads and on damaged ones (one line, rc 2, never a traceback, `train-twin` too), and each
subcommand's own name in its help. Nothing here starts Streamlit or nginx."""
from __future__ import annotations

import json
import shutil
import sys
import tomllib
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from mha_viz import cli
from mha_viz.settings import ASSETS

REPO = Path(__file__).resolve().parents[2]
INDUCTION = ASSETS / "compiled" / "induction"
SUBCOMMANDS = ("serve", "compile", "train-twin", "check", "study")


@pytest.fixture(autouse=True)
def _own_cache_and_argv(tmp_path, monkeypatch):
    """A cache folder of the test's own, and sys.argv put back after `serve` (it runs deploy/serve.py in-process,
    with sys.argv as that script's command line)."""
    monkeypatch.setenv("MHA_VIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(sys, "argv", list(sys.argv))


def _damaged(tmp_path: Path, how: str) -> Path:
    """A copy of the shipped induction folder with one damage that was a traceback through the command line."""
    folder = Path(shutil.copytree(INDUCTION, tmp_path / f"induction-{how}"))
    if how == "nested":  # json.loads recursed into it: RecursionError
        data = json.loads((folder / "compiled.json").read_text())
        data["extra"] = {"deep": "HERE"}
        (folder / "compiled.json").write_text(json.dumps(data).replace('"HERE"', "[" * 100_000 + "]" * 100_000))
    else:  # a 1e6 x 1e6 shape: RuntimeError allocating 4 TB
        stored = load_file(str(folder / "weights.safetensors"))
        stored["token_embed/shape"] = torch.tensor([10 ** 6, 10 ** 6])
        save_file(stored, str(folder / "weights.safetensors"))
    return folder


def _one_line_refusal(code: int, said, *names: str) -> str:
    """`said`: capsys's output (.err), or a finished process's (.stderr)."""
    err = getattr(said, "err", None) or getattr(said, "stderr", "")
    assert code == 2, said
    line = err.strip()
    assert "\n" not in line and "Traceback" not in err, err
    for name in names:
        assert name in line, (name, line)
    assert "mha-viz compile" in line, line  # the fix
    return line


def test_version_prints_the_package_version_without_starting_the_app(capsys):
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"mha-viz {version}\n"


def test_check_says_ok_for_a_folder_that_loads(capsys):
    assert cli.main(["check", str(INDUCTION)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok: ") and out.count("\n") == 1, out
    assert "2 layers" in out and "1 head" in out, out


@pytest.mark.parametrize("how, names", [("nested", ("compiled.json", "extra")),
                                        ("shape", ("weights.safetensors", "token_embed"))])
def test_check_and_train_twin_refuse_a_damaged_folder_in_one_line(tmp_path, capsys, how, names):
    folder = _damaged(tmp_path, how)
    line = _one_line_refusal(cli.main(["check", str(folder)]), capsys.readouterr(), *names)
    assert line.startswith("mha-viz check: "), line
    code = cli.main(["train-twin", str(folder), "--seeds", "1", "--out", str(tmp_path / "twins")])
    assert _one_line_refusal(code, capsys.readouterr(), *names).startswith("mha-viz train-twin: ")
    assert not (tmp_path / "twins").exists()


def test_check_of_a_folder_that_holds_no_model_says_what_one_holds(tmp_path, capsys):
    assert cli.main(["check", str(tmp_path)]) == 2
    said = capsys.readouterr()
    assert "compiled.json" in said.err and "config.json" in said.err and said.err.count("\n") == 1, said.err


def test_train_twin_of_the_current_folder_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """`mha-viz train-twin .` named its output after the folder's name, which '.' has not: a ValueError's
    traceback. It reads the folder '.' is, and here that holds no compiled model."""
    monkeypatch.chdir(tmp_path)
    _one_line_refusal(cli.main(["train-twin", "."]), capsys.readouterr(), "compiled.json")


@pytest.mark.parametrize("command", SUBCOMMANDS)
def test_each_subcommand_names_itself_in_its_help(command, capsys):
    try:
        code = cli.main([command, "--help"])  # serve's script exits inside, and main returns its code
    except SystemExit as done:  # argparse's --help, for the others
        code = done.code
    assert code in (0, None)
    assert capsys.readouterr().out.startswith(f"usage: mha-viz {command}")


def test_an_unknown_command_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit) as done:
        cli.main(["chek", "folder"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "'chek'" in err, err
    for command in SUBCOMMANDS:
        assert f"mha-viz {command}" in err, (command, err)


def test_the_usage_lists_every_subcommand(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    for command in SUBCOMMANDS:
        assert f"mha-viz {command} " in out, (command, out)


def test_the_installed_script_prints_the_line_too(tmp_path):
    """The same refusal through a process of its own, as `mha-viz check` runs (`python -m mha_viz.cli` is the
    script's entry point, `main`): one line on stderr, rc 2, no traceback."""
    import os
    import subprocess

    folder = _damaged(tmp_path, "nested")
    env = {**os.environ, "PYTHONPATH": str(REPO), "MHA_VIZ_CACHE": str(tmp_path / "cache")}
    done = subprocess.run([sys.executable, "-m", "mha_viz.cli", "check", str(folder)], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)
    _one_line_refusal(done.returncode, done, "compiled.json", "extra")
    assert done.stdout == ""
