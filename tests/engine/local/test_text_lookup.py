"""The text lookup: drafts of a whitespace-only edit, copied from the prompt as the model respaces it."""

import pytest

from engine.local.speculative import Sampling, Speculator, Verdict, VerifyCost
from engine.local.text_lookup import TextLookup

CRAMPED = "def total(a,b):\n  s=a+b\n  t=s*2\n  for i in range(t):\n    print(i)\n  return t\n"


@pytest.fixture(scope="module")
def tokenizer(tiny_model_path):
    from mlx_lm.utils import load_tokenizer

    return load_tokenizer(tiny_model_path)


def lookup_after(tokenizer, reply: str) -> TextLookup:
    lookup = TextLookup(tokenizer, tokenizer.encode("Reformat this:\n" + CRAMPED, add_special_tokens=False))
    lookup.extend(tokenizer.encode(reply, add_special_tokens=False))
    return lookup


def drafted(tokenizer, lookup: TextLookup, k: int = 8) -> str:
    return tokenizer.decode(lookup.propose(k))


def test_a_reformat_is_drafted_spaced_as_the_model_spaced_it_so_far(tokenizer):
    lookup = lookup_after(tokenizer, "def total(a, b):\n    s = a + b\n    t")
    text = drafted(tokenizer, lookup)
    assert len(text) >= 6 and " = s * 2\n    for i in range(t):".startswith(text), repr(text)


def test_a_deeper_indentation_follows_the_ratio_the_model_reindented_by(tokenizer):
    lookup = lookup_after(tokenizer, "def total(a, b):\n    s = a + b\n    t = s * 2\n    for i in range(t):")
    text = drafted(tokenizer, lookup, 12)
    assert text.startswith("\n        print") or "\n        print(i)".startswith(text), repr(text)


def test_text_the_prompt_does_not_hold_drafts_nothing(tokenizer):
    lookup = lookup_after(tokenizer, "Something else entirely, with words")
    assert lookup.propose(8) == [] and lookup.length == 0


def test_the_reply_s_own_spacing_after_its_last_character_is_not_drafted_again(tokenizer):
    lookup = lookup_after(tokenizer, "def total(a, b):\n    s = a + b\n    t ")  # the space is written
    text = drafted(tokenizer, lookup)
    assert text and "= s * 2\n    for".startswith(text), repr(text)


def replay_drafts(tokenizer, prompt: list, reply: list, with_text: bool) -> int:
    """Tokens accepted when `reply` is decoded greedily (the model's choice is the reply's next
    token), at a CPU's default pass costs."""
    cost = VerifyCost("cpu")
    sampling = Sampling(0.0, 1.0, 0, 0.0, [], 20)
    spec = Speculator(prompt, sampling, cost=cost, tokenizer=tokenizer if with_text else None)
    spec.observe(reply[0])
    i = 1
    while i < len(reply):
        draft = spec.draft(reply[i], len(reply) - i - 1) if spec.drafting else []
        if not draft:
            spec.observe(reply[i])
            i += 1
            continue
        n = 0
        while n < len(draft) and draft[n] == reply[i + 1 + n]:
            n += 1
        spec.judged(draft, Verdict(n, reply[i + 1 + n] if i + 1 + n < len(reply) else 0))
        i += 1 + n
    return spec.accepted


def test_a_reformat_s_drafts_are_accepted_with_the_text_lookup_and_not_without(tokenizer):
    prompt = tokenizer.encode("Reformat this:\n" + CRAMPED + "\nHere it is:\n", add_special_tokens=False)
    reformatted = (
        "def total(a, b):\n    s = a + b\n    t = s * 2\n    for i in range(t):\n        print(i)\n    return t\n"
    )
    reply = tokenizer.encode(reformatted, add_special_tokens=False)
    with_text, without = (replay_drafts(tokenizer, prompt, reply, flag) for flag in (True, False))
    assert with_text >= 1.3 * without, (with_text, without, len(reply))
