import numpy as np
import pytest

from jaxtom.household.evaluate_assist import markdown, paired_margin, speedup_row, speedups


def test_speedups_excludes_failed_pairs():
    t_h = np.array([[100, 100, 100], [50, 200, 60]])
    t_c = np.array([[50, 100, 200], [50, 40, 30]])
    per, failed, failed_alone = speedups(t_h, t_c, budget=200)
    assert per[0] == pytest.approx((1.0 + 0.0) / 2)
    assert per[1] == pytest.approx((0.0 + 1.0) / 2)
    assert (failed, failed_alone) == (1, 1)
    per, _, _ = speedups([[200]], [[10]], 200)
    assert np.isnan(per[0])


def test_row_and_margin():
    a = speedup_row("oracle", [[100] * 3] * 4, [[50] * 3] * 4, 200)
    b = speedup_row("alone", [[100] * 3] * 4, [[100] * 3] * 4, 200, tflops=1.5)
    assert a["speedup"] == pytest.approx(100.0) and a["speedup_se"] == 0
    assert paired_margin(a, b) == pytest.approx((100.0, 0.0))
    text = markdown([a, b])
    assert "| oracle | 100.0 ± 0.0 | N/A |" in text and "| 1.5 |" in text
