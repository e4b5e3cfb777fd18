"""Bring-your-own agent frameworks on Flowdesk's store (optional extras:
``flowdesk[langgraph]``, ``flowdesk[pydantic-ai]``).

Each subpackage imports its framework and nothing else imports it, so
Flowdesk without the extra never loads it.
"""
