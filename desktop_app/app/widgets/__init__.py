"""Widgets of the Flowdesk app (each carries its own ``DEFAULT_CSS``)."""
