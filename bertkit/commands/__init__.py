"""The command line: one module per `bertkit` command, each with main(argv) -> exit status.

A command reads its flags (options.parse over a settings dataclass), calls the library and prints what it
did; the work itself lives in the library modules, which import nothing from here. cli.py's table names the
commands and loads a command's module only when it runs.
"""
