"""A tool's structured result checked against its declared output schema, off the event loop, in time.

The MCP SDK checks a `CallToolResult` against the tool's `outputSchema` with jsonschema, on the
event loop, inside `ClientSession.call_tool`: a schema from the server can then freeze the loop
(and the window that shares it) for as long as it likes, out of reach of `asyncio.wait_for`. A
`pattern` such as `^(a+)+$` against "aaaa…a!" makes Python's backtracking `re` take 2^n steps.

Why a child process, and not the alternatives:
- a thread: `re` holds the GIL while it matches, so the loop would stand still all the same; and a
  thread cannot be stopped, so every such check would keep a core busy for ever;
- a regex engine without backtracking (google-re2): it bounds `pattern` and `patternProperties`,
  but not the rest of JSON Schema (nested `anyOf` through `$ref` is exponential with no regex at
  all), and jsonschema calls `re` itself in more places than a validator can override;
- a process per check: a fresh interpreter for every call.
So one child per server connection (app/tools/schema_worker.py, the standard library and
jsonschema only) checks results one at a time; a check that overruns the call's time is ended by
killing the child, and the next check starts a new one. The child also sets an alarm of its own, so
it ends even if Chinwag dies first.
"""

import asyncio
import contextlib
import json
import math
import sys
from pathlib import Path
from typing import Any

WORKER = str(Path(__file__).with_name("schema_worker.py"))
REPLY_LIMIT = 1 << 20  # bytes of one reply line (a bug's traceback at most)


class CheckerBug(RuntimeError):
    """The check itself failed in the child (its traceback is the message), or the child died."""


class SchemaChecker:
    """One child process that checks results against output schemas; `check()`, then `close()`."""

    def __init__(self) -> None:
        self._proc: asyncio.subprocess.Process | None = None
        self._lock = asyncio.Lock()

    async def check(self, schema: dict[str, Any], instance: Any, timeout: float) -> str:  # instance: a JSON value
        """The empty string if `instance` conforms to `schema`, else one line saying why not.

        TimeoutError when no answer comes within `timeout` s (the child is killed); CheckerBug when
        the check fails in the child.
        """
        async with asyncio.timeout(timeout):
            async with self._lock:
                try:
                    return await self._ask(schema, instance, timeout)
                except BaseException:  # timed out, cancelled or broken mid-exchange: the child's state is unknown
                    await self.close()
                    raise

    async def _ask(self, schema: dict[str, Any], instance: Any, timeout: float) -> str:  # instance: a JSON value
        if self._proc is None or self._proc.returncode is not None:
            self._proc = await asyncio.create_subprocess_exec(
                sys.executable,
                "-P",  # the script's folder is not put on sys.path: app/tools/ shadows nothing
                WORKER,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL,
                limit=REPLY_LIMIT,
            )
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        request = {"schema": schema, "instance": instance, "seconds": math.ceil(timeout) + 1}
        proc.stdin.write(json.dumps(request).encode() + b"\n")
        await proc.stdin.drain()
        line = await proc.stdout.readline()
        if not line:
            code = await proc.wait()
            raise CheckerBug(f"the output schema checker ended (exit status {code}) before it answered")
        reply = json.loads(line)
        if "bug" in reply:
            trace = str(reply["bug"]).strip()
            raise CheckerBug(f"{trace.splitlines()[-1] if trace else 'no traceback'} in the schema checker\n{trace}")
        return str(reply["error"])

    async def close(self) -> None:
        """End the child (killed: a check in progress is of no use now)."""
        proc, self._proc = self._proc, None
        if proc is None or proc.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        with contextlib.suppress(Exception):
            await asyncio.shield(asyncio.wait_for(proc.wait(), 5))
