"""What pyproject.toml cannot declare: a wheel's copy of the files that live at the repository's root.

The run-time assets (assets/: the tiny model's weights and checkpoints, its evidence file, the notes, the example
sentences) and the deployment recipe (app.py, deploy/) stay at the root, where `make`, the tests and the other
tools use them. A built wheel carries copies in `mha_viz/_checkout/` laid out like a checkout, so
`mha_viz.settings.ASSETS` finds the assets there and `mha-viz serve` runs deploy/serve.py from there. An editable
install (`pip install -e .`) copies nothing: it reads the checkout itself. The README's screenshots stay out.
"""
from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
# (source under the repository root, what to leave out)
BUNDLED = [("assets", ("*.png",)), ("app.py", ()), ("deploy", ("__pycache__", "*.pyc"))]


class BuildPyWithCheckout(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        dest = Path(self.build_lib) / "mha_viz" / "_checkout"
        for name, leave_out in BUNDLED:
            src = ROOT / name
            if not src.exists():
                raise FileNotFoundError(f"{src} is missing: build the wheel from a full checkout of mha-viz")
            if src.is_dir():
                shutil.copytree(src, dest / name, dirs_exist_ok=True, ignore=shutil.ignore_patterns(*leave_out))
            else:
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, dest / name)


setup(cmdclass={"build_py": BuildPyWithCheckout})
