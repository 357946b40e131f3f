"""The `mha-viz` command (installed by `pip install .`).

    mha-viz                         the app, as `make run` starts it (http://localhost:8501)
    mha-viz --port 8600 [--host 0.0.0.0] [any streamlit option, e.g. --server.maxUploadSize 10]
    mha-viz serve --procs 3 [--port 8080 --host 0.0.0.0 --private]     N app processes behind nginx (docs/deploy.md)
    mha-viz compile PROGRAM.py --out FOLDER     a RASP program compiled by Tracr into a model folder
    mha-viz train-twin FOLDER --seeds 3 [--out DIR]   learned twins of a compiled folder (DIR/seed<N>, loadable)
    mha-viz check MODEL                         whether a folder (or any name load_model takes) loads, or why not
    mha-viz study RUN_DIR [...] --out STUDY.duckdb [--ray ADDRESS] [--workers N]   checkpoints on Ray (docs/scale.md)
    mha-viz --version                           this package's version

`mha-viz` runs this file as the Streamlit script (in a wheel there is no app.py at a repository root) and loads the
default model while the server starts, as app.py does. `mha-viz serve` runs deploy/serve.py's main with the
arguments as given (named `mha-viz serve` in its help): from the checkout this package sits in, or from the copy a
wheel carries. A command that cannot do what it was asked prints one line that says why (rc 2), never a traceback.
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys
import tomllib
from importlib import metadata
from pathlib import Path

_PKG = Path(__file__).resolve().parent
# Where deploy/serve.py is: the copy inside an installed wheel (setup.py), else the checkout above the package.
CHECKOUTS = (_PKG / "_checkout", _PKG.parent)

USAGE = """mha-viz [--port PORT] [--host HOST] [streamlit options]   start the app (as `make run`)
       mha-viz serve --procs N [--port PORT] [--host HOST] [--private]   N app processes behind nginx
       mha-viz compile PROGRAM.py --out FOLDER   compile a RASP program (needs requirements-compile.txt)
       mha-viz train-twin FOLDER --seeds 3 [--out DIR]   train learned twins of a compiled folder
       mha-viz check MODEL   load a folder (or any model name) as the app would: "ok: ..." or why not
       mha-viz study RUN_DIR [...] --out STUDY.duckdb [--ray ADDRESS] [--workers N]   measure every checkpoint
       mha-viz --version"""


def version() -> str:
    """This package's version: the installed distribution's, else (a checkout run in place) pyproject.toml's."""
    try:
        return metadata.version("mha-viz")
    except metadata.PackageNotFoundError:
        project = CHECKOUTS[1] / "pyproject.toml"
        if project.is_file():
            return tomllib.loads(project.read_text())["project"]["version"]
        return "unknown (neither installed nor in a checkout)"


def _one_line(err: Exception) -> str:
    return " ".join(str(err).split())


def compile_command(argv: list[str]) -> int:
    """`mha-viz compile PROGRAM.py --out FOLDER`: the file defines program, vocab, max_seq_len (and causal, name);
    the folder then loads with `load_model(FOLDER)`, without jax."""
    parser = argparse.ArgumentParser(prog="mha-viz compile", description=compile_command.__doc__)
    parser.add_argument("program", help="a Python file that defines program, vocab and max_seq_len")
    parser.add_argument("--out", required=True, help="the folder to write (created)")
    args = parser.parse_args(argv)
    from mha_viz.contract import InputError, ModelLoadError
    from mha_viz.models.compiled.tracr_bridge import compile_file

    try:
        folder = compile_file(args.program, args.out)
    except (InputError, ModelLoadError) as err:
        print(f"mha-viz compile: {_one_line(err)}", file=sys.stderr)
        return 2
    print(f"compiled {args.program} into {folder}")
    return 0


def train_twin_command(argv: list[str]) -> int:
    """`mha-viz train-twin FOLDER --seeds 3 [--out DIR] [--steps N]`: the in-repo stack trained from scratch on what
    the compiled model in FOLDER outputs, one twin per seed, into DIR/seed<N> (default FOLDER-twins/seed<N>); each
    loads with `load_model(DIR/seedN)`. A seed below 95% held-out accuracy is not written; DIR/tried.json lists all."""
    parser = argparse.ArgumentParser(prog="mha-viz train-twin", description=train_twin_command.__doc__)
    parser.add_argument("folder", help="a compiled model's folder (`mha-viz compile`, or assets/compiled/NAME)")
    parser.add_argument("--seeds", type=int, default=3, help="how many seeds (0, 1, ...)")
    parser.add_argument("--out", default=None, help="where the seed folders go (default FOLDER-twins)")
    parser.add_argument("--steps", type=int, default=None, help="optimizer steps (default: the recipe's)")
    parser.add_argument("--texts", type=int, default=None, help="training texts (default: the recipe's)")
    args = parser.parse_args(argv)
    if args.texts is not None and args.texts < 1:
        parser.error("--texts must be at least 1")
    if args.seeds < 1:
        parser.error("--seeds must be at least 1")
    if args.steps is not None and args.steps < 1:
        parser.error("--steps must be at least 1")
    from mha_viz.contract import InputError, ModelLoadError
    from mha_viz.models.compiled.adapter import load_compiled
    from mha_viz.models.twins.train import recipe_for, train_twins

    # Absolute: '.' (or 'a/..') has no name of its own to name the recipe and the twins' folder after.
    folder = Path(os.path.abspath(args.folder))
    try:
        written = load_compiled(folder)
        out = Path(args.out) if args.out else folder.with_name(folder.name + "-twins")
        recipe = recipe_for(folder.name, args.steps, written.n_heads, args.texts)
        rows = train_twins(written, out, range(args.seeds), recipe)
    except (InputError, ModelLoadError, ValueError, OSError) as err:
        print(f"mha-viz train-twin: {_one_line(err)}", file=sys.stderr)
        return 2
    shipped = [r for r in rows if r["shipped"]]
    print(f"{len(shipped)} of {len(rows)} twins written under {out} (load one with load_model('{out}/seed0'))")
    return 0 if shipped else 1


def check_command(argv: list[str]) -> int:
    """`mha-viz check MODEL`: load MODEL as the page loads it (a compiled, twin or Hugging Face folder, a built-in
    name or a Hugging Face id) and print "ok: ..." with its size (rc 0), or the one line that says why it does not
    load and what to do (rc 2), without opening the app."""
    parser = argparse.ArgumentParser(prog="mha-viz check", description=check_command.__doc__)
    parser.add_argument("model", help="a model folder, a built-in name (tiny, minilm, ...) or a Hugging Face id")
    args = parser.parse_args(argv)
    from mha_viz.contract import InputError, ModelLoadError
    from mha_viz.models.registry import load_model

    try:
        model = load_model(args.model)
    except (InputError, ModelLoadError, ValueError, OSError) as err:
        print(f"mha-viz check: {_one_line(err)}", file=sys.stderr)
        return 2
    info = model.info
    print(f"ok: {args.model} loads: {info.title}, {info.n_layers} layer{'s' if info.n_layers != 1 else ''} x "
          f"{info.n_heads} head{'s' if info.n_heads != 1 else ''}, up to {info.max_tokens} tokens")
    return 0


def serve_command(argv: list[str]) -> int:
    """`mha-viz serve ...`: deploy/serve.py parses its own options (and says what it accepts); this only finds it
    and runs its main here with the arguments as given (no shell, no second interpreter), named `mha-viz serve` in
    its usage rather than after its file."""
    serve = runpy.run_path(str(serve_script()), run_name="mha_viz_serve")["main"]
    try:
        return serve(argv, prog="mha-viz serve")
    except SystemExit as done:  # argparse's --help, or its message for an option it does not know
        return int(done.code or 0) if not isinstance(done.code, str) else 1


# Every subcommand, for main and for the message that answers an unknown one.
def study_command(argv: list[str]) -> int:
    """`mha-viz study ...`: mha_viz/study/command.py parses and runs it (ray and duckdb: the `scale` extra)."""
    from mha_viz.study.command import main as study_main

    return study_main(argv)


COMMANDS = {"serve": serve_command, "compile": compile_command, "train-twin": train_twin_command,
            "check": check_command, "study": study_command}


def serve_script() -> Path:
    for root in CHECKOUTS:
        script = root / "deploy" / "serve.py"
        if script.is_file():
            return script
    raise SystemExit("mha-viz serve needs deploy/serve.py, which is neither in this installation "
                     f"({CHECKOUTS[0]}) nor in a checkout around it ({CHECKOUTS[1]}): reinstall mha-viz from a "
                     "full checkout (`pip install .`), or run `make serve` there")


TOOLBAR_MODE = "viewer"


def streamlit_argv(port: int, host: str | None, rest: list[str]) -> list[str]:
    """The command line `make run` gives streamlit (Makefile: python app.py --server.port ... ), for this file."""
    argv = ["streamlit", "run", str(Path(__file__).resolve()), "--server.port", str(port),
            "--server.headless", "true", "--browser.gatherUsageStats", "false",
            # As the checkout's .streamlit/config.toml says, which `mha-viz` run from another folder does not read:
            # visitors get no Deploy button or developer menu; a later --client.toolbarMode in `rest` wins.
            "--client.toolbarMode", TOOLBAR_MODE]
    if host:
        argv += ["--server.address", host]
    return argv + rest


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] and argv[0] in COMMANDS:
        return COMMANDS[argv[0]](argv[1:])
    parser = argparse.ArgumentParser(prog="mha-viz", usage=USAGE, description="See every attention head of a "
                                     "transformer as its own heatmap. Options not listed go to streamlit.")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8501)),
                        help="the port to listen on (default 8501, or $PORT)")
    parser.add_argument("--host", default=None, help="the address to listen on (default: streamlit's, all)")
    parser.add_argument("--version", action="store_true", help="print this package's version and stop")
    args, rest = parser.parse_known_args(argv)
    if args.version:  # ours, not streamlit's
        print(f"mha-viz {version()}")
        return 0
    if rest and not rest[0].startswith("-"):
        commands = ", ".join(f"`mha-viz {name}`" for name in COMMANDS)
        parser.error(f"unknown command {rest[0]!r}: the commands are `mha-viz` (the app), {commands}")
    import threading

    def _warm_up() -> None:
        from mha_viz.app.page import warm_up  # imported here: torch and transformers load beside the server

        warm_up()

    threading.Thread(target=_warm_up, name="mha-viz-warm-up", daemon=True).start()
    from streamlit.web import cli

    sys.argv = streamlit_argv(args.port, args.host, rest)
    return cli.main()


if __name__ == "__main__":
    from_streamlit = False
    if "streamlit" in sys.modules:
        from streamlit import runtime

        from_streamlit = runtime.exists()
    if from_streamlit:  # streamlit runs this file as the app's script, on every rerun
        from mha_viz.app import main as _app_main

        _app_main()
    else:  # python -m mha_viz.cli
        sys.exit(main())
