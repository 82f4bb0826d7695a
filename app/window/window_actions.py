"""The window's actions (menus, toolbar, shortcuts), declared as a table of what each does."""

from __future__ import annotations

from PySide6.QtGui import QAction, QKeySequence

Std = QKeySequence.StandardKey
# attribute, text, shortcut, the window's method it triggers, tooltip
ACTIONS = (
    ("run_action", "Run", "Ctrl+R", "start_run", "Stream-generate until Stop"),
    ("stop_action", "Stop", "Esc", "stop_run", "Stop after the current token"),
    ("open_action", "Open GGUF…", Std.Open, "_open_dialog", ""),
    ("synth_action", "Write synthetic model…", None, "_synth_dialog_open",
     "Write a random-weight model of any size, then open it"),
    ("save_profile_action", "Save profile…", "Ctrl+S", "_save_profile_dialog", ""),
    ("trace_action", "Open routing trace…", None, "_open_trace_dialog",
     "Replay a routing trace (shardscope bench --trace) into the cacheability curve"),
    ("export_action", "Export…", "Ctrl+E", "_export_dialog",
     "Summary CSV, timeline CSV, the rounds table CSV and a PNG of the charts"),
    ("quit_action", "Quit", Std.Quit, "close", ""),
    ("follow_action", "Follow latest", "End", "follow_latest", "Scroll the charts back to the newest samples"),
    ("sweep_action", "Sweep…", None, "open_sweep_dialog", "Run every combination of knob lists, one cold run each"),
    ("tune_action", "Auto-tune for device…", None, "open_tune_dialog",
     "Search the settings with the best projected tok/s on a device"),
    ("calibrate_action", "Calibrate device from llama-bench results…", None, "_calibrate_dialog",
     "Fit the chosen device's speed from llama-bench rows measured on it (docs/calibration.md)"),
)
MENUS = {
    "&File": ("open_action", "synth_action", "trace_action", None, "export_action", None, "quit_action"),
    "&Run": ("run_action", "stop_action", None, "sweep_action", "tune_action", None, "follow_action"),
    "&Profile": ("save_profile_action", None, "calibrate_action"),
}
TOOLBAR = ("run_action", "stop_action", None, "open_action", "export_action")


def build_actions(window) -> None:
    for attr, text, shortcut, method, tip in ACTIONS:
        a = QAction(text, window)
        if shortcut:
            a.setShortcut(QKeySequence(shortcut))
        a.setToolTip(f"{tip or text} ({QKeySequence(shortcut).toString()})" if shortcut else tip or text)
        a.triggered.connect(lambda _checked=False, m=method: getattr(window, m)())
        window.addAction(a)  # shortcuts work even with the menu bar hidden
        setattr(window, attr, a)


def build_menus(window) -> None:
    bar = window.menuBar()
    for title, names in MENUS.items():
        menu = bar.addMenu(title)
        for name in names:
            menu.addSeparator() if name is None else menu.addAction(getattr(window, name))
    tools = window.addToolBar("Main")
    tools.setObjectName("main-toolbar")
    tools.setMovable(False)
    for name in TOOLBAR:
        tools.addSeparator() if name is None else tools.addAction(getattr(window, name))
