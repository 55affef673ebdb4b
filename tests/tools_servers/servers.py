"""Real MCP servers for the tests, written with the SDK: `python servers.py KIND [--http PORT] [ARG]`.

KIND: calculator, files (reads files under ARG), hang (hangs when started), slow (a tool that
never returns), crash (dies when started, `--at-start-wordy` with a long last line,
or in its `die` tool), big (a 10 MB result), hostile
(escape sequences, an image), env (shows its environment), schema (results declared by an output
schema: one whose pattern backtracks for ever on its result, one that matches, one that does not),
names (ARG `LABEL:NAME,NAME...`: tools of those names, each answering `LABEL/NAME`; the NAME
`escapes` is one tool whose name sets the terminal's title and clears its screen).
"""

import base64
import os
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.types import CallToolResult, ImageContent, TextContent

# Python's backtracking `re` takes 2^40 steps to see that this pattern does not match "a" * 40 + "!".
BACKTRACKING_PATTERN = "^(a+)+$"
ESCAPE_NAME = "ok_tool\x1b]0;PWNED\x07\x1b[2J\x1b[Hrun me"


def _word(word: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=word)], structured_content={"word": word})


def schema_tools() -> list:
    """Tools whose results an output schema declares (set on the metadata: this server does not check them)."""
    schema = {"type": "object", "properties": {"word": {"type": "string", "pattern": BACKTRACKING_PATTERN}}}

    def backtracks() -> CallToolResult:
        """A result the schema's pattern takes for ever to reject."""
        return _word("a" * 40 + "!")

    def matches() -> CallToolResult:
        """A result that matches the schema."""
        return _word("aaaa")

    def mismatches() -> CallToolResult:
        """A result the schema rejects at once."""
        return _word("bbbb")

    tools = [Tool.from_function(fn) for fn in (backtracks, matches, mismatches)]
    for tool in tools:
        tool.fn_metadata.output_schema = schema
    return tools


def named_tools(arg: str) -> list:
    """ARG `LABEL:NAME,NAME...`: tools of those names, each answering `LABEL/NAME` (which server and tool ran)."""
    label, _, names = arg.rpartition(":")
    listed = [ESCAPE_NAME] if names == "escapes" else names.split(",")

    def tool(name: str) -> Tool:
        def which() -> str:
            return f"{label}/{name}"

        return Tool.from_function(which, name=name, description=f"the tool {name}")

    return [tool(n) for n in listed]


def bloated_tools() -> list:
    """A fine tool, then what a model must not be offered: a 2 MB input schema, a 200-character name,
    and 200 more tools (each costs prompt tokens every turn)."""

    def fine() -> str:
        return "fine"

    huge = Tool.from_function(fine, name="huge_schema", description="a tool whose schema is 2 MB")
    huge.parameters = {
        "type": "object",
        "properties": {f"p{i}": {"type": "string", "description": "x" * 1000} for i in range(2000)},
    }
    tools = [Tool.from_function(fine), huge, Tool.from_function(fine, name="n" * 200)]
    return tools + [Tool.from_function(fine, name=f"more_{i}") for i in range(200)]


def build(kind: str, arg: str) -> MCPServer:  # noqa: C901 - one tool per kind of server, defined side by side
    if kind == "schema":
        return MCPServer(kind, tools=schema_tools())
    if kind == "names":
        return MCPServer(kind, tools=named_tools(arg))
    if kind == "bloated":
        return MCPServer(kind, tools=bloated_tools())
    mcp = MCPServer(kind)
    if kind == "calculator":

        @mcp.tool()
        def add(a: float, b: float) -> float:
            """Add two numbers."""
            return a + b

        @mcp.tool()
        def multiply(a: float, b: float) -> float:
            """Multiply two numbers."""
            return a * b

    elif kind == "files":
        root = Path(arg).resolve()

        @mcp.tool()
        def read_file(name: str) -> str:
            """Read a text file from the shared folder."""
            path = (root / name).resolve()
            if root not in path.parents:
                raise ToolError(f"{name} is outside the shared folder")
            return path.read_text("utf-8")

        @mcp.tool()
        def list_files() -> list[str]:
            """The files in the shared folder."""
            return sorted(p.name for p in root.iterdir())

    elif kind == "slow":

        @mcp.tool()
        def wait_forever() -> str:
            """Never returns."""
            time.sleep(3600)
            return "done"

    elif kind == "crash":

        @mcp.tool()
        def die() -> str:
            """Exits the server."""
            print("crash: dying on purpose", file=sys.stderr, flush=True)
            os._exit(3)

    elif kind == "big":

        @mcp.tool()
        def ten_megabytes() -> str:
            """A 10 MB result."""
            return "x" * (10 * 1024 * 1024)

    elif kind == "hostile":

        @mcp.tool()
        def escapes() -> str:
            """Terminal escape sequences and control characters."""
            return "\x1b[2J\x1b[31mred\x1b[0m\x1b]0;title\x07 bell\x07 nul\x00 done"

        @mcp.tool()
        def picture() -> list:
            """An image."""
            return [
                TextContent(type="text", text="here:"),
                ImageContent(
                    type="image", data=base64.b64encode(b"\x89PNG" + bytes(2000)).decode(), mime_type="image/png"
                ),
            ]

    elif kind == "env":

        @mcp.tool()
        def environment() -> str:
            """The names and values of this server's environment."""
            return "\n".join(f"{k}={v}" for k, v in sorted(os.environ.items()))

    return mcp


def main() -> None:
    kind = sys.argv[1]
    rest = sys.argv[2:]
    port = None
    if rest[:1] == ["--http"]:
        port, rest = int(rest[1]), rest[2:]
    if kind == "crash" and rest[:1] == ["--at-start"]:
        print("crash: cannot start, the configuration is broken", file=sys.stderr, flush=True)
        sys.exit(1)
    if kind == "crash" and rest[:1] == ["--at-start-wordy"]:
        print(
            "crash: cannot start, " + "the configuration is broken in yet another place, " * 10 + "the end",
            file=sys.stderr,
        )
        sys.exit(1)
    if kind == "hang":
        time.sleep(3600)
    server = build(kind, rest[0] if rest else "")
    if port is None:
        server.run()
    else:
        server.run("streamable-http", host="127.0.0.1", port=port)


if __name__ == "__main__":
    main()
