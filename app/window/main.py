"""``shardscope`` with no arguments (or ``gui``) opens the window; anything else is the CLI.

One command for both means a newcomer types ``shardscope`` and sees the workbench,
while ``shardscope bench …``/``synth …`` keep working for scripts. The CLI is
imported only when asked for, and the window only then too: neither pays for the
other's start-up (Qt for the CLI, argparse subcommands for the GUI).

    shardscope                      the window, bundled model, last profile
    shardscope gui [model.gguf]     the same, opening that model
    shardscope bench|synth|...      engine.cli
"""

from __future__ import annotations

import sys


def run_gui(model_path: str | None = None) -> int:
    from PySide6.QtWidgets import QApplication

    from shardscope.app.base.config_paths import APP_NAME
    from shardscope.app.window.main_window import MainWindow

    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else APP_NAME])
    app.setApplicationName(APP_NAME)
    app.setApplicationDisplayName("shardscope")
    window = MainWindow(model_path=model_path)
    window.show()
    return app.exec()


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] == "gui":
        rest = args[1:]
        if len(rest) > 1 or (rest and rest[0].startswith("-")):
            print("usage: shardscope [gui [MODEL.gguf]] | shardscope COMMAND ... (see shardscope --help)",
                  file=sys.stderr)
            return 2
        return run_gui(rest[0] if rest else None)
    from shardscope.engine.cli.cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
