"""collapse_onset: the step from which a layer has stayed collapsed, on synthetic histories and a real run."""

from __future__ import annotations

import numpy as np
import torch
from test_monitor import LAYER, tiny_gpt2, tokens

from analysis import monitor
from analysis.measures.addressing import VERDICTS
from analysis.measures.collapse_onset import CRITERIA, collapse_onset
from analysis.traces.run_log import follow_run

STEPS = np.arange(0, 600, 50)  # 0, 50, …, 550


def history(**series: list[float]) -> dict:
    return {"layers": {"m": {name: (STEPS[: len(v)], np.array(v, dtype=float)) for name, v in series.items()}}}


def healthy(count: int = len(STEPS)) -> dict[str, list[float]]:
    return {
        "write_spread_voxels": [2.0] * count,
        "sigma_voxels": [0.8] * count,
        "boundary_fraction": [0.1] * count,
        "gate_scale": [0.3] * count,
    }


def test_a_collapse_from_step_300_on_begins_at_300():
    series = healthy()
    series["write_spread_voxels"] = [2.0, 1.5, 1.2, 0.9, 0.7, 0.6, 0.3, 0.2, 0.1, 0.1, 0.05, 0.05]  # < 0.5 from 300
    assert collapse_onset(history(**series)) == {
        "m": {"step": 300, "criterion": "coordinate collapse", "onsets": {"coordinate collapse": 300}}
    }


def test_a_dip_that_recovered_is_no_collapse_and_only_the_last_run_counts():
    series = healthy()
    series["sigma_voxels"] = [0.8, 0.2, 0.1, 0.1, 0.6, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8, 0.8]  # narrow, then recovered
    assert collapse_onset(history(**series)) == {"m": None}
    series["sigma_voxels"] = [0.8, 0.2, 0.1, 0.1, 0.6, 0.8, 0.8, 0.8, 0.8, 0.1, 0.1, 0.1]  # and narrow again
    assert collapse_onset(history(**series))["m"]["step"] == 450


def test_two_criteria_name_the_earliest_and_both_onsets():
    series = healthy()
    series["boundary_fraction"] = [0.1] * 4 + [0.7] * 8  # from 200
    series["sigma_voxels"] = [0.8] * 7 + [0.1] * 5  # from 350
    assert collapse_onset(history(**series))["m"] == {
        "step": 200,
        "criterion": "boundary saturation",
        "onsets": {"sigma collapse": 350, "boundary saturation": 200},
    }
    series["sigma_voxels"] = [0.8] * 4 + [0.1] * 8  # both from 200: the verdicts' order decides
    assert collapse_onset(history(**series))["m"]["criterion"] == "sigma collapse"


def test_collapsed_from_the_first_record_and_missing_measures():
    series = {"gate_scale": [1e-4] * 5}  # the only measure there: dead from the start
    assert collapse_onset(history(**series))["m"]["step"] == 0
    assert collapse_onset({"layers": {"m": {}}}) == {"m": None}
    unsorted = {"layers": {"m": {"sigma_voxels": (np.array([100, 0, 50]), np.array([0.1, 0.9, 0.1]))}}}
    assert collapse_onset(unsorted)["m"]["step"] == 50


def test_the_criteria_are_the_verdicts_in_their_order():
    assert list(CRITERIA) == [verdict for verdict in VERDICTS if verdict in CRITERIA]


def test_a_real_run_pushed_into_coordinate_collapse_at_step_30(tmp_path):
    model = tiny_gpt2()
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-3)
    head = model.transformer.h[1].memory.coord_head
    with monitor(model, tmp_path, every=5, snapshot_every=None, probe={"input_ids": tokens(4, 9)}) as mon:
        for step in range(50):
            if step == 30:  # every write to the centre from now on: the coordinate head outputs 0
                with torch.no_grad():
                    head.weight.zero_(), head.bias.zero_()
                head.requires_grad_(False)
            ids = tokens(4, 100 + step)
            model(input_ids=ids, labels=ids).loss.backward()
            optimiser.step()
            optimiser.zero_grad()
            mon.step(step)
    found = collapse_onset(follow_run(tmp_path).history())
    assert found[LAYER]["step"] == 30 and found[LAYER]["criterion"] == "coordinate collapse"
