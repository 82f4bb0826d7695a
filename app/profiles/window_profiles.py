"""The window's profile actions: pick, load, apply and save tuning profiles.

A mixin of MainWindow (it uses the window's store, panels, settings and messages), kept
apart so the window module stays about drawing and the profile rules read in one place.
"""

from __future__ import annotations

from PySide6.QtWidgets import QInputDialog

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.profile_file import Profile
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
        """Set every control from a profile — unless a value cannot fit the open model."""
        info = self.model_info
        if info is not None and profile.settings.shard_mb > info.file_mb and not profile.settings.model_path:
            where = profile.path or profile.name
            self.show_error(f"{where}: 'shard_mb' = {profile.settings.shard_mb:g} MB is larger than the open "
                            f"model {info.name} ({info.file_mb:.0f} MB); profile not applied")
            return
        self._make_current(profile)
        self.set_device(profile.device)  # a profile is tuned for its device: project onto it
        if profile.settings.model_path and profile.settings.model_path != self.model_path:
            self.open_model(profile.settings.model_path)
        self.apply_settings(profile.settings, label=f"profile {profile.name}")
        self.statusBar().showMessage(f"profile {profile.name}: {profile.description}".rstrip(": "), 8000)

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
            profile = self.store.save(name, settings, device=device, description=description)
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
