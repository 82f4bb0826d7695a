"""The profiles the window offers: read-only built-ins plus the user's own folder.

The engine's ``profile_file`` owns the format and its messages; this adds the
rules a window needs on top: a name already taken by a built-in is refused (two
"iPhone 16 Pro, tuned" entries, one silently different, would mislead), and a user file
that does not load is never overwritten — the user may want to fix it by hand, and
the message naming the file and key is their guide.
"""

from __future__ import annotations

from pathlib import Path

from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.profile_file import (
    Profile,
    ProfileModel,
    list_profiles,
    load_profile,
    profile_filename,
    save_profile,
)
from shardscope.engine.knobs.settings import RunSettings


class ProfileStore:
    def __init__(self, user_dir: Path) -> None:
        self.user_dir = Path(user_dir)
        self.profiles: list[Profile] = []
        self.errors: list[str] = []

    def refresh(self) -> tuple[list[Profile], list[str]]:
        """Re-read both folders; a broken file is left out and reported, never fatal."""
        self.profiles, self.errors = list_profiles(self.user_dir)
        return self.profiles, self.errors

    def find(self, name: str) -> Profile | None:
        """The user's profile wins only if no built-in has the name (save refuses that anyway)."""
        matches = [p for p in self.profiles if p.name == name]
        matches.sort(key=lambda p: not p.builtin)
        return matches[0] if matches else None

    def path_for(self, name: str) -> Path:
        return self.user_dir / profile_filename(name)

    def save(self, name: str, settings: RunSettings, *, description: str = "",
             device: str | None = None, model: ProfileModel | None = None) -> Profile:
        """Write ``name`` to the user folder; ShardscopeError (nothing written) if refused."""
        name = name.strip()
        if not name:
            raise ShardscopeError("profile name must not be empty")
        self.refresh()
        if any(p.builtin and p.name.casefold() == name.casefold() for p in self.profiles):
            raise ShardscopeError(
                f"{name!r} is a built-in profile and read-only: save under another name")
        path = self.path_for(name)
        if path.exists():
            try:
                existing = load_profile(path)
            except ShardscopeError as exc:
                raise ShardscopeError(
                    f"{exc} — not overwritten: fix or remove that file, or choose another name") from None
            if existing.name != name:
                raise ShardscopeError(
                    f"{path}: already holds profile {existing.name!r} (same file name); choose another name")
        # Usable on any model (no path kept), but they record the model they were tuned for
        # (``model``), so applying one to another model can say what it changes.
        profile = Profile(name=name, settings=settings.with_changes(model_path=None),
                          description=description, device=device, path=path, model=model)
        save_profile(profile, path)
        self.refresh()
        return self.find(name) or profile
