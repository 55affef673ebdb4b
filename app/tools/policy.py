"""Whether a tool call may run: the per-tool / per-server policy (allow, ask, deny) and the user's answers.

A tool's own policy wins over its server's; a server with neither asks. "Always" is remembered
as the tool's own policy in Chinwag's settings file, so the Tools dialog shows and can undo it.
"""

from dataclasses import dataclass
from enum import StrEnum

from app.tools import config
from app.tools.config import Policy


class Answer(StrEnum):
    """What the user said to one pending call."""

    ONCE = "once"
    ALWAYS = "always"
    DENY = "deny"


@dataclass
class Approvals:
    """The policies of one chat session: `allow_all` (--allow-tools) allows every call."""

    tools_config: config.ToolsConfig
    allow_all: bool = False

    def decide(self, server: str, tool: str) -> Policy:
        if self.allow_all:
            return Policy.ALLOW
        try:
            return self.tools_config.server(server).policy_for(tool)
        except Exception:  # noqa: BLE001 - a server not in the file (removed meanwhile): ask
            return Policy.ASK

    def answer(self, server: str, tool: str, answer: Answer) -> bool:
        """Record the user's answer; whether the call may run."""
        if answer == Answer.ALWAYS:
            config.set_policy(server, Policy.ALLOW, tool)
            self.tools_config = config.load()
        return answer != Answer.DENY
