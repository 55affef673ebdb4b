"""The `chinwag` command line. With no subcommand it opens the window; subcommands never import Qt
(except `export --format pdf`, which needs Qt to print)."""

import argparse
import asyncio
import json
import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.cli import fit
from app.cli.parser import MODEL_HELP, PROG, OneLineParser, fail
from app.cli.progress import TerminalProgress
from app.core.sizes import format_bytes
from engine import ChinwagError, Engine, GenerationParams, PrefillProgress, TextDelta, TurnStats
from engine.atomic import describe_kind
from engine.types import MAX_KV_INITIAL_CAPACITY, ModelStatus, ParamSpec, param_specs

if TYPE_CHECKING:
    from app.core.document_block import Attachment
    from app.documents.retrieval import Index

BROKEN_PIPE_STATUS = 141  # 128 + SIGPIPE: what a shell shows for a writer whose reader left


MAX_PAUSE_SECONDS = 3600  # a reader's pause; longer is a typo that would hang the replay


def _seconds(value: str) -> float:
    try:
        n = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number of seconds, got {value!r}") from None
    if not 0 <= n <= MAX_PAUSE_SECONDS:
        raise argparse.ArgumentTypeError(f"must be from 0 to {MAX_PAUSE_SECONDS} seconds, got {value}")
    return n


def _capacity(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number of positions, got {value!r}") from None
    if not 1 <= n <= MAX_KV_INITIAL_CAPACITY:
        raise argparse.ArgumentTypeError(f"must be from 1 to {MAX_KV_INITIAL_CAPACITY} positions, got {n}")
    return n


def _flag_type(spec: ParamSpec) -> Callable[[str], object]:
    def convert(text: str) -> object:
        try:
            return spec.convert(text)
        except ChinwagError as e:  # argparse prints it with the flag and exits with status 2
            raise argparse.ArgumentTypeError(str(e)) from e

    convert.__name__ = spec.kind.__name__
    return convert


def _add_sampling(p: argparse.ArgumentParser, defaults: GenerationParams) -> None:
    """One flag per GenerationParams field (--top-p for top_p), with its help and range."""
    for spec in param_specs():
        default = getattr(defaults, spec.name)
        p.add_argument(
            "--" + spec.name.replace("_", "-"),
            type=_flag_type(spec),
            default=default,
            help=spec.help + ("" if default is None else f" (default: {default})"),
        )
    p.add_argument(
        "--kv-initial-capacity",
        type=_capacity,
        default=None,
        help="KV cache positions reserved per conversation at first (default: sized to the chat)",
    )
    fit.add_flags(p)
    p.add_argument(
        "--no-speculative",
        action="store_true",
        help="decode one token per step (speculative decoding is on where it is faster)",
    )
    p.add_argument(
        "--draft-model",
        default="",
        metavar="M",
        help="a smaller model with the same tokenizer that drafts tokens for speculative decoding",
    )


def _params(args: argparse.Namespace) -> GenerationParams:
    return GenerationParams(
        **{spec.name: getattr(args, spec.name) for spec in param_specs()},
        speculative=False if args.no_speculative else None,
        draft_model=args.draft_model,
    )


# --- chinwag models / import -------------------------------------------------


def cmd_models(args: argparse.Namespace) -> int:
    from engine.models import fit as fit_limit
    from engine.models import registry
    from engine.remote import servers

    models = registry.list_models() + servers.server_models()
    limit, kv = fit.memory_limit(args), fit.kv_quantization(args)  # a bad one: one line, exit 2
    limit = fit_limit.default_limit() if limit is None else limit  # read once: every model judged alike
    fits = [fit.model_fit(m.path, m.context_length, limit, kv, m.name or m.id) for m in models]
    if args.json:
        print(json.dumps([{**m.to_json(), "fit": f} for m, f in zip(models, fits)], indent=2))
        return 0
    from engine.models.gguf.header import printable

    for m, listed in zip(models, fits):
        size = format_bytes(m.size_bytes) if m.size_bytes else "-"
        detail = m.reason if m.status == ModelStatus.UNUSABLE else (m.quantization or (m.path if m.server else ""))
        refused = (listed or {}).get("reason", "")
        detail = refused or detail  # what a load would say, before one is tried (as the Model menu greys it)
        # A server that lists no model has no model id to show: name the server instead.
        name = f"{m.server} (server)" if m.server and m.id == f"{m.server}/" else m.id
        # Folder names come from disk: no escape sequence of theirs reaches the terminal.
        print(f"{printable(name, 400):40} {m.status:12} {size:>9}  {printable(detail, 400)}")
    return 0


async def _import(args: argparse.Namespace) -> int:
    engine = Engine()
    progress = TerminalProgress()
    try:
        info = await engine.import_gguf(args.path, progress=progress)
    finally:
        progress.finish()
        await engine.close()
    print(f"imported {info.name} as {info.id} in {info.path}")
    return 0


# --- chinwag chat ------------------------------------------------------------


# --- chinwag replay ----------------------------------------------------------


def _read_script(path: str) -> bytes:
    try:
        mode = Path(path).stat().st_mode
        if not stat.S_ISREG(mode):  # a named pipe would wait forever, a device never ends
            raise ChinwagError(f"cannot read script {path}: it is {describe_kind(mode)}, not a file")
        return Path(path).read_bytes()
    except OSError as e:
        raise ChinwagError(f"cannot read script {path}: {e.strerror or e}") from e
    except ValueError as e:  # a NUL byte in the name
        raise ChinwagError(f"cannot read script {path!r}: {e}") from e


def _parse_script(path: str, raw: bytes) -> Any:
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ChinwagError(f"script {path} is not UTF-8 (byte {e.start})") from e
    except json.JSONDecodeError as e:
        raise ChinwagError(f"script {path} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
    except RecursionError as e:
        raise ChinwagError(f"script {path} is nested too deeply to be a replay script") from e


def load_script(path: str) -> dict[str, Any]:
    script = _parse_script(path, _read_script(path))
    if not isinstance(script, dict) or not isinstance(script.get("turns"), list):
        raise ChinwagError(f'script {path} must be an object {{"system": "...", "turns": ["...", ...]}}')
    turns = script["turns"]
    from app.documents.cli import script_turns

    if not turns or not all((isinstance(t, str) and t.strip()) or isinstance(t, dict) for t in turns):
        raise ChinwagError(f"script {path} needs a non-empty list of non-empty string turns")
    script["turns"] = script_turns(path, turns)  # [(question, [Attachment]), ...]: the documents read now
    if not isinstance(script.get("system", ""), str):
        raise ChinwagError(f"script {path}: system must be a string")
    return script


async def _replay(args: argparse.Namespace) -> int:
    script = load_script(args.script)
    engine = Engine(kv_initial_capacity=args.kv_initial_capacity, **fit.engine_options(args))
    try:
        info = await engine.load_model(args.model)
        if fit.context_note(info):
            print(f"{PROG}: {fit.context_note(info)}", file=sys.stderr)
        messages = [{"role": "system", "content": script["system"]}] if script.get("system") else []
        indexes: list[Index] = []  # documents too big for the context (app/documents/turn.py)
        for i, (user, documents) in enumerate(script["turns"]):
            prepared = 0
            if i and args.pause:
                await asyncio.sleep(args.pause)  # the reader reads; the engine prepares the next window
                done = engine.background_result()
                prepared = done.computed_tokens if done else 0
            attachment_tokens = 0
            if documents or indexes:
                user, attachment_tokens = await _with_documents(engine, args, messages, user, documents, indexes)
            messages.append({"role": "user", "content": user})
            conv = f"replay-{i}" if args.no_cache else "replay"
            text, stats = await _reply(engine, conv, messages, _params(args))
            if args.no_cache:
                await engine.forget(conv)
            messages.append({"role": "assistant", "content": text})
            print(
                json.dumps(
                    {
                        "turn": i,
                        "reply": text,
                        "prompt_ids": list(stats.prompt_ids),
                        "reply_ids": list(stats.reply_ids),
                        "reused_tokens": stats.reused_tokens,
                        "prefilled_tokens": stats.prefilled_tokens,
                        "generated_tokens": stats.generated_tokens,
                        "ttft_s": stats.ttft_s,
                        "decode_tps": stats.decode_tps,
                        "kv_capacity": stats.kv_capacity,
                        "kv_offset": stats.kv_offset,
                        "kv_bytes": stats.kv_bytes,
                        "context_limit": stats.context_limit,
                        "finish_reason": stats.finish_reason,
                        "dropped_messages": stats.dropped_messages,
                        "prepared_tokens": prepared,
                        "error": stats.error,
                        "drafted_tokens": stats.drafted_tokens,
                        "accepted_tokens": stats.accepted_tokens,
                        "speculation_off": stats.speculation_off,
                        "attachment_tokens": attachment_tokens,
                    }
                ),
                flush=True,
            )
            if stats.error:  # the reply ended short (a server's cut stream or timeout): later turns would build on it
                return fail(f"turn {i}: {stats.error}")
    finally:
        await engine.forget("replay")  # every replay starts from an empty cache, never from the last run's
        await engine.close()
    return 0


async def _with_documents(
    engine: Engine,
    args: argparse.Namespace,
    messages: list[dict[str, Any]],
    user: str,
    documents: list["Attachment"],
    indexes: list["Index"],
) -> tuple[str, int]:
    """The user's message with its documents (app/documents/turn.py), and the tokens they take."""
    from app.documents.turn import prepare

    with_documents = await prepare(engine, messages, user, documents, _params(args), indexes)
    for note in with_documents.notes:
        print(f"{PROG}: {note}", file=sys.stderr)
    return with_documents.content, with_documents.document_tokens


async def _reply(
    engine: Engine, conv: str, messages: list[dict[str, Any]], params: GenerationParams
) -> tuple[str, TurnStats]:
    """One turn's reply text and stats."""
    reply: list[str] = []
    stats: TurnStats | None = None
    async for ev in engine.chat(conv, messages, params):
        if isinstance(ev, TextDelta):
            reply.append(ev.text)
        elif not isinstance(ev, PrefillProgress):
            stats = ev
    assert stats is not None  # engine.chat ends every turn with its TurnStats
    return "".join(reply), stats


def _chat(args: argparse.Namespace) -> int:
    from app.cli.chat import run

    return asyncio.run(run(args, _params(args)))


# --- wiring ------------------------------------------------------------------


def _version() -> str:
    from app.core.version import app_version

    return app_version()


def build_parser() -> argparse.ArgumentParser:
    from engine.models.folders import STARTER_ID

    parser = OneLineParser(
        prog=PROG,
        description="Chat with local language models on MLX. "
        "With no command, `chinwag` opens the window; the commands below work in a terminal.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {_version()}")
    parser.add_argument(
        "-v", "--verbose", action="store_true", help="also print the log (warnings and bug tracebacks) to stderr"
    )
    sub = parser.add_subparsers(dest="command")

    p = sub.add_parser("chat", help="chat in the terminal")
    p.add_argument("--model", default=STARTER_ID, help=MODEL_HELP)
    p.add_argument("--system", default="", help="a system prompt")
    p.add_argument(
        "--no-save", action="store_true", help="keep this chat out of the saved conversations (and keep no cache)"
    )
    p.add_argument(
        "--attach",
        action="append",
        default=[],
        metavar="FILE",
        help="attach a document (text, PDF, DOCX) to your first message; repeatable",
    )
    _add_sampling(p, GenerationParams())
    from app.cli.chat_tools import add_flags

    add_flags(p)
    p.set_defaults(func=_chat)

    p = sub.add_parser("models", help="list the models you can pick")
    p.add_argument("--json", action="store_true")
    fit.add_flags(p)  # --json's "fit": the longest context under this limit and KV setting
    p.set_defaults(func=cmd_models)

    p = sub.add_parser("import", help="import a GGUF file as an MLX model")
    p.add_argument("path")
    p.set_defaults(func=lambda a: asyncio.run(_import(a)))

    p = sub.add_parser("replay", help="replay a scripted chat and print one JSON object per turn")
    p.add_argument("script")
    p.add_argument("--model", required=True, help=MODEL_HELP)
    p.add_argument("--no-cache", action="store_true", help="start every turn from an empty cache")
    p.add_argument(
        "--pause",
        type=_seconds,
        default=0.0,
        metavar="SECONDS",
        help="wait between turns as a reader would, so idle-time work can run (default: none, the worst case)",
    )
    _add_sampling(p, GenerationParams(temperature=0.0))
    p.set_defaults(func=lambda a: asyncio.run(_replay(a)))

    from app.cli.mcp import add_commands as add_mcp_commands
    from app.cli.serve import add_commands as add_serve_commands
    from app.cli.servers import add_commands as add_server_commands
    from app.cli.transcripts import add_commands

    add_commands(sub)
    add_server_commands(sub)
    add_mcp_commands(sub)
    add_serve_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run the `chinwag` command; returns its exit status (2: bad input, 1: a bug, logged)."""
    as_program = argv is None
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        from app.gui.main import run_app

        return run_app([a for a in argv if a not in ("-v", "--verbose")])
    from engine import log

    log.setup(verbose=args.verbose)
    try:
        code = args.func(args) or 0
    except ChinwagError as e:
        code = fail(str(e))
    except KeyboardInterrupt:
        code = 130
    except BrokenPipeError:  # `chinwag conversations | head`: the reader has all it wanted
        _quiet_stdout()
        code = BROKEN_PIPE_STATUS
    except Exception as e:  # noqa: BLE001 - a bug, not bad input: traceback to the log, one line here
        print(f"{PROG}: error: {log.report_bug(e, f'chinwag {args.command}')}", file=sys.stderr)
        code = 1
    if as_program:
        _exit(code)
    return code


def _quiet_stdout() -> None:
    """Point stdout at /dev/null, so the unwritten rest is not retried (and fails again) at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no real stdout (a test's capture): nothing is retried there
        pass


def _exit(code: int) -> None:
    """Exit without running MLX's C++ static destructors.

    Once MLX has run, letting the interpreter tear down normally aborted about half the time
    ("terminate called without an active exception", status 134) after the output was
    already written; everything worth keeping is flushed here first.
    """
    import logging

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said
            pass
    logging.shutdown()
    if "mlx.core" in sys.modules:
        os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
