"""The `mha-viz` command (installed by `pip install .`).

    mha-viz                         the app, as `make run` starts it (http://localhost:8501)
    mha-viz --port 8600 [--host 0.0.0.0] [any streamlit option, e.g. --server.maxUploadSize 10]
    mha-viz serve --procs 3 [--port 8080 --host 0.0.0.0 --private]     N app processes behind nginx (README)
    mha-viz compile PROGRAM.py --out FOLDER     a RASP program compiled by Tracr into a model folder
    mha-viz train-twin FOLDER --seeds 3 [--out DIR]   learned twins of a compiled folder (DIR/seed<N>, loadable)

`mha-viz` runs this file as the Streamlit script (in a wheel there is no app.py at a repository root) and loads the
default model while the server starts, as app.py does. `mha-viz serve` runs deploy/serve.py with the arguments as
given, through its command line: from the checkout this package sits in, or from the copy a wheel carries.
"""
from __future__ import annotations

import argparse
import os
import runpy
import sys
from pathlib import Path

_PKG = Path(__file__).resolve().parent
# Where deploy/serve.py is: the copy inside an installed wheel (setup.py), else the checkout above the package.
CHECKOUTS = (_PKG / "_checkout", _PKG.parent)

USAGE = """mha-viz [--port PORT] [--host HOST] [streamlit options]   start the app (as `make run`)
       mha-viz serve --procs N [--port PORT] [--host HOST] [--private]   N app processes behind nginx
       mha-viz compile PROGRAM.py --out FOLDER   compile a RASP program (needs requirements-compile.txt)
       mha-viz train-twin FOLDER --seeds 3 [--out DIR]   train learned twins of a compiled folder"""


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
        print(f"mha-viz compile: {err}", file=sys.stderr)
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

    folder = Path(args.folder)
    out = Path(args.out) if args.out else folder.with_name(folder.name + "-twins")
    try:
        written = load_compiled(folder)
        recipe = recipe_for(folder.name, args.steps, written.n_heads, args.texts)
        rows = train_twins(written, out, range(args.seeds), recipe)
    except (InputError, ModelLoadError, ValueError) as err:
        print(f"mha-viz train-twin: {err}", file=sys.stderr)
        return 2
    shipped = [r for r in rows if r["shipped"]]
    print(f"{len(shipped)} of {len(rows)} twins written under {out} (load one with load_model('{out}/seed0'))")
    return 0 if shipped else 1


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
    if argv[:1] == ["compile"]:
        return compile_command(argv[1:])
    if argv[:1] == ["train-twin"]:
        return train_twin_command(argv[1:])
    if argv[:1] == ["serve"]:
        # deploy/serve.py parses its own options (and says what it accepts); this only finds it and runs it here,
        # as its own command line would (no shell, no second interpreter).
        script = str(serve_script())
        sys.argv = [script, *argv[1:]]
        try:
            runpy.run_path(script, run_name="__main__")
        except SystemExit as done:
            return int(done.code or 0) if not isinstance(done.code, str) else 1
        return 0
    parser = argparse.ArgumentParser(prog="mha-viz", usage=USAGE, description="See every attention head of a "
                                     "transformer as its own heatmap. Options not listed go to streamlit.")
    parser.add_argument("--port", type=int, default=int(os.environ.get("PORT", 8501)),
                        help="the port to listen on (default 8501, or $PORT)")
    parser.add_argument("--host", default=None, help="the address to listen on (default: streamlit's, all)")
    args, rest = parser.parse_known_args(argv)
    if rest and not rest[0].startswith("-"):
        parser.error(f"unknown command {rest[0]!r}: the commands are `mha-viz` (the app), `mha-viz serve` and "
                     "`mha-viz compile`")
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
