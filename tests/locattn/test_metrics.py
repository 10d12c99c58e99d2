"""Metrics on tiny hand-computed cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from locattn import metrics as M

EOS, PAD = 2, 0


def test_seq_acc_cuts_at_first_eos_and_needs_eos():
    gold = torch.tensor([[5, 6, 7, EOS], [5, 6, EOS, PAD], [5, EOS, PAD, PAD], [8, 9, EOS, PAD]])
    pred = torch.tensor(
        [
            [5, 6, 7, EOS, 9],  # right, junk after eos ignored
            [5, 6, 7, EOS, PAD],  # one token too many
            [5, 5, 5, 5, 5],  # never stops
            [8, 9, EOS, 4, 4],  # right
        ]
    )
    assert M.seq_correct(pred, gold, EOS).tolist() == [True, False, False, True]
    assert M.seq_acc(pred, gold, EOS) == pytest.approx(0.5)


def test_seq_acc_prediction_shorter_than_gold_tensor_and_lists():
    gold = [[5, 6, 7, EOS]]
    assert M.seq_acc([[5, 6, EOS]], gold, EOS) == 0.0
    assert M.seq_acc([[5, 6, 7]], gold, EOS) == 0.0  # no eos emitted
    assert M.seq_acc(np.array([[5, 6, 7, EOS]]), np.array(gold), EOS) == 1.0


def test_seq_acc_be_forgives_early_stop_only():
    gold = torch.tensor([[5, 6, 7, 8, EOS]] * 5)
    pred = torch.tensor(
        [
            [5, 6, EOS, PAD, PAD, PAD],  # stops early, prefix right -> BE correct
            [5, 9, EOS, PAD, PAD, PAD],  # wrong token before eos
            [5, 6, 7, 8, EOS, PAD],  # exact
            [5, 6, 7, 8, 8, EOS],  # runs past the gold length
            [EOS, PAD, PAD, PAD, PAD, PAD],  # immediate eos: empty prefix
        ]
    )
    assert M.seq_correct_be(pred, gold, EOS).tolist() == [True, False, True, False, True]
    assert M.seq_acc_be(pred, gold, EOS) == pytest.approx(0.6)
    assert M.seq_acc(pred, gold, EOS) == pytest.approx(0.2)


def test_pad_id_ends_sequences_without_eos():
    # Row 0 stopped at a per-row cap of 2 and was padded: no eos, so seqAcc is wrong,
    # and edit distance sees only the 2 real tokens.
    gold = torch.tensor([[5, 6, 7, EOS]])
    pred = torch.tensor([[5, 6, PAD, PAD]])
    assert M.seq_acc(pred, gold, EOS, pad_id=PAD) == 0.0
    assert M.seq_acc_be(pred, gold, EOS, pad_id=PAD) == 1.0
    assert M.edit_distance(pred, gold, EOS, pad_id=PAD) == 1.0


def test_levenshtein_hand_cases():
    assert M.levenshtein([1, 2, 3], [1, 2, 3]) == 0
    assert M.levenshtein([1, 2, 3], [1, 3]) == 1
    assert M.levenshtein([], [4, 4]) == 2
    assert M.levenshtein([1, 2, 3, 4], [2, 1, 3, 5]) == 3  # "kitten"-style: swap costs 2, +1 subst


def _levenshtein_dp(a, b):
    """The textbook dynamic programme, as an independent check of the library's C++ one."""
    prev = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        cur = [i]
        for j, y in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (x != y)))
        prev = cur
    return prev[-1]


def test_levenshtein_equals_the_dynamic_programme_on_random_token_lists():
    rng = np.random.default_rng(0)
    for _ in range(300):
        a = rng.integers(0, 6, rng.integers(0, 25)).tolist()
        b = rng.integers(0, 6, rng.integers(0, 25)).tolist()
        assert M.levenshtein(a, b) == _levenshtein_dp(a, b), (a, b)
    big = rng.integers(0, 300, 120).tolist()  # token ids beyond one byte
    assert M.levenshtein(big, big[5:] + [7]) == _levenshtein_dp(big, big[5:] + [7])


def test_edit_distance_mean_over_batch():
    gold = torch.tensor([[5, 6, 7, EOS], [5, 6, EOS, PAD]])
    pred = torch.tensor([[5, 6, 7, EOS, PAD], [9, 9, 9, 9, EOS]])
    # row 0: 0; row 1: "9 9 9 9" vs "5 6" -> 2 substitutions + 2 insertions = 4
    assert M.edit_distance(pred, gold, EOS) == pytest.approx(2.0)


def test_attn_loss_hand_computed_with_offset():
    # One example, 3 steps, attention axis L = 4 = [START, s0, s1, END] (source_offset 1).
    w = torch.tensor(
        [
            [
                [0.0, 1.0, 0.0, 0.0],  # expected index 0
                [0.0, 0.5, 0.5, 0.0],  # expected 0.5
                [0.0, 0.0, 0.0, 1.0],  # END -> index 2
            ]
        ]
    )
    gold = torch.tensor([[0, 1, -1]])  # third step has no gold
    # errors: 0, -0.5 -> MSE = 0.125
    assert M.attn_loss(w, gold, source_offset=1) == pytest.approx(0.125)
    # without the offset the indices shift by one: expected 1, 1.5 -> errors 1, 0.5
    assert M.attn_loss(w, gold, source_offset=0) == pytest.approx((1 + 0.25) / 2)
    # lengths restrict to the first step only
    assert M.attn_loss(w, gold, source_offset=1, lengths=[1]) == pytest.approx(0.0)
    assert math.isnan(M.attn_loss(w, gold, source_offset=1, lengths=[0]))


def test_attn_loss_pools_steps_and_handles_shorter_gold():
    w = torch.zeros(2, 3, 2)
    w[:, :, 1] = 1.0  # always attends index 1
    gold = torch.tensor([[1, 1], [0, -1]])  # T'=2 < T=3
    # scored: (0,0) err 0, (0,1) err 0, (1,0) err 1 -> 1/3
    assert M.attn_loss(w, gold) == pytest.approx(1 / 3)


def test_raffel_accuracy_threshold_is_strict():
    y = torch.tensor([0.5, 0.5, 0.5, 0.5])
    y_hat = torch.tensor([0.5, 0.539, 0.541, 0.46])
    assert M.raffel_accuracy(y_hat, y) == pytest.approx(0.75)
    assert M.raffel_accuracy(np.array([0.0]), np.array([0.0399])) == 1.0
    assert M.raffel_accuracy(np.array([0.0]), np.array([0.0401])) == 0.0


def test_epochs_to_100():
    assert M.epochs_to_100([0.2, 0.9, 1.0, 1.0]) == 3
    assert M.epochs_to_100([0.2, 0.999]) is None
    assert M.epochs_to_100([1.0]) == 1
    assert M.epochs_to_100([]) is None


def test_accuracy_by_length():
    correct = torch.tensor([True, False, True, True, False])
    lengths = torch.tensor([3, 3, 5, 5, 7])
    assert M.accuracy_by_length(correct, lengths) == {3: 0.5, 5: 1.0, 7: 0.0}


def test_mismatched_batch_sizes_are_rejected():
    with pytest.raises(ValueError, match="rows"):
        M.seq_acc(torch.zeros(2, 3, dtype=torch.long), torch.zeros(3, 3, dtype=torch.long), EOS)
    with pytest.raises(ValueError, match="values"):
        M.raffel_accuracy([0.1, 0.2], [0.1])
