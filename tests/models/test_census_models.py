"""`head_census` on every model kind, through the path the Census view uses; against an independent reference on a
GPT-2-style folder (transformers' own eager attentions and plain loops); and on the tiny model, whose heads the
probes name on other held-out inputs (assets/tiny/probes.json)."""
import dataclasses
import json
import math

import pytest
import torch

from mha_viz import CensusConfig, head_census, load_model
from mha_viz.analysis.census_result import seed_roles
from mha_viz.analysis.census_run import census_inputs
from mha_viz.settings import ASSETS
from tests.helpers import loaded

SMALL = CensusConfig(n_random=3, random_length=10, n_repeated=3, repeated_lengths=(4, 6), n_templates=4, n_loss=2,
                     n_other_sets=1, n_boot=20)
TEXTS = ["The cat sat on the mat.", "A dog ran to the old house and the dog barked."]
# The parity checks re-derive scores from `census_inputs` at the config's counts: the census reads them all at once.
ALL_AT_ONCE = dataclasses.replace(SMALL, first=1.0, rounds=0)


def _model(kind, folders):
    return load_model(str(folders[kind])) if kind in folders else loaded(kind)


@pytest.fixture(scope="module")
def folders(user_folders):
    return user_folders


KINDS = ["tiny", "tiny-untrained", "minilm", "smollm2", "llama", "gpt2", "masked", "encoder"]


@pytest.mark.parametrize("kind", KINDS)
def test_every_model_kind_gets_every_score_with_baselines_and_intervals(kind, folders):
    model = _model(kind, folders)
    seen = []
    census = head_census(model, texts=TEXTS, seed=3, config=SMALL, progress=lambda f, m: seen.append(f))
    L, H = model.n_layers, model.n_heads
    assert (census.n_layers, census.n_heads, census.causal) == (L, H, model.causal)
    expected = {"previous", "nearby", "distance", "previous (text)", "nearby (text)", "distance (text)", "first",
                "special", "punctuation", "confidence", "entropy", "offset", "induction", "duplicate"}
    relations = ({"noun→det", "noun→adj", "verb→subject", "pre-verb→subject", "object→verb"} if model.causal else
                 {"det→noun", "adj→noun", "subject→verb", "verb→subject", "verb→object"})
    assert set(census.names) == expected | relations
    assert census.skipped == 0  # every generated input was read one token per word
    for name in census.names:
        s = census.scores[name]
        assert s.shape == (L, H) and s.dtype == torch.float32
        if torch.isnan(s).all():
            assert name == "special" and kind == "smollm2"  # the one model that adds no special token
            continue
        assert torch.isfinite(s).all(), name
        assert (census.low[name] <= s + 1e-6).all() and (census.high[name] >= s - 1e-6).all(), name
        assert 0.0 <= census.uniform[name] <= 1.0, name
    for rel in relations:
        offset, accuracy = census.offset[rel]
        assert offset != 0 and 0.0 <= accuracy <= 1.0
    # progress reported up to the end, monotonically
    assert seen and seen[-1] == pytest.approx(1.0) and seen == sorted(seen)
    # the same seed gives the same census; another seed other inputs
    again = head_census(model, texts=TEXTS, seed=3, config=SMALL, control=None)
    for name in census.names:
        torch.testing.assert_close(again.scores[name], census.scores[name], equal_nan=True)
    assert census_inputs(model, 3, SMALL)["random"] != census_inputs(model, 4, SMALL)["random"]
    # a causal LM with logits gets the in-context check; the loss drop is finite
    if model.causal:
        ic = census.in_context
        assert ic is not None and math.isfinite(ic.loss_first) and math.isfinite(ic.loss_second)
        assert len(ic.top_heads) == ic.k >= 1 and all(len(s) == ic.k for s in ic.other_sets)
    else:
        assert census.in_context is None
    # the control: the untrained twin for tiny, inputs with the relation destroyed for the rest
    if kind == "tiny":
        assert "tiny-untrained" in census.control_kind and set(census.control) == set(census.names)
    else:
        assert "destroyed" in census.control_kind or "tiny" in census.control_kind
    json.dumps(census.to_json())  # every number is plain
    assert len(census.rows()) == L * H
    _one_rule(census)


def _one_rule(census):
    """Every name comes from the one rule: a named head beats its control; no head that beats its control and scores
    at least a named head's value is left out (the SmolLM2 first-token and MiniLM special orderings); the export
    names what `named` names."""
    for name in census.names:
        k = census.naming.get(name)
        named = {h for h, _ in census.named(name)}
        if k is None:
            assert not named, name
            continue
        sign = -1.0 if census.lower_is_notable(name) else 1.0
        s = sign * census.scores[name]
        for lh in named:
            assert bool(k.beats[lh]), (name, lh)
        if named:
            floor = min(float(s[lh]) for lh in named)
            left_out = [lh for lh in map(tuple, k.beats.nonzero().tolist()) if float(s[lh]) >= floor
                        and lh not in named]
            assert not left_out, (name, left_out, named)
    assert census.to_json()["named"] == {n: [list(h) for h, _ in census.named(n)] for n in census.names}


def test_against_transformers_own_attentions_on_a_gpt2_folder(folders):
    """previous and induction re-derived by plain loops over transformers' eager attentions of the same inputs."""
    import transformers

    model = load_model(str(folders["gpt2"]))
    census = head_census(model, texts=TEXTS, seed=1, config=ALL_AT_ONCE, control=None)
    hf = transformers.GPT2LMHeadModel.from_pretrained(folders["gpt2"], attn_implementation="eager").eval()
    tok = transformers.AutoTokenizer.from_pretrained(folders["gpt2"])
    sets = census_inputs(model, 1, SMALL, TEXTS)

    def attentions(text):
        enc = tok(text, return_tensors="pt")
        with torch.no_grad():
            out = hf(**enc, output_attentions=True)
        return torch.stack([a[0] for a in out.attentions]), enc["input_ids"][0]  # (L, H, T, T), (T,)

    L, H = model.n_layers, model.n_heads
    prev = torch.zeros(L, H)
    for item in sets["random"]:
        att, ids = attentions(item.text)
        assert len(ids) == len(item.words) + 2  # [CLS] words [SEP]: one token per word
        t = att.shape[-1]
        for l in range(L):
            for h in range(H):
                prev[l, h] += sum(float(att[l, h, q, q - 1]) for q in range(2, t)) / (t - 2)
    torch.testing.assert_close(census.scores["previous"], prev / len(sets["random"]), atol=1e-5, rtol=0)
    ind = torch.zeros(L, H)
    for item in sets["repeated"]:
        att, _ = attentions(item.text)
        pairs = [(q + 1, k + 1) for q, k in item.pairs["induction"]]  # word i is token i + 1, after [CLS]
        for l in range(L):
            for h in range(H):
                ind[l, h] += sum(float(att[l, h, q, k]) for q, k in pairs) / len(pairs)
    torch.testing.assert_close(census.scores["induction"], ind / len(sets["repeated"]), atol=1e-5, rtol=0)


@pytest.fixture(scope="module")
def tiny_census():
    return head_census(loaded("tiny"))


def test_tiny_census_names_the_heads_the_probes_name_on_other_inputs(tiny_census):
    evidence = json.loads((ASSETS / "tiny" / "probes.json").read_text())["final"]["scores"]

    def best(scores):
        return max(((l, h) for l in range(len(scores)) for h in range(len(scores[0]))),
                   key=lambda lh: scores[lh[0]][lh[1]])

    c = tiny_census
    assert c.top("previous", 1)[0][0] == best(evidence["previous"])  # the probes file each under the census's name
    assert c.top("pre-verb→subject", 1)[0][0] == best(evidence["pre-verb→subject"])
    probe_induction = sorted(((l, h) for l in range(3) for h in range(4)),
                             key=lambda lh: -evidence["induction"][lh[0]][lh[1]])[:3]
    assert c.top("induction", 1)[0][0] in probe_induction
    # and each beats both baselines and its untrained twin by far
    for name in ("previous", "induction", "pre-verb→subject"):
        lh, value = c.top(name, 1)[0]
        assert value - c.baseline(name) > 0.4 and value - float(c.control[name][lh]) > 0.4
    # the in-context check: the second copy is far easier, and the induction heads carry most of that
    ic = c.in_context
    assert ic.loss_first - ic.loss_second > 2.0
    # switching the induction heads off loses most of the drop, switching as many other heads off (not the
    # previous-token heads they read from, which are switched off on their own) loses little
    assert ic.lost[f"top {ic.k} induction, mean"] > 0.5 > ic.lost[f"other {ic.k}, mean"]
    assert c.top("previous", 1)[0][0] in ic.partners


def test_seed_roles_are_worded_from_the_censuses(tiny_census):
    roles = seed_roles([tiny_census])
    assert roles["rows"][0]["model"] == "tiny"
    (l, h), v = tiny_census.top("previous", 1)[0]
    assert roles["rows"][0]["previous token"].startswith(f"L{l} H{h} {v:.2f}")
    assert any("previous token pattern leads" in s for s in roles["sentences"])


@pytest.mark.parametrize("kind", ["tiny", "minilm", "smollm2", "gpt2", "masked"])
def test_the_batched_census_gives_the_numbers_of_the_one_by_one_census(kind, folders, monkeypatch):
    """The census reads its inputs through `run_many` in padded batches; with padding turned off (the contract's
    one-text-per-forward default, and one forward per text for the head means) every number is the same."""
    from mha_viz.models import batching, interventions

    model = _model(kind, folders)
    batched = head_census(model, texts=TEXTS, seed=2, config=SMALL)
    monkeypatch.setattr(type(model), "pads", False)
    monkeypatch.setattr(interventions, "_MEANS", interventions.PerModelCache())
    monkeypatch.setattr(batching, "_STATES", batching.PerModelCache(per_model=4))
    alone = head_census(model, texts=TEXTS, seed=2, config=SMALL)
    assert batched.names == alone.names and batched.n_inputs == alone.n_inputs
    for table in ("scores", "low", "high", "control", "mass", "text_values"):
        a, b = getattr(batched, table), getattr(alone, table)
        assert set(a) == set(b), table
        for name in a:
            torch.testing.assert_close(a[name], b[name], atol=1e-4, rtol=0, equal_nan=True, msg=f"{table} {name}")
    assert batched.uniform == pytest.approx(alone.uniform, nan_ok=True) and batched.offset == alone.offset
    if model.causal:
        x, y = batched.in_context, alone.in_context
        assert (x.top_heads, x.partners, x.other_sets) == (y.top_heads, y.partners, y.other_sets)
        assert x.loss_first == pytest.approx(y.loss_first, abs=1e-4)
        assert x.loss_second == pytest.approx(y.loss_second, abs=1e-4)
        assert x.lost == pytest.approx(y.lost, abs=1e-3, nan_ok=True)


@pytest.mark.parametrize("kind", ["tiny", "minilm"])
def test_the_census_reads_at_most_its_configured_inputs(kind, folders, monkeypatch):
    """The counts of a CensusConfig are the most the census reads: two thirds first, the rest only where a leader
    ties a head more data may separate. So a census never takes longer than reading every input once did: its
    inputs, the inputs with the relation destroyed, and a twin's reading of its inputs."""
    from mha_viz.analysis import census_run

    model = _model(kind, folders)
    read, real = [], census_run._read
    monkeypatch.setattr(census_run, "_read", lambda m, sets, kinds, *a: read.append(
        (m.name, sum(len(sets[k]) for k in kinds if k != "texts"))) or real(m, sets, kinds, *a))
    census = head_census(model, texts=TEXTS, seed=5, config=SMALL)
    cap = (SMALL.n_random + SMALL.n_repeated + SMALL.n_templates) + (SMALL.n_repeated + SMALL.n_templates)
    twin_cap = SMALL.n_random + SMALL.n_repeated + SMALL.n_templates if "twin" in census.control_kind else 0
    assert sum(n for name, n in read if name == model.name) <= cap, read
    assert sum(n for name, n in read if name != model.name) <= twin_cap, read
    first = SMALL.first_read()
    assert read[0][1] == first.n_random + first.n_repeated + first.n_templates + first.n_repeated + first.n_templates
