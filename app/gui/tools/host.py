"""The window's MCP host: the servers enabled in mcp.json start with the window (tasks on its loop,
never blocking it) and stop when it closes; each chat's choice of servers (its setting `tools_off`,
app/core/settings.py); what their tool definitions cost in context. One `ToolHost`
(app/tools/client.py) for the whole window.
"""

import asyncio
import json
import logging

from PySide6.QtCore import QObject, Signal

from app.core.chats import chat_key, is_unsaved
from app.core.settings import set_tools_off, tools_off
from app.tools import config
from app.tools.client import ToolHost
from engine.errors import ChinwagError, one_line

log = logging.getLogger(__name__)


class WindowTools(QObject):
    changed = Signal()  # servers started or stopped, a chat's choice or a cost changed
    notice = Signal(str)  # one line for the window (a server that failed, tools off for a model)

    def __init__(self, store, parent=None):
        super().__init__(parent)
        self.store = store
        self.host: ToolHost | None = None
        self.failed: dict = {}  # server -> why it is not running
        self.starting = False
        self.costs: dict = {}  # conversation id -> tokens the chat's tool definitions take
        self.estimated: set = set()  # chats whose cost is counted from the definitions' JSON, not the template
        self.said_off: set = set()  # chats already told that the model cannot call tools
        self.unsaved_off: set = set()  # servers switched off in the blank chat, saved with it once it has an id
        self.model_off = ""  # why the loaded model cannot call tools ("" : it can, or none is loaded)
        self._said_model = False  # the loaded model's tools_off was said (at its load, or when servers started)
        self._task: asyncio.Task | None = None  # qasync keeps no reference: we do
        self._closed = False

    # --- the servers ---------------------------------------------------------------------

    def start(self) -> asyncio.Task:
        """Start (or restart, after the Tools dialog changed them) the enabled servers, in the background."""
        self._task = asyncio.ensure_future(self._start())
        return self._task

    async def _start(self) -> None:
        old, self.host = self.host, None
        if old is not None:
            await old.close()
        try:
            enabled = config.load().enabled
        except ChinwagError as e:
            self.failed = {}
            self.notice.emit(f"MCP servers: {e}")
            self.changed.emit()
            return
        if not enabled or self._closed:
            self.failed = {}
            self.changed.emit()
            return
        self.starting = True
        self.changed.emit()
        host = ToolHost(enabled)
        try:
            self.failed = await host.start()
        finally:
            self.starting = False
        if self._closed:  # the window closed while they started
            await host.close()
            return
        self.host = host
        self.costs.clear()
        for name, why in self.failed.items():
            self.notice.emit(f"The MCP server {name} did not start: {one_line(why)}")
        self._say_model_off()
        self.changed.emit()

    def model_loaded(self, info) -> None:
        """A model was loaded: if it cannot call tools, say so now, not after its first reply."""
        self.model_off = getattr(info, "tools_off", "") or ""
        self._said_model = False
        self._say_model_off()
        self.changed.emit()

    def _say_model_off(self) -> None:
        if self.model_off and self.servers and not self._said_model:
            self._said_model = True
            self.notice.emit(self.model_off[:1].upper() + self.model_off[1:] + ".")

    def restart_if_changed(self) -> asyncio.Task | None:
        """The Tools dialog closed: restart the servers if which ones run, or how, changed (not for policies)."""
        try:
            wanted = _signature(config.load().enabled)
        except ChinwagError:
            wanted = ()
        running = _signature(c.config for c in self.host.connections.values()) if self.host else ()
        return self.start() if wanted != running else None

    async def close(self) -> None:
        """The window closes: every stdio server's process ends with it."""
        self._closed = True
        if self._task is not None and not self._task.done():
            self._task.cancel()
            try:
                await self._task
            except BaseException:  # noqa: BLE001 - cancelled or failed: the host below is closed either way
                pass
        host, self.host = self.host, None
        if host is not None:
            await host.close()

    @property
    def servers(self) -> list:
        """The names of the running servers."""
        return [c.name for c in self.host.connections.values() if c.running] if self.host else []

    # --- one chat's choice ---------------------------------------------------------------

    def off_in(self, conv_id) -> set:
        """The servers switched off in this chat: its setting, or the blank chat's choice (not saved yet)."""
        if is_unsaved(conv_id):
            return set(self.unsaved_off)
        try:
            return tools_off(self.store, str(conv_id))
        except ChinwagError:
            return set()

    def set_on(self, conv_id, server: str, on: bool) -> None:
        """Switch a server's tools on or off in one chat (the blank chat's choice waits for its id)."""
        off = self.off_in(conv_id)
        off = off - {server} if on else off | {server}
        if is_unsaved(conv_id):
            self.unsaved_off = off
        elif not self.store.read_only:
            try:
                set_tools_off(self.store, str(conv_id), off)
            except ChinwagError as e:
                self.notice.emit(str(e))
        self.costs.pop(conv_id, None)
        self.changed.emit()

    def adopt_choice(self, conv_id) -> None:
        """A new chat was saved: the choice made before it had an id becomes its own (conv_id None: forget it)."""
        off, self.unsaved_off = self.unsaved_off, set()
        if is_unsaved(conv_id) or not off or self.store.read_only:
            return
        try:
            set_tools_off(self.store, str(conv_id), off)
        except ChinwagError as e:
            self.notice.emit(str(e))

    def host_for(self, conv_id) -> ToolHost | None:
        """The servers on in this chat (None: no tools in its replies)."""
        if self.host is None:
            return None
        on = [s for s in self.servers if s not in self.off_in(chat_key(conv_id))]
        return self.host.subset(on) if on else None

    def definitions(self, conv_id) -> list:
        host = self.host_for(conv_id)
        return [t.to_openai() for t in host.tools] if host else []

    def cost_text(self, conv_id) -> str:
        """'645 tokens', or '~477 tokens' until a reply counts them in the model's own template ("": unknown)."""
        cost = self.costs.get(conv_id)
        return f"{'~' if conv_id in self.estimated else ''}{cost:,} tokens" if cost else ""

    async def count_cost(self, engine, conv_id) -> int:
        """About what this chat's tool definitions take in the current model's tokens (0: none or no model)."""
        definitions = self.definitions(conv_id)
        if not definitions or engine is None or engine.current_model is None:
            return 0
        try:
            counted = await engine.count_tokens(json.dumps(definitions, ensure_ascii=False))
        except ChinwagError as e:
            log.info("counting the tools' tokens: %s", e)
            return 0
        if conv_id not in self.costs:  # a turn's exact count came first: keep it
            self.costs[conv_id] = counted.tokens
            self.estimated.add(conv_id)
            self.changed.emit()
        return counted.tokens

    def turn_ended(self, conv_id, stats) -> None:
        """A turn's stats: the exact cost of the definitions, or (once per chat) why tools were off."""
        if stats is None:
            return
        if stats.tools_tokens:
            self.costs[conv_id] = stats.tools_tokens
            self.estimated.discard(conv_id)
            self.changed.emit()
        if stats.tools_off and conv_id not in self.said_off and stats.tools_off != self.model_off:
            self.said_off.add(conv_id)
            self.notice.emit(stats.tools_off[:1].upper() + stats.tools_off[1:] + ".")


def _signature(configs) -> tuple:
    """What makes a server another process or connection (its policies do not)."""
    return tuple(
        (c.name, c.command, tuple(c.args), tuple(sorted(c.env.items())), c.url, tuple(sorted(c.headers.items())))
        for c in configs
    )
