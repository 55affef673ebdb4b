"""engine/remote/errors.py: a chat request's failures as one line naming the server, never the key."""

from engine.errors import ContextOverflowError
from engine.remote.errors import ServerError, chat_error
from engine.remote.servers import Server

SERVER = Server("studio", "http://studio.lan:8080/v1", api_key="sk-secret")


def test_an_overlong_history_is_a_context_overflow():
    error = chat_error(ServerError(400, b'{"error": "maximum context length is 4096 tokens"}'), SERVER, "m")
    assert isinstance(error, ContextOverflowError)
    assert str(error).startswith("server studio: the history is too long: HTTP 400")


def test_a_404_names_the_unknown_model():
    error = chat_error(ServerError(404, b'{"detail": "Not Found"}'), SERVER, "qwen")
    assert not isinstance(error, ContextOverflowError)
    assert str(error) == "server studio: unknown model 'qwen' (HTTP 404: Not Found)"


def test_the_key_never_appears():
    error = chat_error(ServerError(401, b'{"error": "bad key"}'), SERVER, "m")
    assert "sk-secret" not in str(error) and "check the server's API key" in str(error)


def test_redact_removes_the_key_in_every_form_and_any_echoed_credential():
    from engine.remote.errors import redact

    key = "sk-secret/+key"
    text = f"got {key} and sk-secret%2F%2Bkey, header 'Bearer other-token-123' Basic dXNlcjpwYXNz"
    assert redact(text, key) == "got [redacted] and [redacted], header 'Bearer [redacted]' Basic [redacted]"
    assert redact("Invalid bearer token provided", key) == "Invalid bearer token provided"
    assert redact(f"{key}\n", f"{key}\n") == "[redacted]\n"


def test_a_key_a_header_cannot_carry_is_named_never_shown():
    import pytest

    from engine.errors import ChinwagError
    from engine.remote.errors import check_key, headers_for

    assert check_key("  sk-abc\n") == "sk-abc"
    for bad in ("sk-a\nb", "sk-\x00", "sk-ключ", "sk-\u200b"):
        with pytest.raises(ChinwagError) as e:
            headers_for(bad, "lab")
        assert str(e.value).startswith("the saved API key of server lab has a") and "sk-" not in str(e.value)
