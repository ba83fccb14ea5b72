"""Compile and precision chosen by measurement, cached per machine."""

from __future__ import annotations

import pytest

from config import Config
from pipeline.learning import learner_choice as LC


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MARIO_DQN_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def fake_measure(rates):
    calls = []

    def measure(spec):
        calls.append(spec["variants"])
        return {f"{v}_updates_per_s": rates[v] for v in spec["variants"]}

    measure.calls = calls
    return measure


def catch(**changes) -> Config:
    return Config(**{"env_id": "Catch-v0", "batch_size": 32, "learner_threads": 1, **changes})


def test_the_fastest_variant_is_chosen_and_cached_per_machine(private_cache):
    measure = fake_measure({"eager": 14.7, "eager_amp": 5.8, "compiled": 12.8, "compiled_amp": 6.2})  # Cascade Lake
    choice = LC.choose_learner(catch(), "cpu", measure=measure)
    assert (choice.compile, choice.amp, choice.variant) == (False, False, "eager")
    assert "eager 14.7" in choice.reason and "measured now" in choice.reason
    assert measure.calls == [["eager", "eager_amp", "compiled", "compiled_amp"]]
    # The second time costs nothing: the cache answers.
    again = LC.choose_learner(catch(), "cpu", measure=measure)
    assert again.variant == "eager" and "cached in" in again.reason and len(measure.calls) == 1
    assert len(list(private_cache.glob("learner-*.json"))) == 1
    # Another learner shape is another entry.
    LC.choose_learner(catch(batch_size=64), "cpu", measure=measure)
    assert len(measure.calls) == 2


def test_a_complex_variant_must_win_by_the_margin():
    assert LC.pick_fastest({"eager": 10.0, "eager_amp": 10.2, "compiled": 10.25, "compiled_amp": 10.1}) == "eager"
    assert LC.pick_fastest({"eager": 24.7, "eager_amp": 37.0, "compiled": 27.0, "compiled_amp": 41.0}) == "compiled_amp"
    assert LC.pick_fastest({"eager": 10.0, "compiled": 11.0}) == "compiled"


def test_forbidding_bf16_leaves_the_fp32_variants_and_set_values_are_not_measured():
    measure = fake_measure({"eager": 20.0, "compiled": 23.0, "eager_amp": 99.0, "compiled_amp": 99.0})
    choice = LC.choose_learner(catch(amp="off"), "cpu", measure=measure)
    assert measure.calls == [["eager", "compiled"]]
    assert (choice.compile, choice.amp) == (True, False)
    fixed = LC.choose_learner(catch(compile="off", amp="on"), "cpu", measure=measure)
    assert (fixed.compile, fixed.amp, fixed.updates_per_s) == (False, True, {})
    assert len(measure.calls) == 1 and fixed.reason.startswith("set")


def test_apply_choice_replaces_auto_only_and_says_why():
    cfg = catch(compile="auto", amp="off")
    choice = LC.LearnerChoice(compile=True, amp=False, reason="fastest of eager 1.0, compiled 2.0", updates_per_s={})
    new, sources = LC.apply_choice(cfg, {"compile": "default", "amp": "command line"}, choice)
    assert (new.compile, new.amp) == ("on", "off")
    assert sources == {"compile": "auto: fastest of eager 1.0, compiled 2.0", "amp": "command line"}


def test_a_failed_compile_does_not_count_as_compiled():
    def measure(spec):
        return {"eager_updates_per_s": 10.0, "compiled_updates_per_s": 30.0, "compiled_compile_failed": 1.0}

    assert LC.choose_learner(catch(amp="off"), "cpu", measure=measure).variant == "eager"


@pytest.mark.slow
def test_a_real_measurement_of_eager_fp32_and_bf16(private_cache):
    """The real child process, timing the real learner (compile off keeps it short)."""
    choice = LC.choose_learner(catch(compile="off"), "cpu")
    assert set(choice.updates_per_s) == {"eager", "eager_amp"}
    assert all(rate > 0 for rate in choice.updates_per_s.values())
    # The pick follows from the measured rates: AMP only when it leads eager by the margin.
    rates = choice.updates_per_s
    assert choice.variant == ("eager_amp" if rates["eager_amp"] > rates["eager"] * LC.MARGIN else "eager")


def test_each_variant_is_timed_with_its_own_precision_over_the_runs_settings(monkeypatch):
    """Every variant's learner is built with the run's settings and its own compile/amp."""
    from pipeline.learning import learner as learner_module
    from pipeline.learning import learner_speed

    built = {}

    class SpyLearner(learner_module.Learner):
        def __init__(self, num_actions, settings):
            super().__init__(num_actions, settings)
            built[len(built)] = settings

    monkeypatch.setattr(learner_module, "Learner", SpyLearner)
    cfg = catch(compile="off", amp="off", learning_rate=3e-4)
    spec = learner_speed.learner_spec(cfg, "cpu", variants=["eager", "eager_amp"], rounds=1, seconds_per_variant=0.2)
    out = learner_speed._measure_learners(spec)
    assert out["eager_updates_per_s"] > 0 and out["eager_amp_updates_per_s"] > 0
    assert [(s.compile, s.amp) for s in built.values()] == [(False, False), (False, True)]
    assert all(s.learning_rate == 3e-4 for s in built.values())
    with pytest.raises(ValueError, match="unknown learner variant"):
        learner_speed.learner_spec(catch(), "cpu", variants=["renorm"], rounds=1, seconds_per_variant=0.2)


def test_a_changed_learner_is_timed_in_the_same_rounds_with_its_own_settings(monkeypatch):
    """The bench's --learner-set: the variant given is built once more from the changed
    config's settings and timed beside the others under the name CHANGED."""
    from dataclasses import replace

    from pipeline.learning import learner as learner_module
    from pipeline.learning import learner_speed

    built = []

    class SpyLearner(learner_module.Learner):
        def __init__(self, num_actions, settings):
            super().__init__(num_actions, settings)
            built.append(settings)

    monkeypatch.setattr(learner_module, "Learner", SpyLearner)
    cfg = catch(compile="off", amp="off")
    spec = learner_speed.learner_spec(
        cfg, "cpu", variants=["eager"], rounds=2, seconds_per_variant=0.2, changed=("eager", replace(cfg, quantiles=0))
    )
    out = learner_speed._measure_learners(spec)
    assert out["eager_updates_per_s"] > 0 and out[f"{learner_speed.CHANGED}_updates_per_s"] > 0
    assert [(s.quantiles, s.compile, s.amp) for s in built] == [(32, False, False), (0, False, False)]
