"""Prompt ids from the exact ids of each message as the model saw it, keyed by position."""

import pytest

from engine.context.prompt import History, build, render, split_render

SYSTEM = {"role": "system", "content": "You are a friendly assistant."}
EOS_TEXT = "<|im_end|>"


def turn(tokenizer, history, messages, reply_text, reply_ids):
    """What Session.chat does: the prompt for `messages`, then the reply recorded after it."""
    prompt = build(tokenizer, messages, list(range(len(messages))), history)
    eos = set(tokenizer.eos_token_ids)
    history.record_reply(len(messages), prompt.tail, prompt.tail_ids, reply_text, reply_ids, eos)
    return prompt.ids + list(reply_ids)  # what the cache holds after the turn


def odd_ids(tokenizer, text):
    """A valid but non-canonical tokenization (one token per character), as a model may generate."""
    return [i for ch in text for i in tokenizer.encode(ch, add_special_tokens=False)]


def test_pieces_reproduce_the_rendered_template(tiny_model):
    _, tokenizer = tiny_model
    messages = [
        SYSTEM,
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "Hello"},
    ]
    prefixes, tail = split_render(tokenizer, messages)
    assert len(prefixes) == 4
    assert "".join(p + m["content"] for p, m in zip(prefixes, messages)) + tail == render(tokenizer, messages)
    assert tail.endswith("<|im_start|>assistant\n")


def test_reply_text_inside_an_earlier_user_message_keeps_the_cached_prefix(tiny_model):
    # The first example: the user asks for the exact text the model then replies.
    _, tokenizer = tiny_model
    eos = min(tokenizer.eos_token_ids)
    history = History()
    messages = [SYSTEM, {"role": "user", "content": "Repeat after me exactly: I like green apples."}]
    reply = "I like green apples."
    generated = odd_ids(tokenizer, reply) + [eos]
    assert generated[:-1] != tokenizer.encode(reply, add_special_tokens=False)
    held = turn(tokenizer, history, messages, reply, generated)
    messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": "Why is the sky blue?"}]
    prompt = build(tokenizer, messages, list(range(4)), history)
    assert prompt.ids[: len(held)] == held
    # The user's message keeps its own ids: the reply's ids were not spliced into it.
    first_user = tokenizer.encode(messages[1]["content"], add_special_tokens=False)
    assert any(prompt.ids[i : i + len(first_user)] == first_user for i in range(len(prompt.ids)))


def test_equal_reply_texts_with_different_ids_keep_their_own_ids(tiny_model):
    # The second example: two replies cut inside the same emoji both read "\ufffd".
    _, tokenizer = tiny_model
    emoji_ids = tokenizer.encode("\U0001f34f", add_special_tokens=False)
    assert len(emoji_ids) >= 2
    history = History()
    messages = [SYSTEM, {"role": "user", "content": "Show me an apple"}]
    held = turn(tokenizer, history, messages, "\ufffd", emoji_ids[:1])
    messages += [{"role": "assistant", "content": "\ufffd"}, {"role": "user", "content": "Again"}]
    prompt2 = build(tokenizer, messages, list(range(4)), history)
    assert prompt2.ids[: len(held)] == held
    held = turn(tokenizer, history, messages, "\ufffd", emoji_ids[:2])
    messages += [{"role": "assistant", "content": "\ufffd"}, {"role": "user", "content": "Thanks"}]
    prompt3 = build(tokenizer, messages, list(range(6)), history)
    assert prompt3.ids[: len(held)] == held


def test_an_edited_message_is_tokenized_again(tiny_model):
    _, tokenizer = tiny_model
    history = History()
    messages = [SYSTEM, {"role": "user", "content": "What is the capital of France?"}]
    turn(tokenizer, history, messages, "Paris", odd_ids(tokenizer, "Paris"))
    edited = [SYSTEM, {"role": "user", "content": "What is the capital of Spain?"}]
    prompt = build(tokenizer, edited, [0, 1], history)
    assert prompt.ids == tokenizer.encode(render(tokenizer, edited), add_special_tokens=False)


def upper_template(tokenizer):
    """`tokenizer` with a template that upper-cases user content: it cannot be cut at a user message."""

    class Upper:
        chat_template = "x"
        eos_token_ids = tokenizer.eos_token_ids

        def apply_chat_template(self, messages, **kwargs):
            return tokenizer.apply_chat_template(
                [dict(m, content=m["content"].upper()) if m["role"] == "user" else m for m in messages], **kwargs
            )

        def encode(self, text, **kwargs):
            return tokenizer.encode(text, **kwargs)

    return Upper()


def test_a_template_that_rewrites_content_falls_back_to_plain_tokenization(tiny_model):
    _, tokenizer = tiny_model
    messages = [SYSTEM, {"role": "user", "content": "hello"}]
    prompt = build(upper_template(tokenizer), messages, [0, 1], History())
    assert not prompt.complete and len(prompt.lengths) == 1
    assert prompt.ids[prompt.lengths[0] :] == tokenizer.encode(prompt.tail, add_special_tokens=False)
    assert "HELLO" in prompt.tail


@pytest.mark.parametrize("start", [0, 3])
def test_history_survives_json(tiny_model, start):
    _, tokenizer = tiny_model
    history = History(start=start)
    turn(tokenizer, history, [SYSTEM, {"role": "user", "content": "Hi"}], "Hey", odd_ids(tokenizer, "Hey"))
    again = History.from_json(history.to_json())
    assert again == history


def test_check_messages_gives_chat_messages_with_their_tool_fields_and_the_same_one_line_errors():
    from engine.context.prompt import check_messages, template_messages
    from engine.errors import ChinwagError
    from engine.types import ChatMessage, Role, ToolCall

    given = [
        {"role": "user", "content": "add 2 and 3\ud800"},
        {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 2}}]},
        {"role": "tool", "content": "5", "tool_call_id": "c1", "name": "add"},
    ]
    checked = check_messages(given)
    assert checked == [
        ChatMessage(Role.USER, "add 2 and 3\ufffd"),  # a lone surrogate cannot be tokenized
        ChatMessage(Role.ASSISTANT, "", (ToolCall("c1", "add", '{"a": 2}'),)),
        ChatMessage(Role.TOOL, "5", tool_call_id="c1", name="add"),
    ]
    assert check_messages(checked) == checked
    # The local template is given role and content only, as before: the prompt's text is unchanged.
    assert template_messages(given) == [
        {"role": "user", "content": "add 2 and 3\ufffd"},
        {"role": "assistant", "content": ""},
        {"role": "tool", "content": "5"},
    ]
    assert all(type(m["role"]) is str for m in template_messages(checked))
    for bad, said in [
        ([], "the message list is empty: a chat needs at least one message"),
        ("text", "the message list is empty"),
        (
            [{"role": "wizard", "content": "x"}],
            "message 0 must be {'role': system|user|assistant|tool, 'content': str}",
        ),
        ([{"role": "user", "content": 5}], "message 0 must be {'role'"),
        ([{"role": "system", "content": "only"}], "the message list has no user message"),
        (
            [{"role": "assistant", "content": "x", "tool_calls": [{"id": "c"}]}],
            "message 0.tool_calls[0] has no function name",
        ),
    ]:
        with pytest.raises(
            ChinwagError, match="^" + said.replace("[", r"\[").replace("|", r"\|").replace("{", r"\{")
        ) as e:
            check_messages(bad)
        assert "\n" not in str(e.value)
