"""Bad and hostile input, for every model kind: a valid run or a clear InputError/ModelLoadError, never anything else.

Model.run gets empty, tiny, enormous, right-to-left, combining, zero-width, control and invalid-Unicode text;
the page gets text that looks like HTML, Markdown and LaTeX and must show it as text; model ids that are paths,
URLs, broken folders and attention-free configs must each be refused with a message that names the problem.

SmolLM2 is loaded with MHA_VIZ_MAX_TOKENS=96 so its long-text cases stay fast on two shared cores; the cap is the
same mechanism as the default 512 (MiniLM runs at 512 here).
"""
from __future__ import annotations

import ast
import json
import re
import socket
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from mha_viz import InputError, ModelLoadError, load_model

from helpers import MODELS, _rss_mb, assert_valid, loaded

REPO = Path(__file__).resolve().parents[2]
APP = str(REPO / "app.py")

# -- text ---------------------------------------------------------------------------------------------------
HOSTILE = {
    "one char": "a",
    "one digit": "7",
    "punctuation only": "?!.,;:",
    "emoji": "😀👍🏽🇩🇪 🤖",
    "emoji ZWJ family": "👨\u200d👩\u200d👧\u200d👦 and a\u200db",
    "zero-width only": "\u200b\u200c\u200d\ufeff",
    "CJK": "我爱自然语言处理。日本語のテキスト。한국어",
    "Arabic RTL": "مرحبا بالعالم، هذا نص عربي",
    "Hebrew RTL": "שלום עולם, זה טקסט בעברית",
    "bidi override": "abc \u202edcba\u202c \u2066isolate\u2069",
    "combining marks": "e\u0301\u0301\u0301 Z\u0336\u0337a\u0338l\u0334g\u0335o\u0336",
    "control chars": "a\x00b\x07c\x1b[31mred\x7f\x08 end",
    "NUL only": "\x00",
    "many NULs": "\x00" * 50,
    "newlines and tabs": "line one\r\nline two\n\n\ttabbed\r",
    "lone surrogate": "broken \ud800 text",
    "split surrogate pair": "smile \ud83d\ude00 here",
    "unknown words": "zzqxv florbish quantumbanana xylophonist",
    "one 10k-char word": "x" * 10_000,
    "HTML": "<script>alert(1)</script> <img src=x onerror=alert(1)>",
    "Markdown and LaTeX": "[x](javascript:alert(1)) **b** $$x^2$$ `c` # h",
}


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("text", ["", " ", " \n\t\r\u3000 "], ids=["empty", "space", "whitespace"])
def test_empty_text_is_an_input_error(name, text):
    model = loaded(name)
    with pytest.raises(InputError, match="empty"):
        model.run(text)


@pytest.mark.parametrize("name", MODELS)
def test_hostile_text_gives_valid_runs_or_input_errors(name):
    model = loaded(name)
    outcomes = {}
    for label, text in HOSTILE.items():
        try:
            run = model.run(text)
        except InputError as err:
            assert str(err) and len(str(err)) < 300, label
            outcomes[label] = f"InputError: {err}"
            continue
        assert_valid(model, run)
        outcomes[label] = f"{len(run.tokens)} tokens, {len(run.unknown)} unknown"
    print(f"\n[hostile] {name}: " + "; ".join(f"{k} -> {v}" for k, v in outcomes.items()))
    # A lone surrogate is replaced, not fatal; a split pair is joined back into one character.
    assert not outcomes["lone surrogate"].startswith("InputError")
    assert not outcomes["split surrogate pair"].startswith("InputError")


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("chars", [10_000, 200_000])
def test_long_text_is_truncated_with_bounded_memory(name, chars):
    model = loaded(name)
    text = ("The cat sat on the mat and the dog slept. " * (chars // 40 + 1))[:chars]
    model.run("warm up")
    before = _rss_mb()
    run = model.run(text)
    after = _rss_mb()
    assert_valid(model, run)
    assert len(run.tokens) == model.info.max_tokens
    assert run.truncated > 0, "the run must say how many tokens were dropped"
    # Every token kept plus every token dropped is the whole text (within the specials a tokenizer adds).
    print(f"\n[long] {name} {chars:,} chars: kept {len(run.tokens)}, dropped {run.truncated:,}, "
          f"RSS {before:.0f} -> {after:.0f} MB")
    assert after - before < 400, f"a {chars:,}-char run grew RSS by {after - before:.0f} MB"


def test_tiny_marks_unknown_words():
    model = loaded("tiny-untrained")
    run = model.run("the florbish quantumbanana")
    assert_valid(model, run)
    assert [run.tokens[i] for i in run.unknown] == ["florbish", "quantumbanana"]


@pytest.mark.parametrize("ablate,match", [
    ({(0.9, 1)}, "pairs of ints"),  # int() would silently make this head (0, 1)
    ({(True, 1)}, "pairs of ints"),
    ({("0", "1")}, "pairs of ints"),
    ({(0, 1, 2)}, "pairs of ints"),
    ("L0H0", "pairs of ints"),
    ([None], "pairs of ints"),
    ({(-1, 0)}, "does not exist"),
    ({(0, -1)}, "does not exist"),
    ({(10**9, 0)}, "does not exist"),
])
def test_bad_ablation_requests_are_input_errors(ablate, match):
    model = loaded("tiny-untrained")
    with pytest.raises(InputError, match=match):
        model.run("the cat", ablate=ablate)


def test_numpy_and_torch_integers_are_heads():
    np = pytest.importorskip("numpy")
    model = loaded("tiny-untrained")
    run = model.run("the cat", ablate=[(np.int64(0), torch.tensor(1))])
    assert run.ablated == frozenset({(0, 1)})


def test_non_string_text_is_an_input_error():
    model = loaded("tiny-untrained")
    for bad in (None, b"bytes", 42, ["a"]):
        with pytest.raises(InputError, match="string"):
            model.run(bad)


# -- the page: text that looks like code is shown as text ------------------------------------------------------
INJECTIONS = [
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[x](javascript:alert(1)) and ![y](http://127.0.0.1:9/y.png)",
    "$$x$$ and $y$",
]


def _app() -> AppTest:
    at = AppTest.from_file(APP, default_timeout=180)
    at.run()
    assert not at.exception, at.exception
    return at


def _enter(at: AppTest, text: str) -> None:
    at.text_area(key="text_box").input(text)
    at.button[0].click()
    at.run()
    assert not at.exception, at.exception


def _token_strip(at: AppTest) -> str:
    strips = [md.value for md in at.markdown if "token-strip" in md.value]
    assert len(strips) == 1
    return strips[0]


@pytest.fixture(scope="module")
def page():
    return _app()


@pytest.mark.parametrize("text", INJECTIONS)
def test_injection_text_is_escaped_in_the_page(page, text):
    _enter(page, text)
    page.session_state["view"] = "Compare"  # a view with the page's HTML token strip (the Layer grid draws its own)
    page.run()
    strip = _token_strip(page)
    page.session_state["view"] = "Layer"
    page.run()
    # The token strip is the one place that renders HTML: every token in it must be escaped.
    assert "<script" not in strip and "<img" not in strip, strip
    assert "&lt;" in strip if "<" in text else True
    # The effect panel's per-token change strip renders HTML too: with a head off, it shows every token.
    page.toggle(key="tg|minilm|0|0").set_value(False).run()
    change = [md.value for md in page.markdown if "change-strip" in md.value]
    page.toggle(key="tg|minilm|0|0").set_value(True).run()
    assert len(change) == 1
    ours = re.sub(r"</?(span|small|div)\b[^>]*>", "", change[0])  # the strip's own tags, nothing else
    assert "<" not in ours, change[0]
    # Everything else that shows the text (heatmap titles, ticks, hover) goes through plotly's safe labels.
    for chart in page.get("plotly_chart"):
        spec = json.loads(chart.proto.spec)
        for trace in spec.get("data", []):
            for axis in ("x", "y"):
                for label in trace.get(axis) or []:
                    assert "<script" not in str(label) and "<img" not in str(label), label
    assert len(page.toggle) == 12, "the layer grid is still drawn"


def test_model_id_in_load_error_is_shown_as_text():
    at = AppTest.from_file(APP, default_timeout=180)
    at.query_params["model"] = "![x](http://127.0.0.1:9/x.png)"
    at.run()
    assert not at.exception
    from markdown_it import MarkdownIt

    # The link's model waits for the visitor to confirm (tests/app/test_link_confirm.py): the notice names it ...
    notices = [e.value for e in at.info if "not built in" in e.value]
    assert notices and "<img" not in MarkdownIt("commonmark").render(notices[0]), notices
    # ... and so does the error once the visitor asks for it.
    at.button(key="link_model_load").click().run()
    assert not at.exception
    errors = [e.value for e in at.error]
    assert errors
    assert "<img" not in MarkdownIt("commonmark").render(errors[0]), errors[0]


def test_custom_models_switched_off_in_the_app(monkeypatch, tmp_path):
    monkeypatch.setenv("MHA_VIZ_ALLOW_CUSTOM", "0")
    (tmp_path / "config.json").write_text("{}")
    at = _app()
    at.sidebar.selectbox(key="model_choice").set_value("custom").run()
    assert not at.exception
    for model_id in ("bert-base-uncased", str(tmp_path), "../../etc"):
        at.sidebar.text_input(key="custom_id").input(model_id).run()
        assert not at.exception, at.exception
        errors = [e.value for e in at.error]
        assert errors and "turned off" in errors[0] and "MHA_VIZ_ALLOW_CUSTOM" in errors[0], errors
    # Built-in models still work.
    at.sidebar.selectbox(key="model_choice").set_value("minilm").run()
    assert not at.exception and not at.error and len(at.toggle) == 12


# -- model ids (tests/models/hf/test_custom_models.py covers missing ids, paths, URLs, pickle, enc-dec, the switch) --
def _folder(tmp_path: Path, files: dict[str, str]) -> str:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return str(tmp_path)


def test_config_without_attention(tmp_path):
    transformers = pytest.importorskip("transformers")
    transformers.MambaConfig(vocab_size=100, hidden_size=16, num_hidden_layers=1).save_pretrained(tmp_path)
    with pytest.raises(ModelLoadError, match="no attention"):
        load_model(str(tmp_path))


@pytest.mark.parametrize("files,pattern", [
    ({"config.json": "{not json"}, "Could not load"),
    ({"config.json": "{}"}, "Could not load"),
    ({"config.json": json.dumps({"model_type": "no-such-architecture"})}, "Could not load"),
    ({"config.json": json.dumps({"model_type": "bert", "num_attention_heads": 2, "hidden_size": 8,
                                 "num_hidden_layers": 1, "intermediate_size": 8})}, "Could not load|safetensors"),
], ids=["broken-json", "empty-config", "unknown-type", "config-without-weights"])
def test_broken_model_folders(tmp_path, files, pattern):
    with pytest.raises(ModelLoadError, match=pattern):
        load_model(_folder(tmp_path, files))


@pytest.mark.parametrize("name,pattern", [
    ("/etc/hostname", "not a model folder"),
    ("~", "not a model folder"),
    ("a\x00b", "must be a Hugging Face id"),
    ("a\nb", "must be a Hugging Face id"),
    ("x" * 301, "must be a Hugging Face id"),
    ("file:///etc/passwd", "not a folder|hub"),
    ("owner/../../etc", "not a folder"),
    ("..\\..\\windows", "not a folder"),
])
def test_more_bad_ids(name, pattern):
    if name.startswith("/") and not Path(name).exists():
        pytest.skip(f"{name} does not exist on this machine")
    with pytest.raises(ModelLoadError, match=pattern):
        load_model(name)


def test_hub_id_without_network_fails_fast(monkeypatch):
    """Not offline by setting, but the hub unreachable: a quick, clear message (no hub retries)."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)

    def refuse(*args, **kwargs):
        raise OSError("network is unreachable (test)")

    monkeypatch.setattr(socket, "create_connection", refuse)
    with pytest.raises(ModelLoadError, match="cannot be reached"):
        load_model("prajjwal1/bert-tiny")


def test_custom_switch_stops_before_the_filesystem(monkeypatch):
    """With custom models off, a typed path is never even looked up."""
    monkeypatch.setenv("MHA_VIZ_ALLOW_CUSTOM", "0")
    seen = []
    original = Path.exists
    monkeypatch.setattr(Path, "exists", lambda self: seen.append(str(self)) or original(self))
    with pytest.raises(ModelLoadError, match="turned off"):
        load_model("/etc")
    assert "/etc" not in seen


# -- no user text reaches a shell, eval or pickle ------------------------------------------------------------
_DANGEROUS = re.compile(
    r"\bsubprocess\b|\bos\.system\b|\bos\.popen\b|\bos\.exec\w*\(|(?<![.\w])eval\(|(?<![.\w])exec\(|"
    r"\bpickle\b\.|torch\.load\(|trust_remote_code\s*=\s*True|shell\s*=\s*True|__import__\(|yaml\.load\("
)


def _sources() -> list[Path]:
    return sorted((REPO / "mha_viz").rglob("*.py")) + [REPO / "app.py"]


def test_no_shell_eval_or_pickle_in_the_package():
    hits = []
    for path in _sources():
        for i, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if _DANGEROUS.search(code):
                hits.append(f"{path.relative_to(REPO)}:{i}: {line.strip()}")
    assert not hits, "user text must never reach a shell, eval or a pickle loader:\n" + "\n".join(hits)


def test_raw_html_only_where_reviewed():
    """`unsafe_allow_html=True` is allowed only in functions that escape every user string they embed."""
    # html.escape on each token (effect_panel via page.change_strip, predictions_panel via common.prediction_bars);
    # the Lesson's `look` (app/lesson/frame.py) allows HTML for its head-name spans only when its caller says so,
    # and every token its callers embed goes through readings.tok, whose md_safe backslash-escapes < and >, so no
    # tag can open (CommonMark)
    reviewed = {"token_strip", "effect_panel", "predictions_panel", "look", "sidebar_note"}
    found = []
    for path in _sources():
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.keyword) and node.arg == "unsafe_allow_html" and \
                        not (isinstance(node.value, ast.Constant) and node.value.value is False):
                    found.append((path.name, fn.name))
    assert {name for _, name in found} <= reviewed, f"review these for escaping, then add them: {found}"
