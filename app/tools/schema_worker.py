"""The child process of app/tools/schema_check.py: checks tool results against output schemas.

One JSON request a line on stdin (`{"schema", "instance", "seconds"}`), one JSON reply a line on
stdout (`{"error": ""}` when the result conforms, else why not; `{"bug": traceback}` when the check
itself failed). Run as a script (`python -P schema_worker.py`): it imports only the standard library
and jsonschema, never Chinwag. `seconds` is a backstop: an alarm whose default action ends this
process, so a check whose parent gave up on it (or died) cannot run on for ever.
"""

import json
import signal
import sys
import traceback
from typing import Any

MAX_MESSAGE_CHARS = 500  # jsonschema's messages quote the instance, which may be megabytes
MAX_COMPILED = 32


def check(schema: dict[str, Any], instance: Any, compiled: dict[str, Any]) -> str:  # instance: any JSON value
    """The empty string if `instance` conforms to `schema`, else one line saying why (the SDK's checks)."""
    from jsonschema import SchemaError, exceptions  # type: ignore[import-untyped]  # jsonschema has no stubs
    from jsonschema.validators import validator_for  # type: ignore[import-untyped]
    from referencing import Registry
    from referencing.exceptions import Unresolvable

    key = json.dumps(schema, sort_keys=True)
    validator = compiled.get(key)
    if validator is None:
        cls = validator_for(schema)
        try:
            cls.check_schema(schema)
        except SchemaError as e:
            return f"its output schema is not a valid JSON Schema: {e.message}"
        # An empty registry: a $ref resolves within the schema (and the metaschemas), never over the network.
        validator = cls(schema, registry=Registry())
        if len(compiled) >= MAX_COMPILED:
            compiled.clear()
        compiled[key] = validator
    try:
        error = exceptions.best_match(validator.iter_errors(instance))
    except Unresolvable as e:
        return f"its output schema has a $ref that does not resolve: {e}"
    except RecursionError:
        return "its output schema or result is nested too deeply to check"
    return "" if error is None else f"its result does not match its output schema: {error.message}"


def main() -> None:
    compiled: dict[str, Any] = {}
    for line in sys.stdin:
        request = json.loads(line)
        signal.alarm(max(1, int(request["seconds"])))
        try:
            reply = {"error": check(request["schema"], request["instance"], compiled)[:MAX_MESSAGE_CHARS]}
        except Exception:  # noqa: BLE001 - any other failure is a bug, reported with its traceback to the parent
            reply = {"bug": traceback.format_exc()[-20_000:]}
        finally:
            signal.alarm(0)
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
