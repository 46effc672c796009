"""one_hot against hand-written encodings (DI-engine 0.5.3 ``ding.torch_utils.one_hot`` semantics)."""

from __future__ import annotations

import pytest
import torch

from zoo.rl_utils import one_hot


def test_hand_cases_and_num_first():
    expected = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    out = one_hot(torch.tensor([2, 0]), 3)
    assert out.dtype == torch.float32 and torch.equal(out, expected)
    index = torch.tensor([[2, 0], [1, 1]])
    last = one_hot(index, 3)
    assert last.shape == (2, 2, 3) and torch.equal(last[1, 0], torch.tensor([0.0, 1.0, 0.0]))
    first = one_hot(index, 3, num_first=True)
    assert first.shape == (3, 2, 2)
    assert torch.equal(first[2], torch.tensor([[1.0, 0.0], [0.0, 0.0]]))  # class 2 is at (0, 0) only


def test_minus_one_encodes_as_all_zeros():
    # DI-engine pads with -1 (e.g. a missing entity's action) and encodes it as an all-zero row.
    out = one_hot(torch.tensor([1, -1, 0, -1]), 3)
    assert torch.equal(out, torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]))
    first = one_hot(torch.tensor([[-1, 2]]), 3, num_first=True)
    assert torch.equal(first, torch.tensor([[[0.0, 0.0]], [[0.0, 0.0]], [[0.0, 1.0]]]))
    assert torch.equal(one_hot(torch.full((2,), -1, dtype=torch.int32), 2), torch.zeros(2, 2))


@pytest.mark.parametrize("index", [torch.tensor([-2, 0]), torch.tensor([0, 3]), torch.tensor([0.0, 1.0])])
def test_out_of_range_and_float_indices_are_rejected(index):
    with pytest.raises(ValueError, match="index"):
        one_hot(index, 3)
