"""`python -m bertkit`: the same as the `bertkit` command (cli.py)."""

from .cli import main

raise SystemExit(main())
