"""The window's profile actions: pick, load, apply and save tuning profiles.

A mixin of MainWindow (it uses the window's store, panels, settings and messages), kept
apart so the window module stays about drawing and the profile rules read in one place.
"""

from __future__ import annotations

from PySide6.QtWidgets import QInputDialog

from shardscope.app.profiles.settings_binding import describe_change
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.units import MIB
from shardscope.engine.knobs.knobs import ENABLED, KNOBS
from shardscope.engine.knobs.profile_file import Profile, ProfileModel, model_of_file
from shardscope.engine.knobs.settings import RunSettings


class WindowProfiles:
    def refresh_profiles(self) -> None:
        errors = self.profile_panel.refresh(self.current_profile)
        if errors:
            self.show_error("Some profiles were left out:\n" + "\n".join(errors))

    def profile_names(self) -> list[str]:
        return self.profile_panel.names()

    def load_profile(self, name: str) -> Profile:
        profile = self.store.find(name)
        if profile is None:
            raise ShardscopeError(f"no profile named {name!r}")
        self.apply_profile(profile)
        return profile

    def apply_profile(self, profile: Profile) -> None:
        """Set every control from a profile. A value the open model cannot run with is moved to
        the nearest one it can; what that changes, and what does not apply to this model, is
        said under the profile before Run (profile_fit)."""
        self._make_current(profile)
        self.set_device(profile.device)  # a profile is tuned for its device: project onto it
        if profile.settings.model_path and profile.settings.model_path != self.model_path:
            self.open_model(profile.settings.model_path)
        self.apply_settings(profile.settings, label=f"profile {profile.name}")
        self.statusBar().showMessage(f"profile {profile.name}: {profile.description}".rstrip(": "), 8000)
        self.show_profile_fit()

    def open_model_record(self) -> ProfileModel | None:
        """The open model as a profile records it (None before one is open, or unreadable)."""
        info = self.model_info
        if info is None:
            return None
        try:
            return model_of_file(info.path)
        except ShardscopeError:
            return None

    def profile_fit(self) -> str:
        """One line: the current profile on the open model — the model it was tuned for when that
        is another, the values moved to what this model runs with, the knobs that do not apply."""
        profile, info = self.current_profile, self.model_info
        if profile is None or info is None:
            return ""
        asked, now = profile.settings, self.current_settings()
        changes = []
        for k in self.controls.sliders:
            if getattr(asked, k) == getattr(now, k):
                continue
            text = describe_change(k, getattr(asked, k), getattr(now, k))
            if k == "budget_mb" and now.budget_mb == self.controls.sliders[k].slider.minimum():
                text += " (this model's minimum)"
            changes.append(text)
        open_model = self.open_model_record()
        tuned = profile.model
        unused: dict[str, list[str]] = {}  # why -> the knobs, set away from their defaults, it greys
        for k in ENABLED if tuned is None or not tuned.same_model(open_model) else ():
            why = self._greyed(k)
            if KNOBS[k].streams and why and getattr(asked, k) != KNOBS[k].default:
                unused.setdefault(why, []).append(KNOBS[k].short)
        for why, names in unused.items():
            changes.append(f"{', '.join(names)} {'does' if len(names) == 1 else 'do'} not apply ({why})")
        if tuned is not None and not tuned.same_model(open_model):
            head = (f"{profile.name} was tuned for {tuned.name} ({tuned.size_bytes / MIB:,.0f} MiB); "
                    f"on {info.name}")
        elif tuned is None and changes:
            head = f"{profile.name} (its model not recorded) on {info.name}"
        else:
            head = f"{profile.name} on {info.name}"
        if not changes:
            return "" if tuned is None or tuned.same_model(open_model) else f"{head}: every value runs as saved"
        return f"{head}: {'; '.join(changes)}"

    def _greyed(self, key: str) -> str:
        """Why a knob does nothing for the open model ("dense model", "experts stream"), or ""."""
        kind = KNOBS[key].streams
        if not kind:
            return ""
        same_kind = "expert_cache_mb" if kind == "experts" else "shard_mb"
        return self.controls.sliders[same_kind].disabledReason() or ""

    def show_profile_fit(self) -> None:
        text = self.profile_fit()
        self.profile_panel.show_fit(text)
        if text:
            self.statusBar().showMessage(text, 10000)

    def _make_current(self, profile: Profile) -> None:
        self.current_profile = profile
        self.profile_panel.select(profile)
        self.qsettings.setValue("profile/last", profile.name)

    def save_profile_as(self, name: str, settings: RunSettings | None = None, *, device: str | None = None,
                        description: str | None = None) -> Profile | None:
        """Save the controls as a user profile (it becomes the current one, for the
        window's device); shows and returns None if refused.

        With ``settings`` (a sweep row, a tune result) those are saved for ``device``
        instead, and the window's controls and current profile stay as they are: saving
        a candidate is not choosing it.
        """
        own = settings is None
        if own:
            settings, device = self.current_settings(), self.device_id()
        if description is None:
            description = f"Saved from the shardscope window (tuned on {self.model_name()})."
        try:
            profile = self.store.save(name, settings, device=device, description=description,
                                      model=self.open_model_record())
        except ShardscopeError as exc:
            self.show_error(str(exc))
            return None
        if own:
            self.current_profile = profile
        self.refresh_profiles()
        if own:
            self._make_current(profile)
        self.statusBar().showMessage(f"saved profile {profile.name!r} to {profile.path}", 8000)
        return profile

    def _save_profile_dialog(self) -> None:
        suggestion = "" if not self.current_profile or self.current_profile.builtin else self.current_profile.name
        name, ok = QInputDialog.getText(self, "Save profile", "Profile name:", text=suggestion)
        if ok and name.strip():
            self.save_profile_as(name)
