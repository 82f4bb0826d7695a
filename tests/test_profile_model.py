"""Issue 48, item 5: profiles know their model. A profile saved from the window records the
model (name, size, a fingerprint of its GGUF header); applied to another model the window says,
before Run, what that changes (the budget raised to this model's minimum, knobs that do not
apply); and a restart that reopens the bundled model with a profile tuned for an MoE model runs.
"""

from __future__ import annotations

import pytest

from conftest import make_window, wait_for
from shardscope.engine.base.errors import ShardscopeError
from shardscope.engine.knobs.profile_file import Profile, load_profile, model_of_file, save_profile
from shardscope.engine.knobs.settings import RunSettings
from shardscope.engine.layout.budget_minimum import minimum_for
from shardscope.engine.runs.run_factory import check_run


@pytest.fixture(scope="module")
def moe_file(tmp_path_factory) -> str:
    from shardscope.engine.synth.synth import write_synthetic_model
    from shardscope.engine.synth.synth_moe import MoeSpec

    path = tmp_path_factory.mktemp("profile-moe") / "moe-tuned.gguf"
    write_synthetic_model(path, 60, n_layers=4, moe=MoeSpec(16, 2))
    return str(path)


def test_a_profile_keeps_its_model_through_save_and_load(tmp_path, moe_file, bundled_model) -> None:
    model = model_of_file(moe_file)
    assert model.name == "moe-tuned.gguf" and model.size_bytes > 0 and len(model.fingerprint) == 40
    assert model_of_file(moe_file) == model  # the header, read again
    assert not model.same_model(model_of_file(bundled_model))
    profile = Profile("tuned", RunSettings(budget_mb=40), model=model)
    save_profile(profile, tmp_path / "tuned.toml")
    assert "[model]" in (tmp_path / "tuned.toml").read_text()
    assert load_profile(tmp_path / "tuned.toml") == profile
    assert load_profile(tmp_path / "tuned.toml").model == model


@pytest.mark.parametrize("table, says", [
    ('name = "x.gguf"\nsize_bytes = 5', "[model] is missing required key 'fingerprint'"),
    ('name = "x.gguf"\nsize_bytes = -1\nfingerprint = "' + "a" * 40 + '"', "size_bytes must be a whole number"),
    ('name = "x.gguf"\nsize_bytes = 5\nfingerprint = "xyz"', "fingerprint must be 40 hex digits"),
    ('name = "x.gguf"\nsize_bytes = 5\nfingerprint = "' + "a" * 40 + '"\nsha = 1', "unknown key 'sha' in [model]"),
])
def test_a_bad_model_table_is_one_line_naming_the_file(tmp_path, table, says) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('name = "bad"\n[settings]\nbudget_mb = 100\nshard_mb = 64\nprefetch_depth = 2\nthreads = 2\n'
                    f'policy = "pinned"\n[model]\n{table}\n')
    with pytest.raises(ShardscopeError) as info:
        load_profile(path)
    message = str(info.value)
    assert str(path) in message and says in message and "\n" not in message


def test_restart_with_a_profile_tuned_for_another_model_runs(qtbot, tmp_path, moe_file) -> None:
    config = tmp_path / "config"
    first = make_window(qtbot, config, model_path=moe_file)
    try:
        first.apply_settings(first.current_settings().with_changes(
            budget_mb=40, expert_cache_mb=20, expert_policy="lfu", n_gen=6))
        saved = first.save_profile_as("moe tuned")
        assert saved is not None and saved.model == model_of_file(moe_file)
    finally:
        first.close()  # remembers "moe tuned" as the last profile

    window = make_window(qtbot, config)  # the bundled model, as a restart opens it
    errors: list[str] = []
    window.message_hook = errors.append
    try:
        assert window.current_profile is not None and window.current_profile.name == "moe tuned"
        settings = window.current_settings()
        floor = minimum_for(settings).mb
        # Before Run: the budget moved to the bundled model's minimum, and the window says so.
        assert settings.budget_mb == floor > 40
        check_run(settings)
        fit = window.profile_panel.fit()
        assert fit.startswith(f"moe tuned was tuned for moe-tuned.gguf ({saved.model.size_bytes / 2**20:,.0f} MiB); "
                              f"on {window.model_info.name}: "), fit
        assert f"budget 40\u2192{floor} MiB (this model's minimum)" in fit, fit
        assert "expert cache, expert policy do not apply (dense model)" in fit, fit
        assert window.profile_panel.fit_label.isVisible()
        assert window.notes()["budget_mb"].startswith(f"budget 40\u2192{floor} MiB"), window.notes()
        window.start_run()
        wait_for(qtbot, window, lambda: len(window.summaries) >= 1 or window.last_error is not None, 180_000)
        assert window.last_error is None and not errors, (window.last_error, errors)
        assert window.summaries[0].budget_mb == floor
    finally:
        window.close()


def test_a_profile_on_its_own_model_says_nothing(qtbot, tmp_path, moe_file) -> None:
    window = make_window(qtbot, tmp_path / "config", model_path=moe_file)
    try:
        window.apply_settings(window.current_settings().with_changes(budget_mb=40))
        window.save_profile_as("own")
        window.load_profile("own")
        assert window.profile_panel.fit() == ""
    finally:
        window.close()
