"""The window's sliders offer only what runs: their ranges follow the open model and the other
knobs (app/files/knob_limits.py), a value outside is moved inside with a note beside the slider
saying why, and a change the engine still refuses is said beside the control, never in a modal
dialog (one took the keyboard mid-step and ended a drag).

A mixin of MainWindow (it uses the window's model, controls, runs and status bar).
"""

from __future__ import annotations

from shardscope.app.files.knob_limits import SliderLimit, slider_limits
from shardscope.app.profiles.settings_binding import describe_change


class WindowLimits:
    def _fit_ranges(self) -> list[tuple[str, object, object]]:
        """Fit every model-dependent slider to the engine's range; the values moved, as
        (key, old, new), each with its note set beside its slider."""
        info = self.model_info
        if info is None:
            self.controls.set_maximum("budget_mb", 4096)
            return []
        moved: list[tuple[str, object, object]] = []
        # The budget's floor at the other knobs first, then the others' ranges at that budget.
        limits = slider_limits(info, self.current_settings())
        self._limit("budget_mb", limits["budget_mb"], moved)
        limits = slider_limits(info, self.current_settings())
        for key in self.controls.sliders:
            if key == "budget_mb":
                continue
            if key in limits:
                self._limit(key, limits[key], moved)
            elif self.controls.limits(key) is not None:
                self.controls.drop_limits(key)
        self._limits_now = limits
        return moved

    def _limit(self, key: str, limit: SliderLimit, moved: list) -> None:
        change = self.controls.set_limits(key, limit.low, limit.high, off_below=limit.off_below)
        if change is None:
            return
        old, new = change
        why = limit.low_why if new == limit.low else limit.high_why if new == limit.high else ""
        if limit.off_below and not new:
            why = "no set size fits what the budget leaves: the cache takes what is left (auto)"
        self.controls.set_note(key,
                               f"{describe_change(key, old, new)}: {why}" if why else describe_change(key, old, new))
        moved.append((key, old, new))

    def _note_at_end(self, key: str) -> None:
        """A user's value at an end the engine sets: beside the slider, why it goes no further."""
        limit = getattr(self, "_limits_now", {}).get(key)
        if limit is None or key not in self.controls.sliders:
            return
        value = self.controls.value(key)
        if limit.off_below and not value:
            self.controls.set_note(key, None)
        elif value == limit.low and limit.low_why:
            self.controls.set_note(key, limit.low_why)
        elif value == limit.high and limit.high_why:
            self.controls.set_note(key, limit.high_why)

    def clear_notes(self) -> None:
        for key in self.controls.sliders:
            self.controls.set_note(key, None)

    def notes(self) -> dict[str, str]:
        """The notes shown beside the sliders now (tests, the profile's "what it changes")."""
        return {k: s.note() for k, s in self.controls.sliders.items() if s.note()}

    def refuse_inline(self, key: str, message: str) -> None:
        """A change the engine refused: said beside the control and in the status bar, no dialog."""
        self.last_error = message
        self._shown_phase.clear()
        self.statusBar().showMessage(message.splitlines()[0], 10000)
        if key in self.controls.sliders:
            self.controls.set_note(key, message)
        self.error_shown.emit(message)


def moved_text(moved: list[tuple[str, object, object]]) -> str:
    return ", ".join(describe_change(k, a, b) for k, a, b in moved)


__all__ = ["WindowLimits", "moved_text"]
