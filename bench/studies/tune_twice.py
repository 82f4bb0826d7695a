"""Run → Auto-tune for device twice in the window on one model: the same best, or the same declared tie?

Issue 48's case: a qwen3moe Q4_K_M synth of ~250 MiB at a 90 MiB budget, tuned for the iPhone 16
Pro from the window's Auto-tune dialog with its default candidate lists. The window runs
offscreen (QT_QPA_PLATFORM=offscreen); each tune is the dialog's Start, waited for, its result
saved as a profile. Prints, per tune: every candidate's line (its interval), the decisions, the
Best box's text and the saved profile's description; then whether the two bests are the same
settings and, for each knob, whether the two declared ties name the same values.

    QT_QPA_PLATFORM=offscreen .venv/bin/python -m bench.studies.tune_twice [--model M.gguf] \\
        [--budget-mb 90] [--tokens 6] [--passes 2]
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def synth_model(folder: Path) -> str:
    from dataclasses import replace

    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import defaults_for

    path = folder / "qwen3moe-q4km-250.gguf"
    write_synthetic_model(path, 250, seed=0, moe=replace(defaults_for("qwen3moe"), quant="q4_k_m"))
    return str(path)


def wait(app, condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise SystemExit("timed out")
        app.processEvents()
        time.sleep(0.02)


def tune_once(app, window, name: str, tokens: int, passes: int) -> dict:
    from shardscope.engine.knobs.profile_file import load_profile

    dialog = window.open_tune_dialog()
    dialog.device_combo.set_device_id("iphone-16-pro")
    dialog.tokens_spin.setValue(tokens)
    dialog.passes_spin.setValue(passes)
    dialog.start()
    wait(app, lambda: dialog.runner.busy(), 30)
    wait(app, lambda: not dialog.runner.busy(), 1800)
    result = dialog.result
    best = re.sub(r"<[^>]+>", " ", dialog.best_label.text())
    profile = dialog.save_best_as(name)
    description = load_profile(profile.path).description if profile is not None else "(not saved)"
    ties = {d.knob: tuple(sorted(map(str, d.choice.ties))) for d in result.decisions
            if d.choice is not None and d.pass_number == 1}
    dialog.hide()
    return dict(log=dialog.log.toPlainText(), best=best, description=description, result=result, ties=ties)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model")
    p.add_argument("--budget-mb", type=int, default=90)
    p.add_argument("--tokens", type=int, default=6)
    p.add_argument("--passes", type=int, default=2)
    args = p.parse_args(argv)

    from PySide6.QtWidgets import QApplication

    from shardscope.app.window.main_window import MainWindow
    from shardscope.engine.knobs.knobs import TUNED, describe
    from shardscope.engine.knobs.settings import RunSettings

    app = QApplication.instance() or QApplication(sys.argv)
    with tempfile.TemporaryDirectory(prefix="tune-twice-") as tmp:
        model = args.model or synth_model(Path(tmp))
        window = MainWindow(config_dir=Path(tmp) / "config", model_path=model)
        window.show()
        wait(app, lambda: window.model_info is not None, 60)
        window.apply_settings(RunSettings(model_path=model, budget_mb=args.budget_mb, threads=1))
        window.set_device("iphone-16-pro")
        runs = []
        for i in (1, 2):
            t0 = time.monotonic()
            out = tune_once(app, window, f"tuned twice {i}", args.tokens, args.passes)
            runs.append(out)
            print(f"===== auto-tune {i} ({time.monotonic() - t0:.0f} s) =====")
            print(out["log"])
            print(f"Best box: {out['best']}")
            print(f"profile description: {out['description']}")
        a, b = (r["result"].best.settings for r in runs)
        same = describe(a, TUNED) == describe(b, TUNED)
        print(f"same best both times: {same} ({describe(a, TUNED)} / {describe(b, TUNED)})")
        for knob in runs[0]["ties"]:
            t1, t2 = runs[0]["ties"][knob], runs[1]["ties"].get(knob)
            print(f"  {knob}: tie 1 {t1}, tie 2 {t2}: {'same' if t1 == t2 else 'different'}")
        window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
