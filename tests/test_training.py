"""selfattn.training: the learning-rate schedule train_language_model uses; the old import path."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from selfattn.language_model import LMConfig, TinyLM
from selfattn.training import learning_rate_schedule, train_language_model


def test_schedule_shape_values() -> None:
    f = learning_rate_schedule(100, warmup=10)
    assert f.shape == (100,)
    np.testing.assert_allclose(f[:10], np.arange(1, 11) / 10)  # linear warm-up to 1
    assert np.all(np.diff(f[10:]) <= 1e-15)  # then never increases
    assert math.isclose(f[10], 1.0) and f[-1] > 0.1 and math.isclose(f[-1], 0.1, abs_tol=1e-3)
    assert learning_rate_schedule(40).tolist()[:2] == [0.5, 1.0]  # default warmup = 40 // 20


def test_schedule_is_what_training_uses(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[float] = []
    original = torch.optim.AdamW.step

    def spy(self, *args, **kwargs):  # record the lr of every step
        seen.append(self.param_groups[0]["lr"])
        return original(self, *args, **kwargs)

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    model = TinyLM(LMConfig(vocab_size=5, seq_len=4, d_model=8, num_heads=2, num_layers=1))
    tokens = np.arange(50) % 5
    train_language_model(model, tokens, steps=12, batch_size=2, lr=0.5, warmup=3)
    np.testing.assert_allclose(seen, 0.5 * learning_rate_schedule(12, warmup=3))


def test_schedule_errors() -> None:
    with pytest.raises(ValueError, match="warmup"):
        learning_rate_schedule(10, warmup=-1)
    with pytest.raises((TypeError, ValueError), match="steps"):
        learning_rate_schedule(0)


def test_still_importable_from_language_model() -> None:
    """Chapters and readers' code import the training loop from where it was before."""
    from selfattn import language_model, training
    from selfattn.language_model import train_language_model as old

    assert old is training.train_language_model
    assert language_model.learning_rate_schedule is training.learning_rate_schedule
    with pytest.raises(AttributeError, match="no attribute 'train_model'"):
        language_model.train_model  # noqa: B018


def test_callback_sees_every_recorded_step_and_changes_nothing() -> None:
    """The callback runs at step 0 and with every history entry, on the model as it is
    then; measuring the model there (in eval mode) leaves the training run unchanged."""
    tokens = np.random.default_rng(0).integers(0, 7, size=400)
    cfg = LMConfig(vocab_size=7, seq_len=8, d_model=16, num_heads=2, num_layers=1, dropout=0.1)
    probe = torch.as_tensor(tokens[:16].reshape(2, 8))

    def run(callback):
        torch.manual_seed(0)
        model = TinyLM(cfg)
        history = train_language_model(model, tokens, steps=12, batch_size=4, eval_every=5,
                                       seed=3, callback=callback)
        return model, history

    seen: list[tuple[int, float]] = []

    def measure(step, model):
        model.eval()
        with torch.no_grad():
            seen.append((step, model(probe).abs().sum().item()))

    model, history = run(measure)
    assert [s for s, _ in seen] == [r["step"] for r in history] == [0, 5, 10, 12]
    _, plain = run(None)
    assert [r["train_loss"] for r in history] == [r["train_loss"] for r in plain]
    with torch.no_grad():
        assert seen[-1][1] == model.eval()(probe).abs().sum().item()  # the final model
    assert len({v for _, v in seen}) == 4  # it changed between the calls
