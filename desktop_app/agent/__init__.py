"""Agent runtime on top of the store: models, tools, durable agent runs.

An agent run is model turns plus tool calls, checkpointed in the same SQLite
file as flows: a crash, a reboot or a rate limit never costs a completed tool
call or a paid model answer.
"""

from desktop_app.agent.messages import AssistantReply, Message, ToolCall
from desktop_app.agent.models import ChatModel, ScriptedModel
from desktop_app.agent.runtime import Agent, AgentResponse
from desktop_app.agent.tools import Tool, tool

__all__ = [
    "Agent",
    "AgentResponse",
    "AssistantReply",
    "ChatModel",
    "Message",
    "ScriptedModel",
    "Tool",
    "ToolCall",
    "tool",
]
