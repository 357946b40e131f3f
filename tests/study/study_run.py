"""What the study tests share besides fixtures: the small run's steps (a module of its own, since `from conftest
import ...` reads whichever folder's conftest was imported first when the whole suite runs)."""
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
STEPS = (0, 4, 8, 12, 16)  # five good checkpoints
DAMAGED = 20  # a sixth whose weights file is cut short
