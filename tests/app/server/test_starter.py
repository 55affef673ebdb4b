"""One short end-to-end check on the real starter model: a real reply, and the follow-up's cached tokens."""

import openai
import pytest

pytestmark = pytest.mark.starter


def test_starter_follow_up_reports_cached_tokens(serve):
    from engine.models.folders import STARTER_ID

    s = serve(model=STARTER_ID)
    c = openai.OpenAI(base_url=s.url, api_key="none", max_retries=0, timeout=300)
    messages = [{"role": "user", "content": "What is the capital of France? One word."}]
    first = c.chat.completions.create(model=STARTER_ID, messages=messages, max_tokens=8, temperature=0)
    assert "paris" in first.choices[0].message.content.lower()
    messages += [{"role": "assistant", "content": first.choices[0].message.content}]
    messages += [{"role": "user", "content": "And of Italy?"}]
    second = c.chat.completions.create(model=STARTER_ID, messages=messages, max_tokens=8, temperature=0)
    assert second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens
