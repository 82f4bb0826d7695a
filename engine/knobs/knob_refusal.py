"""A refused knob value, worded for the interface that shows it.

The CLI user typed ``--budget-mb``; the window user moved the Memory budget slider.
A refusal that says "i.e. --budget-mb 1128" to the window user speaks the wrong
language, so the engine raises the reason and the value that would work, and each
interface words the advice with its own name for the knob (the declaration in
engine/knobs/knobs.py holds both: ``flag`` and ``label``).
"""

from __future__ import annotations

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.knobs import KNOBS


class KnobRefusal(ShardscopeError):
    def __init__(self, reason: str, knob: str, value: float, bound: str = "at least", given=None) -> None:
        """``value``: what would work; ``bound``: "at least", "at most" or "" (exactly);
        ``given``: the refused value, named first when the reason does not say it."""
        self.reason, self.knob, self.value, self.bound, self.given = reason, knob, value, bound, given
        super().__init__(self.for_cli())

    def _value(self, grouped: bool, v=None) -> str:
        v = self.value if v is None else v
        text = f"{v:,.0f}" if grouped and float(v).is_integer() else f"{v:g}"
        unit = KNOBS[self.knob].unit
        return f"{text} {unit}" if grouped and unit else text

    def for_cli(self) -> str:
        spec = KNOBS[self.knob]
        advice = f"{spec.flag} {self._value(False)}"
        head = f"{spec.flag} {self._value(False, self.given)}: " if self.given is not None else ""
        return f"{head}{self.reason}; use {advice}" + (f" or {'more' if self.bound == 'at least' else 'less'}"
                                                  if self.bound else "")

    def for_window(self) -> str:
        spec = KNOBS[self.knob]
        bound = f"{self.bound} " if self.bound else ""
        head = f"{spec.label} {self._value(True, self.given)}: " if self.given is not None else ""
        return f"{head}{self.reason}; set {spec.label} to {bound}{self._value(True)}"
