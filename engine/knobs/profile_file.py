"""Tuning profiles: named RunSettings saved as small TOML files.

A profile file looks like this::

    name = "iPhone 16 Pro"
    description = "..."        # optional
    device = "iphone-16-pro"   # optional, a device id
    [settings]
    budget_mb = 2048           # knobs declared required=True must be given
    shard_mb = 64              # (engine.knobs: budget, shard, prefetch, threads, policy)
    ...
    n_gpu_layers = 0           # optional keys fall back to RunSettings defaults
    ssd_mb_s = 860.0
    [model]                    # optional: the model it was tuned for
    name = "qwen3moe-250.gguf"
    size_bytes = 262144000
    fingerprint = "9f3c..."    # sha1 of the GGUF header (metadata and tensor table)

Every enabled knob may appear in ``[settings]`` (``model_path`` as a string);
any other key, at the top level or in ``[settings]``, is refused. Loading never
raises anything but :class:`ShardscopeError`, and its one-line message names the file
and the key to fix. Saving checks the profile with the same rules as loading, so an
invalid profile never reaches disk, and writes atomically.

Built-in profiles live in the repository's ``profiles/`` folder (TOML files directly
in it; subfolders such as ``profiles/devices/`` are not profiles) and are read-only.
"""

from __future__ import annotations

import difflib
import os
import re
import unicodedata
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import tomli_w

from shardscope.engine.base.atomic_write import write_text_atomic
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.base.toml_file import read_toml
from shardscope.engine.knobs.knobs import ENABLED, KNOBS
from shardscope.engine.knobs.settings import RunSettings, validate

__all__ = [
    "Profile",
    "load_profile",
    "save_profile",
    "builtin_profiles_dir",
    "list_profiles",
    "profile_filename",
    "REQUIRED_SETTINGS",
    "TOP_LEVEL_KEYS",
    "SETTINGS_KEYS",
    "ProfileModel",
    "model_of_file",
]


@dataclass(frozen=True)
class ProfileModel:
    """The model a profile was tuned for: its file name, size and a fingerprint of its GGUF header
    (metadata and tensor table, not the weights), so a profile applied to another model can say so."""

    name: str
    size_bytes: int
    fingerprint: str

    def same_model(self, other: "ProfileModel | None") -> bool:
        return other is not None and self.fingerprint == other.fingerprint and self.size_bytes == other.size_bytes


MODEL_KEYS = ("name", "size_bytes", "fingerprint")


def model_of_file(path: str | os.PathLike) -> ProfileModel:
    """The ProfileModel of a GGUF file (ShardscopeError naming the file if it is not one)."""
    import hashlib

    from shardscope.engine.layout.layout_cache import load_layout

    layout = load_layout(path)
    try:
        with open(layout.path, "rb") as handle:
            header = handle.read(layout.data_offset)
    except OSError as exc:
        raise ShardscopeError(f"{path}: cannot read ({exc.strerror or exc})") from None
    return ProfileModel(Path(layout.path).name, int(layout.file_size), hashlib.sha1(header).hexdigest())


@dataclass(frozen=True)
class Profile:
    """A named set of RunSettings.

    ``path`` records where the profile was loaded from; it takes no part in ``==``,
    so a profile equals its saved-and-reloaded copy.
    """

    name: str
    settings: RunSettings
    description: str = ""
    device: str | None = None
    builtin: bool = False
    path: Path | None = field(default=None, compare=False)
    model: ProfileModel | None = None  # the model it was tuned for; None: not recorded


TOP_LEVEL_KEYS = ("name", "description", "device", "settings", "model")
REQUIRED_TOP_LEVEL = ("name", "settings")
SETTINGS_KEYS = ENABLED  # knobs declared but not enabled yet are no profile keys
REQUIRED_SETTINGS = tuple(key for key in ENABLED if KNOBS[key].required)

# The type each [settings] key must have in the file: the knob's declared type.
_INT_KEYS = frozenset(key for key in ENABLED if KNOBS[key].type is int)
_FLOAT_KEYS = frozenset(key for key in ENABLED if KNOBS[key].type is float)
_BOOL_KEYS = frozenset(key for key in ENABLED if KNOBS[key].type is bool)

# A profile is a few hundred bytes; anything this big is not one.


def builtin_profiles_dir() -> Path:
    """The repository's read-only ``profiles/`` folder."""
    return Path(__file__).resolve().parents[2] / "profiles"  # the repository root: engine/knobs/ is two down


def _is_builtin_path(path: Path) -> bool:
    try:
        return path.resolve().parent == builtin_profiles_dir()
    except (OSError, RuntimeError):
        return False


def _short(value: Any, limit: int = 60) -> str:
    """repr() of a value, cut short so a message stays one readable line."""
    text = ("true" if value else "false") if isinstance(value, bool) else repr(value)
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return text


def _type_name(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    if isinstance(value, dict):
        return "a table"
    return f"a {type(value).__name__}"  # TOML dates and times


def _unknown_key_message(source: str, key: str, where: str, known: tuple[str, ...]) -> str:
    message = f"{source}: unknown key {_short(key)} {where}"
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    if where == "at the top level" and key in SETTINGS_KEYS:
        message += " (it belongs under [settings])"
    elif close:
        message += f" (did you mean {close[0]!r}?)"
    else:
        message += f" (allowed: {', '.join(known)})"
    return message


def _check_setting(source: str, key: str, value: Any) -> Any:
    """Return the value with the type RunSettings expects, or refuse it."""
    label = f"{source}: [settings] {key}"
    if key in _BOOL_KEYS:
        if not isinstance(value, bool):
            raise ShardscopeError(f"{label} must be true or false, got {_short(value)}")
        return value
    if key in _INT_KEYS:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ShardscopeError(f"{label} must be an integer, got {_short(value)}")
        return value
    if key in _FLOAT_KEYS:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ShardscopeError(f"{label} must be a number, got {_short(value)}")
        try:
            return float(value)
        except OverflowError:
            raise ShardscopeError(f"{label} = {_short(value)} is out of range") from None
    if key in _BOOL_KEYS:
        if not isinstance(value, bool):
            raise ShardscopeError(f"{label} must be true or false, got {_short(value)}")
        return value
    if not isinstance(value, str):
        raise ShardscopeError(f"{label} must be a string, got {_type_name(value)} {_short(value)}")
    return value


def _profile_from_data(data: Any, source: str, path: Path | None, builtin: bool) -> Profile:
    """Check parsed TOML against the schema and build the Profile."""
    if not isinstance(data, dict):  # pragma: no cover - tomllib always gives a dict
        raise ShardscopeError(f"{source}: not a profile (expected a TOML table)")

    for key in data:
        if key not in TOP_LEVEL_KEYS:
            raise ShardscopeError(
                _unknown_key_message(source, key, "at the top level", TOP_LEVEL_KEYS)
            )
    for key in REQUIRED_TOP_LEVEL:
        if key not in data:
            raise ShardscopeError(f"{source}: missing required key {key!r}")

    name = data["name"]
    if not isinstance(name, str):
        raise ShardscopeError(f"{source}: 'name' must be a string, got {_short(name)}")
    if not name.strip():
        raise ShardscopeError(f"{source}: 'name' must not be empty")
    if "\n" in name or "\r" in name:
        raise ShardscopeError(f"{source}: 'name' must be a single line, got {_short(name)}")

    description = data.get("description", "")
    if not isinstance(description, str):
        raise ShardscopeError(
            f"{source}: 'description' must be a string, got {_short(description)}"
        )

    device = data.get("device")
    if device is not None:
        if not isinstance(device, str):
            raise ShardscopeError(f"{source}: 'device' must be a string, got {_short(device)}")
        if not device.strip():
            raise ShardscopeError(f"{source}: 'device' must not be empty (leave it out instead)")

    table = data["settings"]
    if not isinstance(table, dict):
        raise ShardscopeError(
            f"{source}: 'settings' must be a table ([settings]), got {_type_name(table)}"
        )
    for key in table:
        if key not in SETTINGS_KEYS:
            raise ShardscopeError(
                _unknown_key_message(source, key, "in [settings]", SETTINGS_KEYS)
            )
    for key in REQUIRED_SETTINGS:
        if key not in table:
            raise ShardscopeError(f"{source}: [settings] is missing required key {key!r}")

    values = {key: _check_setting(source, key, value) for key, value in table.items()}
    if values.get("model_path") == "":
        raise ShardscopeError(
            f"{source}: [settings] model_path must not be empty "
            "(leave it out to use the bundled model)"
        )
    settings = validate(RunSettings(**values), source=f"{source} [settings]")
    return Profile(
        name=name,
        settings=settings,
        description=description,
        device=device,
        builtin=builtin,
        path=path,
        model=_model_from_data(data.get("model"), source),
    )


def _model_from_data(table: Any, source: str) -> ProfileModel | None:
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ShardscopeError(f"{source}: 'model' must be a table ([model]), got {_type_name(table)}")
    for key in table:
        if key not in MODEL_KEYS:
            raise ShardscopeError(_unknown_key_message(source, key, "in [model]", MODEL_KEYS))
    for key in MODEL_KEYS:
        if key not in table:
            raise ShardscopeError(f"{source}: [model] is missing required key {key!r}")
    name, size, fingerprint = table["name"], table["size_bytes"], table["fingerprint"]
    if not isinstance(name, str) or not name.strip():
        raise ShardscopeError(f"{source}: [model] name must be a file name, got {_short(name)}")
    if isinstance(size, bool) or not isinstance(size, int) or size < 0:
        raise ShardscopeError(f"{source}: [model] size_bytes must be a whole number of bytes, got {_short(size)}")
    if not isinstance(fingerprint, str) or not re.fullmatch(r"[0-9a-f]{40}", fingerprint):
        raise ShardscopeError(f"{source}: [model] fingerprint must be 40 hex digits (sha1), got {_short(fingerprint)}")
    return ProfileModel(name, size, fingerprint)


def load_profile(path: str | os.PathLike) -> Profile:
    """Read and check one profile file.

    Raises ShardscopeError (one line naming the file and, where there is one, the key)
    for a missing or unreadable file, bytes that are not UTF-8, text that is not TOML,
    and any value outside the schema or a knob's declared range.
    """
    path = Path(path)
    source = str(path)
    data = read_toml(path, "profile file")
    return _profile_from_data(data, source, path, _is_builtin_path(path))


def _profile_to_data(profile: Profile) -> dict[str, Any]:
    data: dict[str, Any] = {"name": profile.name}
    if profile.description:
        data["description"] = profile.description
    if profile.device is not None:
        data["device"] = profile.device
    settings = profile.settings
    table: dict[str, Any] = {}
    for key in SETTINGS_KEYS:
        value = getattr(settings, key)
        if value is None and key == "model_path":
            continue  # None = the bundled model; TOML has no null
        table[key] = value
    data["settings"] = table
    if profile.model is not None:
        data["model"] = {"name": profile.model.name, "size_bytes": int(profile.model.size_bytes),
                         "fingerprint": profile.model.fingerprint}
    return data


def save_profile(profile: Profile, path: str | os.PathLike) -> None:
    """Check the profile, then write it to ``path`` atomically as TOML.

    Refuses (ShardscopeError) to write into the built-in profiles folder, and refuses
    a profile that would not load back, before touching the disk.
    """
    path = Path(path)
    source = str(path)
    if _is_builtin_path(path):
        raise ShardscopeError(
            f"{source}: built-in profiles are read-only; save under a new name in "
            "your profiles folder"
        )
    if not isinstance(profile, Profile) or not isinstance(profile.settings, RunSettings):
        raise ShardscopeError(f"{source}: not a profile: {_short(profile)}")

    data = _profile_to_data(profile)
    # Same rules as loading: whatever is saved loads back.
    _profile_from_data(data, source, path, builtin=False)
    try:
        text = tomli_w.dumps(data)
        text.encode("utf-8")
    except (TypeError, ValueError) as exc:  # e.g. lone surrogates in a string
        raise ShardscopeError(f"{source}: cannot be written as TOML ({exc})") from None

    parent = path.parent if str(path.parent) else Path(".")
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ShardscopeError(
            f"{source}: cannot create folder {parent} ({exc.strerror or exc})"
        ) from None
    write_text_atomic(path, text)


def _profile_files(directory: Path) -> list[Path]:
    return sorted(
        (p for p in directory.glob("*.toml") if p.is_file() and not p.name.startswith(".")),
        key=lambda p: p.name,
    )


def list_profiles(user_dir: str | os.PathLike | None) -> tuple[list[Profile], list[str]]:
    """All profiles: built-ins first (builtin=True), then the user's, each by file name.

    A file that does not load is left out and its one-line error is returned in the
    second list, so one broken file never hides the others. A missing user folder is
    not an error (nothing saved yet).
    """
    profiles: list[Profile] = []
    errors: list[str] = []
    builtin_dir = builtin_profiles_dir()

    directories: list[Path] = [builtin_dir]
    if user_dir is not None:
        user_path = Path(user_dir)
        try:
            same = user_path.resolve() == builtin_dir
        except (OSError, RuntimeError):
            same = False
        if not same:
            directories.append(user_path)

    for directory in directories:
        if not directory.exists():
            continue
        try:
            files = _profile_files(directory)
        except OSError as exc:
            errors.append(f"{directory}: cannot list profiles ({exc.strerror or exc})")
            continue
        for file in files:
            try:
                profiles.append(load_profile(file))
            except ShardscopeError as exc:
                errors.append(str(exc))
    return profiles, errors


_WINDOWS_RESERVED = {
    "con", "prn", "aux", "nul",
    *(f"com{i}" for i in range(1, 10)),
    *(f"lpt{i}" for i in range(1, 10)),
}


def profile_filename(name: str) -> str:
    """A safe file name for a profile name: "iPhone 16 Pro" -> "iphone-16-pro.toml".

    Lower-case ASCII letters, digits and single dashes only, so the name is valid on
    every file system and cannot climb out of the profiles folder.
    """
    ascii_name = unicodedata.normalize("NFKD", str(name)).encode("ascii", "ignore").decode()
    slug = re.sub(r"[^a-z0-9]+", "-", ascii_name.lower()).strip("-")
    slug = slug[:80].rstrip("-")
    if not slug:
        slug = "profile"
    if slug in _WINDOWS_RESERVED:
        slug += "-profile"
    return f"{slug}.toml"
