"""``python -m desktop_app.cli``: the ``flowdesk`` command."""

from desktop_app.cli import main

raise SystemExit(main())
