"""The MCP client against real servers written with the SDK (tests/tools_servers), stdio and HTTP."""

import asyncio
import json
import os
import sys

import pytest

from app.tools.client import ServerConnection, ToolHost
from app.tools.config import ServerConfig
from tests.tools_servers.launch import SCRIPT, http_server


def stdio(name: str, kind: str, *args: str, env=None) -> ServerConfig:
    return ServerConfig(name, command=sys.executable, args=(SCRIPT, kind, *args), env=env or {})


def run(body):
    return asyncio.run(body())


def test_stdio_calculator_lists_and_calls_tools():
    async def body():
        host = ToolHost([stdio("calc", "calculator")])
        try:
            assert await host.start() == {}
            names = sorted(t.name for t in host.tools)
            assert names == ["add", "multiply"]
            spec = host.find("multiply")
            assert spec.to_openai()["function"]["parameters"]["required"] == ["a", "b"]
            result = await host.call(spec, {"a": 6, "b": 7})
            assert (result.text, result.is_error) == ("42.0", False)
            bad = await host.call(spec, {"a": "six"})  # the server rejects it: an error result, no exception
            assert bad.is_error
        finally:
            await host.close()

    run(body)


def test_file_reader_reads_in_its_folder_only(tmp_path):
    (tmp_path / "notes.txt").write_text("the answer is 42\n")

    async def body():
        host = ToolHost([stdio("files", "files", str(tmp_path))])
        try:
            assert await host.start() == {}
            assert (await host.call(host.find("read_file"), {"name": "notes.txt"})).text == "the answer is 42\n"
            outside = await host.call(host.find("read_file"), {"name": "../../etc/passwd"})
            assert outside.is_error and "outside the shared folder" in outside.text
        finally:
            await host.close()

    run(body)


def test_http_server_and_a_name_two_servers_share():
    async def body(url):
        host = ToolHost([stdio("local", "calculator"), ServerConfig("remote", url=url)])
        try:
            assert await host.start() == {}
            names = sorted(t.name for t in host.tools)
            assert names == ["local__add", "local__multiply", "remote__add", "remote__multiply"]
            assert (await host.call(host.find("remote__add"), {"a": 1, "b": 2})).text == "3.0"
        finally:
            await host.close()

    with http_server("calculator") as url:
        asyncio.run(body(url))


def test_unreachable_http_server_gives_a_reason():
    from tests.tools_servers.launch import free_port

    async def body():
        conn = ServerConnection(ServerConfig("gone", url=f"http://127.0.0.1:{free_port()}/mcp"), start_timeout=20)
        assert not await conn.start()
        assert conn.error

    run(body)


def test_server_that_hangs_at_start_times_out_and_is_stopped():
    async def body():
        conn = ServerConnection(stdio("hang", "hang"), start_timeout=3)
        assert not await conn.start()
        assert "did not answer within 3 s" in conn.error
        assert not conn.running

    run(body)


def test_tool_that_hangs_times_out_and_the_server_keeps_working():
    async def body():
        host = ToolHost([stdio("slow", "slow"), stdio("calc", "calculator")])
        try:
            assert await host.start() == {}
            result = await host.call(host.find("wait_forever"), {}, timeout=1)
            assert result.is_error and "did not answer within 1 s" in result.text
            assert (await host.call(host.find("add"), {"a": 1, "b": 1})).text == "2.0"
        finally:
            await host.close()

    run(body)


def test_crash_at_start_and_mid_call_is_reported_and_can_restart():
    async def body():
        host = ToolHost([stdio("broken", "crash", "--at-start"), stdio("crashy", "crash")])
        try:
            failed = await host.start()
            assert list(failed) == ["broken"]
            assert "the configuration is broken" in failed["broken"]
            result = await host.call(host.find("die"), {})
            assert result.is_error and "crashy stopped" in result.text and "dying on purpose" in result.text
            assert host.find("die") is None  # its tools are gone until it restarts
            assert await host.restart("crashy")
            assert host.find("die") is not None
        finally:
            await host.close()

    run(body)


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_ten_megabyte_result_is_bounded(transport):
    async def body(config):
        host = ToolHost([config])
        try:
            assert await host.start() == {}
            result = await host.call(host.find("ten_megabytes"), {}, timeout=60)
            assert len(result.text) < 20_000
            if not result.is_error:  # over HTTP the SDK refuses an event that large: an error, in one line
                assert result.truncated and "10485760 characters" in result.text
        finally:
            await host.close()

    if transport == "stdio":
        asyncio.run(body(stdio("big", "big")))
    else:
        with http_server("big") as url:
            asyncio.run(body(ServerConfig("big", url=url)))


def test_hostile_output_is_neutralised_and_binary_described():
    async def body():
        host = ToolHost([stdio("hostile", "hostile")])
        try:
            await host.start()
            text = (await host.call(host.find("escapes"), {})).text
            assert "\x1b" not in text and "\x00" not in text and "\x07" not in text
            assert "red" in text and "done" in text
            picture = (await host.call(host.find("picture"), {})).text
            assert "[image: image/png, 2.0 KB, not shown]" in picture and "iVBOR" not in picture
        finally:
            await host.close()

    run(body)


def test_environment_comes_only_from_the_configuration(monkeypatch):
    monkeypatch.setenv("CHINWAG_TEST_SECRET", "do-not-leak")

    async def body():
        host = ToolHost([stdio("env", "env", env={"GIVEN": "yes"})])
        try:
            await host.start()
            text = (await host.call(host.find("environment"), {})).text
            assert "GIVEN=yes" in text
            assert "do-not-leak" not in text and "CHINWAG_HOME" not in text
        finally:
            await host.close()

    run(body)


def test_no_orphan_processes_after_close():
    async def body():
        host = ToolHost([stdio("calc", "calculator"), stdio("slow", "slow")])
        await host.start()
        call = asyncio.create_task(host.call(host.find("wait_forever"), {}, timeout=30))
        await asyncio.sleep(0.5)
        await host.close()
        await asyncio.wait_for(call, 10)  # a call in flight ends when its server stops

    before = _children()
    run(body)
    assert _children() - before == set()


def _children() -> set:
    me = str(os.getpid())
    found = set()
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[1] == me and fields[0] != "Z":
                found.add(entry)
    return found


def backtracking_call() -> None:
    """A call whose result the output schema's pattern takes for ever to reject, with a ticker beside it
    (run in a child process by the test: a frozen loop holds the GIL, so no thread could time it out)."""
    import time

    async def body():
        conn = ServerConnection(stdio("schema", "schema"))
        ticks: list = []

        async def ticker():
            while True:
                ticks.append(time.monotonic())
                await asyncio.sleep(0.05)

        try:
            assert await conn.start()
            tick = asyncio.create_task(ticker())
            started = time.monotonic()
            result = await conn.call("backtracks", {}, timeout=5)
            took = time.monotonic() - started
            tick.cancel()
            assert result.is_error and "output schema" in result.text and "5 s" in result.text, result.text
            assert 4 < took < 5 + 10, took  # the timeout, give or take a loaded machine
            gaps = [b - a for a, b in zip(ticks, ticks[1:])]
            assert max(gaps) < 2, f"the loop stood still for {max(gaps):.1f} s"
        finally:
            await conn.stop()

    run(body)


@pytest.mark.timing
def test_an_output_schema_that_backtracks_cannot_freeze_the_loop_past_the_timeout():
    import subprocess

    code = "from tests.app.tools.test_mcp_client import backtracking_call; backtracking_call()"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("the call was still running after 60 s (its timeout was 5 s)")
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_result_is_checked_against_its_output_schema():
    async def body():
        conn = ServerConnection(stdio("schema", "schema"))
        try:
            assert await conn.start()
            assert (await conn.call("matches", {})).text == "aaaa"
            wrong = await conn.call("mismatches", {})
            assert wrong.is_error and "does not match its output schema" in wrong.text and "bbbb" in wrong.text
        finally:
            await conn.stop()

    run(body)


def test_after_a_check_runs_out_of_time_the_next_is_checked_and_nothing_is_left_running():
    async def body():
        conn = ServerConnection(stdio("schema", "schema"))
        try:
            assert await conn.start()
            assert "within 3 s" in (await conn.call("backtracks", {}, timeout=3)).text
            assert (await conn.call("matches", {})).text == "aaaa"
        finally:
            await conn.stop()
            conn.close_log()

    before = _children()
    run(body)
    assert _children() - before == set()


def test_names_offered_to_the_model_are_unique_and_each_reaches_its_own_server():
    async def body():
        host = ToolHost([stdio("a", "names", "a:x"), stdio("b", "names", "b:x"), stdio("c", "names", "c:a__x")])
        try:
            assert await host.start() == {}
            names = [t.name for t in host.tools]
            assert len(names) == len(set(names)) == 3, names
            for spec in host.tools:
                assert (await host.call(host.find(spec.name), {})).text == f"{spec.server}/{spec.tool}"
        finally:
            await host.close()

    run(body)


def test_a_qualified_name_that_is_still_shared_is_numbered():
    from app.tools.client import model_names

    pairs = [("a__b", "x"), ("d", "x"), ("a", "b__x"), ("e", "b__x"), ("f", "y")]
    assert model_names(pairs) == ["a__b__x", "d__x", "a__b__x_2", "e__b__x", "y"]


def test_a_long_last_line_is_cut_with_an_ellipsis():
    async def body():
        conn = ServerConnection(stdio("wordy", "crash", "--at-start-wordy"))
        assert not await conn.start()
        conn.close_log()
        return conn.error

    error = run(body)
    assert error.endswith("…)") and "the end" not in error and "its last words: crash: cannot start" in error


def test_a_server_cannot_put_megabytes_of_tools_into_every_prompt():
    """Issue 35, re-tried: descriptions were capped, but an input schema of 2 MB, a 200-character name
    or a thousand tools went into every prompt."""
    from app.tools.client import MAX_TOOLS

    async def body():
        host = ToolHost([stdio("big", "bloated")])
        try:
            assert await host.start() == {}
            return host.tools, host.connections["big"].left_out
        finally:
            await host.close()

    tools, left_out = run(body)
    names = [t.name for t in tools]
    assert names[0] == "fine" and "huge_schema" not in names and "n" * 200 not in names
    assert len(tools) == MAX_TOOLS and sum(len(json.dumps(t.to_openai())) for t in tools) < 64_000
    assert any(line.startswith("huge_schema: its input schema is 2.") for line in left_out)
    assert any("its name is 200 characters (at most 64)" in line for line in left_out)
    assert left_out[-1].endswith(f"and later tools: the server lists over {MAX_TOOLS}")
