"""An auto-tune's result in words: each knob's decision, and the best with its interval, margin,
ties and the knobs with no effect — what the CLI prints, the dialog's Best box shows and a saved
profile's description records (engine/search/tune.py)."""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass
from pathlib import Path

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.knobs import KNOBS, TUNED, describe
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.search.interval_decision import Choice

__all__ = ["KnobDecision", "verdict_text", "save_tuned_profile", "tuned_profile_path", "user_profiles_dir"]

TUNE_KNOBS = TUNED

@dataclass(frozen=True)
class KnobDecision:
    """What one pass decided for one knob."""

    knob: str
    pass_number: int
    choice: Choice | None  # None: no candidate ran
    no_effect: bool = False
    moved: bool = False

    def text(self) -> str:
        if self.choice is None:
            return f"pass {self.pass_number}: {self.knob}: no candidate ran"
        spec = KNOBS[self.knob]
        if self.no_effect:
            return (f"pass {self.pass_number}: {self.knob}: no effect on the projected figure (with the compute "
                    f"held, its {len(self.choice.intervals)} values project alike: the device's time "
                    "is not its reads); "
                    f"kept {spec.text(self.choice.pick)}")
        c = self.choice
        head = f"pass {self.pass_number}: {self.knob} → {spec.text(c.pick)}"
        if len(c.ties) > 1:
            names = ", ".join(f"{spec.text(k)} {c.intervals[k].text()}" for k in c.ties)
            return f"{head} ({c.why}; tied: {names})"
        return f"{head} (clear: {c.intervals[c.pick].text()})"


def _candidate_text(ev, keys: tuple[str, ...]) -> str:
    return f"{describe(ev.settings, keys) or 'the start'} {ev.interval.text()}"


def verdict_text(result) -> str:
    """The best as a decision: its interval, its margin over the best candidate it is not tied
    with, its ties and the knobs with no effect — what the CLI prints last and a saved profile's
    description records."""
    best = result.best
    if best is None or best.interval is None:
        return "no candidate ran and fit the device"
    s = best.summary
    varied = tuple(k for k in TUNE_KNOBS if len(result.candidates.get(k, ())) > 1)
    here = best.measured_interval
    parts = [f"projected {best.interval.text()} tok/s ({s.projected_bound}-bound), measured "
             f"{here.text() if here is not None else '?'} tok/s on the tuning host"]
    runner = result.runner_up()
    if runner is not None:
        parts.append(f"margin {100 * result.margin():+.0f} % over the next clear candidate "
                     f"({_candidate_text(runner, varied)})")
    else:
        parts.append("margin: none measured (every candidate ties with it)")
    ties = result.ties()
    if ties:
        shown = "; ".join(_candidate_text(e, varied) for e in sorted(ties, key=lambda e: -e.score)[:6])
        more = f" and {len(ties) - 6} more" if len(ties) > 6 else ""
        parts.append(f"tied with {len(ties)} (intervals overlap; the default or cheaper setting kept): {shown}{more}")
    else:
        parts.append("no ties")
    idle = result.no_effect_knobs()
    if idle:
        parts.append(f"no effect on the projection: {', '.join(idle)} (not ranked)")
    parts.append(f"coordinate descent, {result.runs} runs ({result.rounds} warm rounds) of a "
                 f"{result.grid_size}-combination grid")
    return "; ".join(parts) + "."


def user_profiles_dir() -> Path:
    """Where user profiles live; the same folder the window lists (engine.base.user_dirs)."""
    from shardscope.engine.base.user_dirs import profiles_dir

    return profiles_dir()


def tuned_profile_path(name: str, directory: str | os.PathLike | None = None, *, force: bool = False) -> Path:
    """Where ``--save-profile NAME`` writes; an existing profile is refused unless ``force``
    (checked before the search, so a tune is never run only to be refused at the end)."""
    from shardscope.engine.knobs.profile_file import profile_filename

    if not isinstance(name, str) or not name.strip():
        raise ShardscopeError("--save-profile: the profile name must not be empty")
    folder = Path(directory) if directory is not None else user_profiles_dir()
    path = folder / profile_filename(name)
    if path.exists() and not force:
        raise ShardscopeError(f"--save-profile {name}: {path} already exists; pass --force to replace it")
    if folder.exists() and not (folder.is_dir() and os.access(folder, os.W_OK)):
        raise ShardscopeError(f"--save-profile {name}: cannot write into {folder}")
    return path


def save_tuned_profile(result, name: str, *, directory: str | os.PathLike | None = None,
                       model_path: str | None = None, force: bool = True) -> Path:
    """Write the best settings as a user profile; returns its path.

    The profile keeps the tuned knobs and budget; the measuring-only settings (a few
    tokens, the small context) go back to the defaults so the profile runs normally.
    """
    from shardscope.engine.knobs.profile_file import Profile, save_profile

    if result.best is None or result.best.summary is None:
        raise ShardscopeError("tune: no candidate ran and fit the device; nothing to save")
    best = result.best
    d = RunSettings()
    settings = best.settings.with_changes(
        model_path=model_path, n_gen=d.n_gen, n_ctx=d.n_ctx, prompt=d.prompt, temperature=d.temperature,
        seed=d.seed, budget_mb=int(round(best.settings.budget_mb)), shard_mb=int(round(best.settings.shard_mb)),
    )
    description = (f"Auto-tuned {_dt.date.today().isoformat()} for {result.device_id} on "
                   f"{best.summary.model_filename}: {verdict_text(result)}")
    path = tuned_profile_path(name, directory, force=force)
    save_profile(Profile(name=name.strip(), settings=settings, description=description, device=result.device_id),
                 path)
    return path
