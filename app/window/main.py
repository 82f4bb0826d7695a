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
    from shardscope.app.base.window_priority import give_way_to_runs
    from shardscope.app.window.main_window import MainWindow

    # Before Qt starts its threads, which inherit it: the window's work waits for the gaps the
    # run leaves (app/base/window_priority.py).
    give_way_to_runs()
    app = QApplication.instance() or QApplication([sys.argv[0] if sys.argv else APP_NAME])
    app.setApplicationName(APP_NAME)
    app.setApplicationDisplayName("shardscope")
    window = MainWindow(model_path=model_path)
    window.show()
    stop = _close_on_signals(window)
    code = app.exec()
    return 128 + stop[0] if stop else code


def _close_on_signals(window) -> list[int]:
    """Ctrl-C (or a SIGTERM) closes the window as its close button does: the run process is told to
    stop and waited for, then the app quits. Python runs its handler only between bytecodes of the
    main thread, which Qt's loop may not run for a while: a timer lets it in four times a second.
    Returns the list a signal's number is put in (the app then exits 128 + it: 130 for Ctrl-C)."""
    import signal

    from PySide6.QtCore import QTimer

    seen: list[int] = []

    def close(number, _frame) -> None:
        seen.append(number)
        QTimer.singleShot(0, window.close)

    signal.signal(signal.SIGINT, close)
    signal.signal(signal.SIGTERM, close)
    wake = QTimer(window)
    wake.timeout.connect(lambda: None)
    wake.start(250)
    return seen


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] == "gui":
        rest = args[1:]
        if len(rest) > 1 or (rest and rest[0].startswith("-")):
            print("usage: shardscope [gui [MODEL.gguf]] | shardscope COMMAND ... (see shardscope --help)",
                  file=sys.stderr)
            return 2
        try:
            return run_gui(rest[0] if rest else None)
        except KeyboardInterrupt:  # Ctrl-C while Qt and the window are still starting: no window to close yet
            print("shardscope: interrupted before the window opened", file=sys.stderr)
            return 130
    from shardscope.engine.cli.cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
