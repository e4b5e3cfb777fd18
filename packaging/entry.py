"""Entry point for the PyInstaller one-file build."""

from desktop_app.cli import main

raise SystemExit(main())
