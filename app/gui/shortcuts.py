"""Every keyboard shortcut of the window in one place: the menus, the welcome state and
Help › Keyboard Shortcuts all read this table."""

import sys

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeyEvent, QKeySequence

# (what it does, key) in the order the shortcuts sheet lists them. A QKeySequence.StandardKey
# is the platform's own key (Cmd on macOS, Ctrl elsewhere).
SEND = "Return"
NEWLINE = "Shift+Return"
NEW_CHAT = QKeySequence.StandardKey.New
FIND = QKeySequence.StandardKey.Find
STOP = "Esc"
REGENERATE = "Ctrl+R"
COPY_LAST_REPLY = "Ctrl+Shift+C"
TOGGLE_SIDEBAR = "Ctrl+Shift+S"
RENAME = "F2"
NEXT_CHAT = ["Ctrl+Tab", "Ctrl+PgDown"]  # the next chat down the list (the first: Ctrl+Tab)
PREVIOUS_CHAT = ["Ctrl+Shift+Tab", "Ctrl+PgUp"]
EDIT_LAST = "Up"  # in an empty message box: edit your last message
EXPORT = "Ctrl+Shift+E"
ATTACH = "Ctrl+Shift+A"  # File › Attach File… (⌘⇧A on macOS), beside the paperclip
UNDO = QKeySequence.StandardKey.Undo
PREFERENCES = "Ctrl+,"
SHORTCUTS_SHEET = "Ctrl+/"

# A shortcut: its keys (a list: the first is the one shown), or a platform's standard key.
Key = str | list[str] | QKeySequence.StandardKey

SHEET: list[tuple[str, Key]] = [
    ("Send the message", SEND),
    ("New line in the message", NEWLINE),
    ("New chat", NEW_CHAT),
    ("Search chats (Down moves into the results)", FIND),
    ("Stop the reply / cancel an edit", STOP),
    ("Regenerate the last reply", REGENERATE),
    ("Copy the last reply", COPY_LAST_REPLY),
    ("Show or hide the chat list", TOGGLE_SIDEBAR),
    ("Attach files to the message", ATTACH),
    ("Rename the chat", RENAME),
    ("Next chat in the list", NEXT_CHAT),
    ("Previous chat in the list", PREVIOUS_CHAT),
    ("Edit your last message (in an empty message box)", EDIT_LAST),
    ("Undo deleting a chat", UNDO),
    ("Export the conversation", EXPORT),
    ("Preferences", PREFERENCES),
    ("This list of shortcuts", SHORTCUTS_SHEET),
]

# The few the welcome state shows.
WELCOME = [SHEET[0], SHEET[1], SHEET[2], SHEET[3], SHEET[4]]


def key_text(key: Key) -> str:
    """How the key reads on this platform (Ctrl+N, or ⌘N on macOS); a list of keys: the first ones."""
    if isinstance(key, list):
        return " or ".join(key_text(k) for k in key)
    seq = QKeySequence(key)
    return seq.toString(QKeySequence.SequenceFormat.NativeText) or str(key)


def is_alt_command(event: QKeyEvent) -> bool:
    """Alt+letter outside macOS is a command (a button's or menu's mnemonic), never text to type;
    on macOS, Option+letter types a character (ø, å) and stays text. AltGr is not Alt here."""
    alt = Qt.KeyboardModifier.AltModifier
    text = event.text()
    return (
        sys.platform != "darwin"
        and event.modifiers() in (alt, alt | Qt.KeyboardModifier.ShiftModifier)
        and text.isprintable()
        and bool(text)
    )
