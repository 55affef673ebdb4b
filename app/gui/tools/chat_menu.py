"""The chat header's Tools button: which MCP servers are on in this chat, and what their tool
definitions cost in tokens of context (a 4K-context model should not carry forty tools)."""

import asyncio

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QMenu, QToolButton

from app.core.chats import chat_key
from engine.errors import one_line


class ChatToolsButton(QToolButton):
    serversRequested = Signal()  # MCP Servers… (the Tools dialog)

    def __init__(self, tools, bridge, parent=None):
        super().__init__(parent)
        self.setObjectName("chatToolsButton")
        self.tools, self.bridge = tools, bridge
        self.conv_id = None
        self.setAutoRaise(True)
        self.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.menu_ = QMenu(self)
        self.setMenu(self.menu_)
        self._count: asyncio.Task | None = None  # the cost being counted (qasync keeps no reference)
        tools.changed.connect(self.refresh)
        bridge.modelLoaded.connect(tools.model_loaded)  # before the costs: a model without tools has none
        bridge.modelLoaded.connect(lambda _info: self._forget_costs())
        self.refresh()

    def set_conversation(self, conv_id, just_created: bool = False) -> None:
        """The open chat changed; a chat just created from the blank one keeps the choice made there."""
        if self.conv_id is None and just_created:
            self.tools.adopt_choice(conv_id)
        elif conv_id is None or self.conv_id is None:
            self.tools.adopt_choice(None)  # a blank chat starts with every server on
        self.conv_id = conv_id
        self.refresh()

    def _forget_costs(self) -> None:
        self.tools.costs.clear()  # another model, another tokenizer
        self.tools.estimated.clear()
        self.refresh()

    def summary(self) -> str:
        """The button's text: how many servers are on in this chat, and their cost if known."""
        tools = self.tools
        if tools.starting:
            return "Tools: starting…"
        servers = tools.servers
        if not servers:
            return "Tools: none running" if tools.failed else ""
        on = [s for s in servers if s not in tools.off_in(chat_key(self.conv_id))]
        if not on:
            return "Tools: off"
        if tools.model_off:
            return "Tools: off for this model"
        host = tools.host_for(self.conv_id)
        count = len(host.tools) if host else 0
        cost = tools.cost_text(self.conv_id)
        return f"Tools: {count}" + (f" · {cost}" if cost else "")

    def refresh(self) -> None:
        text = self.summary()
        self.setText(text)
        self.setVisible(bool(text))
        tip = "MCP tools in this chat: choose the servers, see what their definitions cost"
        off = self.tools.model_off
        self.setToolTip(f"{off[:1].upper()}{off[1:]}." if off and self.tools.servers else tip)
        self._build_menu()
        if (
            text
            and not self.tools.model_off
            and self.conv_id not in self.tools.costs
            and self.tools.host_for(self.conv_id) is not None
            and self.bridge.current_model is not None
            and (self._count is None or self._count.done())
        ):
            self._count = asyncio.ensure_future(self.tools.count_cost(self.bridge.engine, self.conv_id))

    def _build_menu(self) -> None:
        menu, tools = self.menu_, self.tools
        menu.clear()
        off = tools.off_in(chat_key(self.conv_id))
        for name in tools.servers:
            action = menu.addAction(name)
            action.setObjectName(f"chatTools_{name}")
            action.setCheckable(True)
            action.setChecked(name not in off)
            action.toggled.connect(lambda on, n=name: tools.set_on(chat_key(self.conv_id), n, on))
        for name, why in tools.failed.items():
            action = menu.addAction(f"{name}: did not start ({one_line(why)[:80]})")
            action.setEnabled(False)
        cost = tools.cost_text(self.conv_id)
        if cost:
            menu.addSeparator()
            menu.addAction(f"The tool definitions take {cost} of context").setEnabled(False)
        menu.addSeparator()
        menu.addAction("MCP Servers…").triggered.connect(self.serversRequested)
