"""The store under hostile files and other processes: one-line errors, nothing written that
need not be, nothing lost, private files, and deleted text gone from every file."""

import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.cli.main import main
from app.core.store import Store
from engine.errors import ChinwagError

ROOT = Path(__file__).resolve().parents[3]


def export_json(**conversation) -> dict:
    data = {
        "format": "chinwag-conversation",
        "version": 1,
        "conversation": {"title": "hostile", "settings": {}, **conversation},
        "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}],
    }
    return data


def import_refused(tmp_path, capsys, data, *needles, raw: bytes = None):
    """`chinwag import-conversation` refuses in one line, exit 2, and the store stays empty."""
    path = tmp_path / "in.json"
    path.write_bytes(raw if raw is not None else json.dumps(data).encode())
    assert main(["import-conversation", str(path)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("chinwag: error: cannot import"), err
    for needle in needles:
        assert needle in err[0]
    with Store() as store:
        assert store.list_conversations() == []


@pytest.mark.parametrize(
    "settings, needle",
    [
        ({"temperature": "hot"}, "settings.temperature"),
        ({"top_k": 2.5}, "settings.top_k"),
        ({"max_tokens": 0}, "settings.max_tokens"),
        ({"top_p": float("nan")}, None),  # json.dumps writes NaN, which import reads as a number
        ({"system_prompt": ["x"]}, "settings.system_prompt"),
        ({"repetition_penalty": True}, "settings.repetition_penalty"),
    ],
)
def test_imported_settings_are_checked(tmp_path, capsys, settings, needle):
    import_refused(tmp_path, capsys, export_json(settings=settings), *([needle] if needle else []))


@pytest.mark.parametrize("role", ["function", "", "USER"])  # "tool" is a tool result (issue 18)
def test_unknown_roles_are_refused(tmp_path, capsys, role):
    data = export_json()
    data["messages"][0]["role"] = role
    import_refused(tmp_path, capsys, data, "messages[0].role")


@pytest.mark.parametrize("key", ["updated_at", "created_at"])
def test_out_of_calendar_times_are_refused(tmp_path, capsys, key):
    import_refused(tmp_path, capsys, export_json(**{key: 1e308}), f"conversation.{key}")


def test_deeply_nested_json_is_one_line(tmp_path, capsys):
    deep = b'{"format": "chinwag-conversation", "version": 1, "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    import_refused(tmp_path, capsys, None, "nested", raw=deep)
    stats = export_json()
    nest = {}
    for _ in range(100):
        nest = {"a": nest}
    stats["messages"][1]["stats"] = nest
    import_refused(tmp_path, capsys, stats, "nested")
    script = tmp_path / "script.json"
    script.write_bytes(b'{"turns": ' + b"[" * 5000 + b"]" * 5000 + b"}")
    assert main(["replay", str(script), "--model", "nowhere"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and "nested too deeply" in err[0]


def test_bad_stored_settings_fall_back_to_the_defaults(store):
    from app.core.settings import builtin_defaults, effective, engine_messages, params_from_settings

    conv = store.create_conversation(settings={"temperature": "hot", "max_tokens": -3, "top_p": 0.5})
    values = effective(store.get_conversation(conv.id).settings, builtin_defaults())
    params = params_from_settings(values)  # used to raise ValueError after marking the reply streaming
    assert params.temperature == builtin_defaults()["temperature"] and params.top_p == 0.5
    assert params.max_tokens == builtin_defaults()["max_tokens"]
    store.add_message(conv.id, "tool", "stored by an older Chinwag")
    store.add_message(conv.id, "user", "hi")
    sent = engine_messages(store.get_conversation(conv.id).messages, "")
    assert sent == [{"role": "user", "content": "hi"}]


def test_huge_stored_time_does_not_break_the_list(store, capsys):
    conv = store.create_conversation(title="from far away")
    store.close()
    raw = sqlite3.connect(os.environ["CHINWAG_HOME"] + "/chinwag.db")
    raw.execute("UPDATE conversations SET updated_at=1e308 WHERE id=?", (conv.id,))
    raw.commit()
    raw.close()
    assert main(["conversations"]) == 0
    assert "from far away" in capsys.readouterr().out
    assert main(["conversations", "--json"]) == 0


def test_negative_schema_version_is_left_untouched(chinwag_home):
    path = chinwag_home / "chinwag.db"
    with Store() as store:
        store.create_conversation(title="old")
    raw = sqlite3.connect(path)
    raw.execute("PRAGMA user_version = -1")
    raw.close()
    before = path.read_bytes()
    with Store() as store:
        assert "unknown schema version -1" in store.notice and "\n" not in store.notice
        assert store.path != path
    assert path.read_bytes() == before


def test_unusable_data_folder_is_one_line_in_every_command(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    monkeypatch.setenv("CHINWAG_HOME", str(blocker / "home"))
    for argv in (
        ["conversations"],
        ["models"],
        ["export", "abc", "-o", str(tmp_path / "x.md")],
        ["import-conversation", str(tmp_path / "x.json")],
        ["import", str(tmp_path / "x.gguf")],
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.splitlines()
        assert len(err) == 1 and err[0].startswith("chinwag: error: ") and str(blocker) in err[0], (argv, err)


def test_environment_error_never_makes_a_healthy_database_look_unreadable(chinwag_home, monkeypatch):
    from app.core import store_open

    with Store() as store:
        store.create_conversation(title="healthy")
    before = (chinwag_home / "chinwag.db").read_bytes()

    def full(path):
        e = sqlite3.OperationalError("disk I/O error")
        e.sqlite_errorcode = 10  # SQLITE_IOERR, as a full or failing disk reports it
        raise e

    monkeypatch.setattr(store_open, "connect_read_only", full)
    with pytest.raises(ChinwagError, match="disk I/O error") as info:
        Store()
    assert "\n" not in str(info.value) and "recovered" not in str(info.value)
    assert not list(chinwag_home.glob("*recovered*"))
    assert (chinwag_home / "chinwag.db").read_bytes() == before


def test_programming_errors_are_not_user_errors(store):
    with pytest.raises(sqlite3.ProgrammingError):
        store._conn.execute("SELECT ?", (object(),))
    from app.core.store_open import is_environment_error

    assert not is_environment_error(sqlite3.ProgrammingError("bad parameter"))
    assert not is_environment_error(sqlite3.IntegrityError("UNIQUE constraint failed"))


# -- privacy -------------------------------------------------------------------


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_data_folder_and_database_files_are_private(chinwag_home):
    chinwag_home.rmdir()  # Chinwag makes it: then it is Chinwag's to keep private
    with Store() as store:
        store.create_conversation(title="private")
        assert _mode(chinwag_home) == 0o700
        files = [chinwag_home / n for n in ("chinwag.db", "chinwag.db-wal", "chinwag.db-shm", "chinwag.db.writers")]
        for f in files:
            assert f.exists() and _mode(f) == 0o600, f
    # A database an older Chinwag made 0644 is made private on the next open.
    (chinwag_home / "chinwag.db").chmod(0o644)
    with Store():
        assert _mode(chinwag_home / "chinwag.db") == 0o600


def test_a_shared_folder_named_by_chinwag_home_keeps_its_mode(chinwag_home):
    """CHINWAG_HOME at a folder Chinwag did not make: its mode is not ours to change, even
    for a read-only command; Chinwag's own files and folders in it are private all the same."""
    from app.cli.main import main

    chinwag_home.chmod(0o755)
    (chinwag_home / "shared.txt").write_text("someone else's")
    assert main(["conversations"]) == 0
    assert _mode(chinwag_home) == 0o755
    with Store() as store:
        store.create_conversation(title="private")
    assert _mode(chinwag_home) == 0o755
    assert _mode(chinwag_home / "chinwag.db") == 0o600
    from engine import paths

    assert _mode(paths.kv_dir()) == 0o700


# -- several processes ---------------------------------------------------------

WRITER = """
import sys
sys.path.insert(0, {root!r})
from app.core.store import Store
store = Store()
conv = store.create_conversation(title="live")
store.add_message(conv.id, "user", "question")
reply = store.add_message(conv.id, "assistant", "half a repl", status="streaming")
if {hold_write}:
    store._conn.execute("BEGIN IMMEDIATE")
    store._conn.execute("UPDATE messages SET content='x' WHERE id=?", (reply.id,))
print(conv.id, flush=True)
sys.stdin.read()  # alive until the test closes stdin
"""


def _start_writer(hold_write=False):
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER.format(root=str(ROOT), hold_write=hold_write)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    conv_id = proc.stdout.readline().strip()
    assert conv_id, "the writer process did not start"
    return proc, conv_id


def test_opening_never_stops_another_process_live_reply(chinwag_home):
    proc, conv_id = _start_writer()
    try:
        with Store() as store:
            assert store.get_conversation(conv_id).messages[1].status == "streaming"
    finally:
        proc.kill()
        proc.wait()
    # Its writer is gone now: the next open repairs it.
    with Store() as store:
        assert store.get_conversation(conv_id).messages[1].status == "stopped"


@pytest.mark.timing
def test_read_only_commands_never_wait_on_the_write_lock(chinwag_home, capsys):
    proc, conv_id = _start_writer(hold_write=True)
    try:
        started = time.monotonic()
        assert main(["conversations", "--json"]) == 0
        assert [c["id"] for c in json.loads(capsys.readouterr().out)] == [conv_id]
        assert main(["export", conv_id[:8], "-o", str(chinwag_home.parent / "out.md")]) == 0
        assert time.monotonic() - started < 4.0  # the write lock's timeout is 5 s
    finally:
        proc.stdin.close()
        proc.wait(timeout=30)


def test_read_only_store_on_a_fresh_folder_writes_nothing(chinwag_home):
    with Store(read_only=True) as store:
        assert store.list_conversations() == []
        with pytest.raises(ChinwagError, match="read-only"):
            store.create_conversation()
    assert not (chinwag_home / "chinwag.db").exists()


def test_database_we_may_not_write_opens_read_only(chinwag_home, monkeypatch):
    from app.core import store_open as store_module

    with Store() as store:
        conv = store.create_conversation(title="mine")
    before = (chinwag_home / "chinwag.db").read_bytes()
    if os.geteuid() == 0:  # root may write a 0444 file: say what a user would find
        monkeypatch.setattr(store_module, "writable", lambda path: False)
    (chinwag_home / "chinwag.db").chmod(0o444)
    with Store() as store:
        assert store.read_only and "cannot be written" in store.notice
        assert [c.id for c in store.list_conversations()] == [conv.id]
        with pytest.raises(ChinwagError, match="read-only"):
            store.rename_conversation(conv.id, "x")
    assert (chinwag_home / "chinwag.db").read_bytes() == before


def test_deleted_text_leaves_the_wal_once_a_reader_lets_go(store, chinwag_home):
    marker = "WAL-MARKER-31415"
    conv = store.create_conversation()
    store.add_message(conv.id, "user", f"{marker} " * 300)
    reader = sqlite3.connect(chinwag_home / "chinwag.db", isolation_level=None)
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM messages").fetchone()  # holds a snapshot
    store.delete_conversation(conv.id)
    reader.execute("COMMIT")
    reader.close()
    store.set_state("last", "x")  # the next write retries the checkpoint
    for name in ("chinwag.db", "chinwag.db-wal"):
        path = chinwag_home / name
        assert not path.exists() or marker.encode() not in path.read_bytes(), name


def test_read_only_commands_migrate_an_older_database_first(chinwag_home, monkeypatch):
    from app.core import migrations as store_module

    with Store() as store:
        conv = store.create_conversation(title="old schema")
    # As if this Chinwag knew one more schema step than the file has.
    monkeypatch.setattr(store_module, "MIGRATIONS", store_module.MIGRATIONS + ["CREATE TABLE extra (x)"])
    monkeypatch.setattr(store_module, "SCHEMA_VERSION", store_module.SCHEMA_VERSION + 1)
    with Store(read_only=True) as store:
        assert [c.id for c in store.list_conversations()] == [conv.id]
    raw = sqlite3.connect(chinwag_home / "chinwag.db")
    assert raw.execute("PRAGMA user_version").fetchone()[0] == store_module.SCHEMA_VERSION
    raw.close()


def test_a_database_path_that_is_not_a_file_is_left_alone(chinwag_home, tmp_path):
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    fifo.chmod(0o666)
    (chinwag_home / "chinwag.db").symlink_to(fifo)
    done = threading.Event()

    def unblock():  # should the store open the pipe after all, end its wait instead of hanging
        if not done.wait(10):
            with open(fifo, "wb"):
                pass

    threading.Thread(target=unblock, daemon=True).start()
    try:
        with Store() as store:
            assert "named pipe" in store.notice and store.path.name.startswith("chinwag-recovered-")
    finally:
        done.set()
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and stat.S_IMODE(os.stat(fifo).st_mode) == 0o666


def test_an_endless_title_is_refused(tmp_path, capsys):
    import_refused(tmp_path, capsys, export_json(title="x" * 20_000), "10000 characters")


def test_files_an_older_chinwag_left_readable_are_made_private(tmp_path, monkeypatch):
    from engine import paths

    home = tmp_path / "older-home"
    (home / "kv" / "model").mkdir(parents=True)
    old = [home / "folders.json", home / "chinwag.log", home / "kv" / "model" / "abc.safetensors"]
    for f in old:
        f.write_text("x")
        f.chmod(0o644)
    other = home / "notes.txt"
    other.write_text("the user's own")
    other.chmod(0o644)
    home.chmod(0o755)
    (home / "kv" / "model").chmod(0o755)
    monkeypatch.setenv("CHINWAG_HOME", str(home))
    assert paths.data_dir() == home
    # The folder CHINWAG_HOME names is left as it is (it may be shared); what Chinwag keeps in it is private.
    assert _mode(home) == 0o755 and _mode(home / "kv" / "model") == 0o700
    for f in old:
        assert _mode(f) == 0o600, f
    assert _mode(other) == 0o644  # not Chinwag's: left alone


def test_a_hand_edited_row_with_broken_json_still_opens(store, chinwag_home):
    conv = store.create_conversation(title="edited", settings={"top_p": 0.5})
    msg = store.add_message(conv.id, "assistant", "hello", stats={"generated_tokens": 3})
    raw = sqlite3.connect(chinwag_home / "chinwag.db")
    raw.execute("UPDATE conversations SET settings='{broken' WHERE id=?", (conv.id,))
    raw.execute("UPDATE messages SET stats='[' || ? WHERE id=?", ("[" * 5000, msg.id))
    raw.commit()
    raw.close()
    back = store.get_conversation(conv.id)
    assert back.settings == {} and back.messages[0].stats is None and back.messages[0].content == "hello"
