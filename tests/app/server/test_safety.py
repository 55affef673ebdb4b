"""Safe on loopback: the Host must name the server (421), an Origin must be allowed (403), a POST must be
JSON (415), and no model id or error shows an absolute path."""

import json

import httpx
import pytest

from tests.app.server.test_errors import HELLO, error_of

JSON = {"Content-Type": "application/json"}


def get_models(s, **headers) -> httpx.Response:
    return httpx.get(s.url + "/models", headers=headers, timeout=60)


def test_a_host_that_does_not_name_the_server_gets_421(serve):
    s = serve()
    port = s.server.port
    for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}", f"LOCALHOST.:{port}"):
        assert get_models(s, Host=host).status_code == 200, host
    # DNS rebinding: a page's own name that now points at 127.0.0.1; the same names on another port.
    for host in (f"evil.example:{port}", "evil.example", f"localhost:{port + 1}", "localhost", ""):
        error = error_of(get_models(s, Host=host), 421)
        assert "does not name this server" in error["message"], host
    r = httpx.post(s.url + "/messages", json={}, headers={"Host": "evil.example"})
    assert r.status_code == 421 and r.json()["type"] == "error"  # Anthropic's shape on its route
    assert "--allowed-host evil.example" in r.json()["error"]["message"]


def test_allowed_host_adds_names_on_any_port(serve):
    s = serve(allowed_hosts=("chat.example", "*.lan"))
    for host in ("chat.example", "chat.example:443", "box.lan:8080"):
        assert get_models(s, Host=host).status_code == 200, host
    error_of(get_models(s, Host="other.example"), 421)


def test_an_origin_not_allowed_gets_403_without_cors_headers(serve):
    s = serve(cors_origins=("http://app.example",))
    r = get_models(s, Origin="http://evil.example")
    assert error_of(r, 403)["type"] == "permission_error" and "--cors-origin" in r.json()["error"]["message"]
    assert "access-control-allow-origin" not in r.headers
    body = {"messages": HELLO, "max_tokens": 2}
    r = httpx.post(s.url + "/chat/completions", json=body, headers={"Origin": "null"}, timeout=60)
    error_of(r, 403)
    ok = httpx.post(s.url + "/chat/completions", json=body, headers={"Origin": "http://app.example"}, timeout=60)
    assert ok.status_code == 200 and ok.headers["access-control-allow-origin"] == "http://app.example"
    assert get_models(s).status_code == 200  # no Origin: not a web page


@pytest.mark.parametrize(
    "content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None]
)
def test_a_post_whose_body_is_not_declared_json_gets_415(serve, content_type):
    s = serve()
    headers = {"Content-Type": content_type} if content_type else {}
    body = json.dumps({"messages": HELLO, "max_tokens": 2})
    for path in ("/chat/completions", "/completions", "/messages", "/messages/count_tokens"):
        r = httpx.post(s.url + path, content=body, headers=headers, timeout=60)
        assert r.status_code == 415, (path, r.text)
        assert "Content-Type must be application/json" in r.text
    ok = httpx.post(
        s.url + "/chat/completions", content=body, headers={"Content-Type": "application/json; charset=utf-8"}
    )
    assert ok.status_code == 200


def test_model_ids_and_errors_show_no_absolute_paths(serve, monkeypatch, tiny_model_path, chinwag_home):
    from engine import Engine

    engine = Engine()
    s = serve(engine=engine)
    ids = [m["id"] for m in get_models(s).json()["data"]]
    assert ids[0] == tiny_model_path.name and not [i for i in ids if i.startswith(("/", "~"))]
    model = engine._local.session.model

    def broken(self, *args, **kwargs):  # a bug in the engine: its line names the log file
        raise RuntimeError(f"a broken kernel in {tiny_model_path}/model.safetensors")

    monkeypatch.setattr(type(model), "__call__", broken)
    r = httpx.post(s.url + "/chat/completions", json={"messages": HELLO, "max_tokens": 2}, timeout=60)
    message = error_of(r, 500)["message"]
    assert "a broken kernel in model.safetensors" in message and "details are in chinwag.log" in message
    assert str(tiny_model_path) not in message and str(chinwag_home) not in message


def test_on_every_address_any_ip_and_the_machine_name_are_this_server():
    import socket

    from app.server.guard import HostCheck

    every = HostCheck("0.0.0.0", 8080)  # the window's "Allow other machines"
    machine = socket.gethostname()
    for host in ("192.168.1.10:8080", "[fe80::1]:8080", f"{machine}:8080", f"{machine}.local:8080", "localhost:8080"):
        assert every.allows(host), host
    for host in ("evil.example:8080", "192.168.1.10:8081", "192.168.1.10"):
        assert not every.allows(host), host
    one = HostCheck("192.168.1.10", 8080)  # --host given
    assert one.allows("192.168.1.10:8080") and one.allows("127.0.0.1:8080") and not one.allows("10.0.0.2:8080")
