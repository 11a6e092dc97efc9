"""The agreement statistics against hand computations, and the bootstrap interval's coverage
on simulated labels."""

from __future__ import annotations

import math

import numpy as np
import pytest

from spanscore.offline import agreement_stats as stats

ONE = np.ones((1, 1))


def table_of(rows: list[list[int]]) -> np.ndarray:
    return np.array(rows, dtype=np.float64)[None, :, :]


def items_of(table: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(human, judge) class indices of the items a table counts."""
    human, judge = [], []
    for i, row in enumerate(table):
        for j, count in enumerate(row):
            human += [i] * count
            judge += [j] * count
    return np.array(human), np.array(judge)


def test_cohen_kappa_by_hand():
    # n 50, observed agreement 35/50 = 0.7; margins 25/25 (people) and 30/20 (judge):
    # chance agreement (25*30 + 25*20) / 50² = 0.5; κ = (0.7 - 0.5) / (1 - 0.5) = 0.4.
    kappa = stats.kappa(table_of([[20, 5], [10, 15]]), stats.nominal_weights(2))
    assert kappa[0] == pytest.approx(0.4)


def test_quadratic_weighted_kappa_by_hand():
    # Rows 2/2/2, columns 3/2/1, n 6; weights (i-j)²/4. Observed cost: the one item at
    # (2, 0) costs 1. Expected counts are c/3 in every row: costs 0.5 + 1/3 + 7/6 = 2.
    # κw = 1 - 1/2 = 0.5.
    table = table_of([[2, 0, 0], [0, 2, 0], [1, 0, 1]])
    assert stats.quadratic_weights(3)[0].tolist() == [0.0, 0.25, 1.0]
    assert stats.kappa(table, stats.quadratic_weights(3))[0] == pytest.approx(0.5)


def test_kappa_is_undefined_when_both_sides_use_one_class():
    assert math.isnan(stats.kappa(table_of([[0, 0], [0, 9]]), stats.nominal_weights(2))[0])


def test_kappa_perfect_and_chance():
    assert stats.kappa(table_of([[5, 0], [0, 5]]), stats.nominal_weights(2))[0] == pytest.approx(1.0)
    # Every cell equal: agreement is what chance gives.
    assert stats.kappa(table_of([[5, 5], [5, 5]]), stats.nominal_weights(2))[0] == pytest.approx(0.0)


def test_accuracy_and_the_failing_class_by_hand():
    table = table_of([[20, 5], [10, 15]])  # row/column 0 is fail
    assert stats.accuracy(table)[0] == pytest.approx(0.7)
    precision, recall, f1 = stats.precision_recall_f1(table, 0)
    assert precision[0] == pytest.approx(20 / 30)  # of the 30 the judge failed, 20 people failed
    assert recall[0] == pytest.approx(20 / 25)  # of the 25 people failed, the judge failed 20
    assert f1[0] == pytest.approx(2 * 20 / (30 + 25))


def test_precision_is_undefined_when_the_judge_fails_nothing():
    precision, recall, f1 = stats.precision_recall_f1(table_of([[0, 4], [0, 6]]), 0)
    assert math.isnan(precision[0])
    assert recall[0] == 0.0
    assert f1[0] == 0.0


def test_tables_count_items_under_weights():
    human, judge = items_of([[20, 5], [10, 15]])
    assert stats.tables(np.ones((1, human.size)), human, judge, 2)[0].tolist() == [[20, 5], [10, 15]]
    weights = np.zeros((1, human.size))
    weights[0, 0] = 3  # one (fail, fail) item drawn three times
    assert stats.tables(weights, human, judge, 2)[0].tolist() == [[3, 0], [0, 0]]


def test_spearman_by_hand_with_ties():
    # y's ranks: 5→1, 6→2, 7 and 7 → 3.5 each, 8→5. Deviations from the mean rank 3:
    # x: -2 -1 0 1 2; y: -2 -1 0.5 2 0.5. Σdxdy 8, Σdx² 10, Σdy² 9.5: ρ = 8 / √95.
    rho = stats.spearman(np.array([1, 2, 3, 4, 5.0]), np.array([5, 6, 7, 8, 7.0]))
    assert rho(np.ones((1, 5)))[0] == pytest.approx(8 / math.sqrt(95))


def test_spearman_weights_count_as_repeated_items():
    x, y = np.array([0.1, 0.5, 0.5, 0.9]), np.array([0.2, 0.1, 0.7, 0.7])
    weighted = stats.spearman(x, y)(np.array([[3.0, 1.0, 0.0, 2.0]]))[0]
    repeated = stats.spearman(np.repeat(x, [3, 1, 0, 2]), np.repeat(y, [3, 1, 0, 2]))(np.ones((1, 6)))[0]
    assert weighted == pytest.approx(repeated)


def test_spearman_is_undefined_for_a_constant():
    rho = stats.spearman(np.array([1.0, 1.0, 1.0]), np.array([0.1, 0.2, 0.3]))
    assert math.isnan(rho(np.ones((1, 3)))[0])


def test_best_threshold_separates_the_labels():
    human_pass = np.array([False, False, True, True])
    best = stats.best_threshold(human_pass, np.array([0.2, 0.4, 0.6, 0.8]))
    assert best(np.ones((1, 4)))[0] == 0.6  # pass from 0.6 up: κ 1


def test_best_threshold_by_hand_takes_the_lowest_of_equals():
    # People: fail pass fail pass on scores 0.2 0.4 0.6 0.8. κ by cut: 0.2 → 0 (all pass),
    # 0.4 → po 0.75, pe 0.5, κ 0.5; 0.6 → po 0.5, κ 0; 0.8 → po 0.75, pe 0.5, κ 0.5.
    human_pass = np.array([False, True, False, True])
    scores = np.array([0.2, 0.4, 0.6, 0.8])
    kappas = stats.kappa_by_threshold(np.ones((1, 4)), human_pass, scores, scores)[0]
    assert kappas == pytest.approx([0.0, 0.5, 0.0, 0.5])
    assert stats.best_threshold(human_pass, scores)(np.ones((1, 4)))[0] == 0.4


def test_threshold_candidates_are_capped():
    candidates = stats.threshold_candidates(np.linspace(0, 1, 5000))
    assert candidates.size <= stats.MAX_THRESHOLD_CANDIDATES
    assert candidates[0] == 0.0 and candidates[-1] == 1.0


def test_bootstrap_is_seeded_and_resamples_whole_traces():
    # Two traces of two items each: every resample holds whole traces, so the item
    # weights of one trace are always equal.
    clusters = np.array([0, 0, 1, 1])
    chunks = list(stats.Bootstrap(clusters, resamples=300, seed=7).weight_chunks())
    weights = np.concatenate(chunks)
    assert weights.shape == (300, 4)
    assert (weights[:, 0] == weights[:, 1]).all() and (weights[:, 2] == weights[:, 3]).all()
    assert (weights.sum(axis=1) == 4).all()  # as many traces drawn as there are
    again = np.concatenate(list(stats.Bootstrap(clusters, resamples=300, seed=7).weight_chunks()))
    assert (weights == again).all()


def test_estimates_share_resamples_and_give_the_observed_value():
    human, judge = items_of([[20, 5], [10, 15]])
    bootstrap = stats.Bootstrap(np.arange(human.size), resamples=500, seed=1)
    kappa, accuracy = bootstrap.estimates(
        lambda w: stats.kappa(stats.tables(w, human, judge, 2), stats.nominal_weights(2)),
        lambda w: stats.accuracy(stats.tables(w, human, judge, 2)),
    )
    assert kappa.estimate == pytest.approx(0.4)
    assert accuracy.estimate == pytest.approx(0.7)
    assert kappa.low < 0.4 < kappa.high
    assert 0.5 < accuracy.low < 0.7 < accuracy.high < 0.9


# A population of (person, judge) verdicts: fail/fail 0.30, fail/pass 0.10, pass/fail 0.10,
# pass/pass 0.50. Agreement 0.8, chance 0.4·0.4 + 0.6·0.6 = 0.52: true κ (0.8 - 0.52) / 0.48.
POPULATION = np.array([0.30, 0.10, 0.10, 0.50])
TRUE_KAPPA = (0.8 - 0.52) / 0.48


@pytest.mark.parametrize("items_per_trace", [1, 3])
def test_the_interval_covers_the_true_kappa_95_percent_of_the_time(items_per_trace):
    """2,000 simulated label sets of 240 items; a 95% interval must cover the true κ in
    93–97% of them. With three items a trace, items of one trace share a judge error
    pattern (they are drawn from the same cell more often), so only a bootstrap over
    traces, not items, keeps its coverage."""
    rng = np.random.default_rng(2024)
    n_items, simulations = 240, 2000
    traces = n_items // items_per_trace
    covered = 0
    for simulation in range(simulations):
        if items_per_trace == 1:
            cells = rng.choice(4, size=n_items, p=POPULATION)
        else:
            # Each trace picks one cell and keeps it for its items half the time: clustered,
            # yet every item's marginal distribution is still POPULATION.
            shared = rng.choice(4, size=traces, p=POPULATION)
            own = rng.choice(4, size=(traces, items_per_trace), p=POPULATION)
            cells = np.where(rng.random((traces, items_per_trace)) < 0.5, shared[:, None], own).ravel()
        human, judge = cells // 2, cells % 2
        clusters = np.repeat(np.arange(traces), items_per_trace)
        bootstrap = stats.Bootstrap(clusters, resamples=400, seed=simulation)
        estimate = bootstrap.estimate(
            lambda w, h=human, j=judge: stats.kappa(stats.tables(w, h, j, 2), stats.nominal_weights(2))
        )
        covered += estimate.low <= TRUE_KAPPA <= estimate.high
    assert 0.93 <= covered / simulations <= 0.97, covered / simulations
