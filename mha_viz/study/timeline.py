"""What a study says over training, read from its tables (`store.read_study`): when each named head forms, per run.

A head *forms* for a score at the first measured step from which the census names it at every later measured step of
its run (`HeadCensus.named`: its value past the stronger baseline by NAMING_EXCESS, its interval overlapping the best
head's). A head named at some steps but not at the run's last is listed too, with the steps it was named at.
"""
from __future__ import annotations

from mha_viz.names import head_name


def scores(tables) -> list[str]:
    """The study's scores, the census's order kept (as the first checkpoint's rows list them)."""
    return list(dict.fromkeys(tables.heads["score"]))


def formation(tables, score: str) -> list[dict]:
    """One row per (run, head) the census names for `score` at any step: the step it forms at (None when it is not
    named at the run's last step), its value then and at the last step, and the steps it was named at."""
    h = tables.heads[tables.heads["score"] == score]
    done = tables.checkpoints[tables.checkpoints["status"] == "done"]
    rows = []
    for run in dict.fromkeys(done["run"]):
        steps = sorted(int(s) for s in done[done["run"] == run]["step"])
        mine = h[h["run"] == run]
        named = mine[mine["named"]]
        for (layer, head), group in named.groupby(["layer", "head"]):
            at = sorted(int(s) for s in group["step"])
            forms = None
            if at and at[-1] == steps[-1]:
                forms = steps[-1]
                for s in reversed(steps):  # back from the end while it stays named
                    if s not in at:
                        break
                    forms = s
            values = mine[(mine["layer"] == layer) & (mine["head"] == head)].set_index("step")["value"]
            rows.append({"run": run, "head": head_name((int(layer), int(head))), "forms at step": forms,
                         "value then": None if forms is None else float(values.get(forms)),
                         "value at the last step": float(values.get(steps[-1], float("nan"))),
                         "named at steps": ", ".join(map(str, at))})
    rows.sort(key=lambda r: (r["run"], r["forms at step"] is None, r["forms at step"] or 0, r["head"]))
    return rows


def series(tables, score: str, run: str) -> dict[tuple[int, int], tuple[list[int], list[float], list[bool]]]:
    """(layer, head) -> (steps, values, named at each step) of `score` in `run`, by step."""
    h = tables.heads[(tables.heads["score"] == score) & (tables.heads["run"] == run)].sort_values("step")
    out = {}
    for (layer, head), g in h.groupby(["layer", "head"]):
        out[(int(layer), int(head))] = ([int(s) for s in g["step"]], [float(v) for v in g["value"]],
                                        [bool(n) for n in g["named"]])
    return out
