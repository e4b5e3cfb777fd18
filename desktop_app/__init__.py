"""Flowdesk: a durable-execution engine and terminal desktop app for local AI agents.

Importing this package has no side effects: no directories, files or
connections are created until a command or the app asks for them.
"""

__version__ = "0.1.0"
