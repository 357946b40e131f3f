"""The census's previous-token, duplicate-token and induction scores against an established implementation:
TransformerLens's head detector (`transformer_lens.head_detector.detect_head`, test-only dependency), run by
TransformerLens on its own bridge over the same weights, on the census's own inputs.

The two define the scores differently, so each comparison states the factor between them and checks it exactly:

    TransformerLens, error_measure "mul" (its default): sum(attention * detection pattern) / sum(attention), over the
    whole (T, T) pattern of one prompt; every row sums to 1, so the denominator is T, the number of query rows,
    including rows where the pattern is all zero (no previous token, no earlier copy).

    ours: the mean over only the query rows the score is about (`analysis.census`):
      previous   att[q, q - 1] over q = 2..T-1 (query 1's previous token is position 0, [CLS] / the sink: left out);
                 TL's previous_token_head pattern has ones at (q, q - 1) for q = 1..T-1. So
                 TL * T = ours * (T - 2) + att[1, 0]; and with TL given our pattern (ones from q = 2 on) as a custom
                 detection pattern, TL * T = ours * (T - 2).
      duplicate  on m distinct words said twice: at each second occurrence, att on the first occurrence, mean over
                 the m second-copy queries. TL's duplicate_token_head pattern marks every earlier copy of the query's
                 token; in these inputs that is exactly one key per second-copy query and none elsewhere ([CLS] and
                 [SEP] occur once), so TL * T = ours * m.
      induction  the same queries, att on the token after the first occurrence; TL's induction_head pattern is the
                 duplicate pattern shifted one key to the right, the same keys, so TL * T = ours * m.
The census pools inputs by averaging the per-input values, so its (L, H) score is the mean of the rescaled TL values.
"""
import json

import pytest
import torch

from mha_viz import CensusConfig, head_census, load_model
from mha_viz.analysis.census_run import census_inputs

tl = pytest.importorskip("transformer_lens")

# first=1.0, rounds=0: the census reads every input of `census_inputs` at once, the inputs re-derived here
CONFIG = CensusConfig(n_random=4, random_length=12, n_repeated=4, repeated_lengths=(4, 7), n_templates=2, n_loss=1,
                      n_other_sets=1, n_boot=10, first=1.0, rounds=0)
TEXTS = ["The cat sat on the mat."]


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """A GPT-2-style user's folder, random weights with sharpened queries (so heads differ: GPT-2's N(0, 0.02)
    initialisation attends almost uniformly), MiniLM's tokenizer; and TransformerLens's bridge over the same folder."""
    import transformers
    from transformer_lens.model_bridge import TransformerBridge

    from tests.models.conftest import save_user_folder

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(7)
        lm = transformers.GPT2LMHeadModel(transformers.GPT2Config(vocab_size=30522, n_embd=48, n_layer=2, n_head=4,
                                                                  n_positions=64))
        with torch.no_grad():
            for block in lm.transformer.h:
                block.attn.c_attn.weight[:, :48] *= 40.0  # the query columns of the fused (D, 3D) Conv1D weight
    folder = save_user_folder(lm, tmp_path_factory.mktemp("tl") / "gpt2")
    # MiniLM's tokenizer hands out token_type_ids, which GPT-2 would embed with its word embedding (type 0 adds the
    # embedding of token 0 everywhere); a GPT-2 tokenizer gives none, and neither does TransformerLens's forward.
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["model_input_names"] = ["input_ids", "attention_mask"]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    hf = transformers.GPT2LMHeadModel.from_pretrained(folder, attn_implementation="eager").eval()
    bridge = TransformerBridge.boot_transformers(str(folder), hf_model=hf,
                                                 tokenizer=transformers.AutoTokenizer.from_pretrained(folder))
    # Tokens exactly as the tokenizer makes them ([CLS] words [SEP]), as mha-viz reads them: no BOS added or removed.
    bridge.cfg.default_prepend_bos = False
    bridge.cfg.tokenizer_prepends_bos = False
    return load_model(str(folder)), bridge


def _tl(bridge, text, pattern):
    from transformer_lens.head_detector import detect_head

    return detect_head(bridge, text, pattern).float()  # (L, H)


def test_the_inputs_are_the_same_tokens_and_the_same_attention(gpt2):
    model, bridge = gpt2
    sets = census_inputs(model, 0, CONFIG, TEXTS)
    for item in sets["random"] + sets["repeated"]:
        tokens = bridge.to_tokens(item.text)
        run = model.run(item.text)
        assert tokens[0].tolist() == run.token_ids
        _, cache = bridge.run_with_cache(tokens, remove_batch_dim=True)
        for layer in range(model.n_layers):
            torch.testing.assert_close(run.attentions[layer], cache["pattern", layer, "attn"], atol=1e-5, rtol=0)


def test_previous_duplicate_and_induction_equal_transformer_lens_after_the_stated_factor(gpt2):
    model, bridge = gpt2
    census = head_census(model, texts=TEXTS, seed=0, config=CONFIG, control=None)
    sets = census_inputs(model, 0, CONFIG, TEXTS)
    assert census.skipped == 0

    named, custom = [], []
    for item in sets["random"]:
        t = len(item.words) + 2  # [CLS] words [SEP]
        first = model.run(item.text).attentions[:, :, 1, 0]  # (L, H): query 1 on position 0, which TL counts
        named.append((_tl(bridge, item.text, "previous_token_head") * t - first) / (t - 2))
        ours_pattern = torch.zeros(t, t)
        ours_pattern[torch.arange(2, t), torch.arange(1, t - 1)] = 1.0  # (q, q - 1) from q = 2 on
        custom.append(_tl(bridge, item.text, ours_pattern) * t / (t - 2))
    torch.testing.assert_close(census.scores["previous"], torch.stack(named).mean(0), atol=1e-5, rtol=0)
    torch.testing.assert_close(census.scores["previous"], torch.stack(custom).mean(0), atol=1e-5, rtol=0)

    for name, pattern in (("duplicate", "duplicate_token_head"), ("induction", "induction_head")):
        per_input = []
        for item in sets["repeated"]:
            m, t = len(item.words) // 2, len(item.words) + 2
            per_input.append(_tl(bridge, item.text, pattern) * t / m)
        torch.testing.assert_close(census.scores[name], torch.stack(per_input).mean(0), atol=1e-5, rtol=0)

    # Not a comparison of near-uniform heads: the sharpened heads score differently from one another (by 0.04-0.2).
    for name in ("previous", "duplicate", "induction"):
        assert float(census.scores[name].max() - census.scores[name].min()) > 0.02, name
