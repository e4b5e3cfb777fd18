"""Screens of the Flowdesk app."""
