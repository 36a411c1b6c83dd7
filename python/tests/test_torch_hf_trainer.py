"""remat.torch.apply under Hugging Face's Trainer (which runs on accelerate):
apply on the model, then Trainer(...) and train() as usual. The per-step
losses the Trainer logs and the trained parameters equal plain training's
bit for bit (dropout on: remat replays the RNG), where the plan recomputes
blocks and runs the head and the loss whole; where it computes the loss in
chunks of tokens, within the chunks' rounding."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from torch_models import steady_profiles

import remat.torch as rt

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # the Trainer's own dependency

torch.set_num_threads(1)

SEED = 0
STEPS = 4
BATCH = 4


@pytest.fixture(autouse=True)
def _steady() -> Iterator[None]:
    """Plans solved from steady times (torch_models.steady): which blocks a plan
    reruns, and whether it chunks the loss, does not change with the load."""
    with steady_profiles():
        yield


class Tokens(torch.utils.data.Dataset):
    """A tiny in-memory causal-LM data set: fixed random token ids as both the
    input and the labels."""

    def __init__(self, vocab: int, seq: int, n: int = STEPS * BATCH) -> None:
        g = torch.Generator().manual_seed(1)
        self.ids = torch.randint(0, vocab, (n, seq), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def gpt2(vocab: int) -> Any:
    """A small random-init GPT-2 (dropout on), the same weights at every call."""
    torch.manual_seed(SEED)
    config = transformers.GPT2Config(n_layer=4, n_embd=64, n_head=4, vocab_size=vocab, n_positions=64)
    return transformers.GPT2LMHeadModel(config)


def train(model: Any, data: Tokens, out: Path, **arguments: Any) -> list[float]:
    """STEPS steps of HF's Trainer on the CPU; the losses it logged, one a step."""
    args = transformers.TrainingArguments(
        **arguments,
        output_dir=str(out),
        max_steps=STEPS,
        per_device_train_batch_size=BATCH,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        seed=SEED,
        data_seed=SEED,
        dataloader_num_workers=0,
        disable_tqdm=True,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=data)
    trainer.train()
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    assert len(losses) == STEPS
    return losses


def recomputed(plan: rt.AppliedPlan) -> list[int]:
    """The blocks the plan's schedule runs more than once: not recorded in the
    first forward (rerun before their backward), or recorded under a
    selective-saving option (rerun at their backward)."""
    assert plan.schedule is not None
    L = len(plan.modules)
    forwards: dict[int, int] = {}
    rerun = set()
    for kind, l, option in plan.schedule.operations_with_options:
        if kind != "B" and l <= L:
            forwards[l] = forwards.get(l, 0) + 1
            if option:
                rerun.add(l)
    return sorted(rerun | {l for l, n in forwards.items() if n > 1})


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[float], list[torch.Tensor]]:
    model = gpt2(500)
    losses = train(model, Tokens(500, 32), tmp_path_factory.mktemp("plain"))
    return losses, [p.detach().clone() for p in model.parameters()]


@pytest.mark.parametrize(
    ("memory", "options"),
    [("35%", {}), ("45%", {"policies": None})],
    ids=["selective-saving", "whole-blocks"],
)
def test_trainer_with_remat_trains_bit_identically(
    plain: tuple[list[float], list[torch.Tensor]], tmp_path: Path, memory: str, options: dict[str, Any]
) -> None:
    model = gpt2(500)
    # Before Trainer(...): the Trainer (accelerate) then trains the model as it is.
    plan = rt.apply(model, memory=memory, **options)
    losses = train(model, Tokens(500, 32), tmp_path)
    # Storing everything does not fit: blocks are rerun (under a recording
    # option at their backward, or whole before it).
    assert recomputed(plan), plan.explain()
    if options:  # no recording options: some block is not recorded in the first forward
        assert any(k in ("F_ck", "F_none") for k, _ in plan.schedule.operations), plan.explain()  # type: ignore[union-attr]
    assert plan.loss_chunks == 1, plan.explain()  # the head and the loss whole
    assert plan.where == "transformer.h" and len(plan.modules) == 4
    plain_losses, plain_params = plain
    assert losses == plain_losses
    params = list(model.parameters())
    assert len(params) == len(plain_params)
    for p, q in zip(params, plain_params):
        assert torch.equal(p, q)
    plan.remove()
    assert not any(hasattr(m.__dict__.get("forward"), "__wrapped__") for m in model.modules())


# transformers 5.x renamed TrainingArguments(gradient_checkpointing=) to
# activation_checkpointing= (the old name a deprecated alias until v6).
CHECKPOINTING = [
    f.name
    for f in dataclasses.fields(transformers.TrainingArguments)
    if f.name in ("gradient_checkpointing", "activation_checkpointing")
]


@pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated:FutureWarning")
@pytest.mark.parametrize("argument", CHECKPOINTING)
def test_trainer_gradient_checkpointing_is_taken_over(
    plain: tuple[list[float], list[torch.Tensor]], tmp_path: Path, argument: str
) -> None:
    """TrainingArguments(gradient_checkpointing=True) turns HF's checkpointing
    on when training starts, inside remat's schedule: remat turns it off with a
    warning, and training is plain training's, bit for bit."""
    model = gpt2(500)
    plan = rt.apply(model, memory="35%")
    with pytest.warns(UserWarning, match="gradient checkpointing is on"):
        losses = train(model, Tokens(500, 32), tmp_path, **{argument: True})
    assert recomputed(plan), plan.explain()
    plain_losses, plain_params = plain
    assert losses == plain_losses
    for p, q in zip(model.parameters(), plain_params):
        assert torch.equal(p, q)
    plan.remove()
    assert model.transformer.gradient_checkpointing  # as the Trainer set it


def test_trainer_with_remat_chunking_the_loss(tmp_path: Path) -> None:
    """A vocabulary large enough that the whole logits do not fit: the plan
    computes the loss in chunks of tokens (chunked_loss=True, the default).
    The Trainer's loss (num_items_in_batch included) is the model's within
    the chunks' rounding."""
    data = Tokens(8000, 64)
    reference = gpt2(8000)
    plain_losses = train(reference, data, tmp_path / "plain")
    model = gpt2(8000)
    plan = rt.apply(model, memory="60%")
    losses = train(model, data, tmp_path / "remat")
    assert plan.loss_chunks is not None and plan.loss_chunks > 1, plan.explain()
    assert losses == pytest.approx(plain_losses, rel=1e-6)
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)
