"""Bring-your-own agent frameworks on Flowdesk's store.

Each subpackage imports its framework and nothing else imports it, so
Flowdesk without the extra (``flowdesk[pydantic-ai]``) never loads it.
"""
