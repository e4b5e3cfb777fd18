"""Example flows shipped with Flowdesk, for the README's commands to run as
written (``FLOWDESK_FLOWS='["desktop_app.examples.approval:approval"]'``)."""
