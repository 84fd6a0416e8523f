import pytest
import torch

from minipar.course.verify import ProofError, check_close, check_equal, max_abs_diff, verdict


def test_verdict_hides_the_rounding_value_and_raises_when_false():
    assert verdict("x", 3.0e-13, 1e-12, "float64") == "x: max|Δ| < 1e-12 ✓ (float64)"
    with pytest.raises(ProofError, match=r"x: max\|Δ\| = 0.002 is not below the bound 1e-12.*check 1/m"):
        verdict("x", 2e-3, 1e-12, hint="check 1/m")
    with pytest.raises(ProofError):
        verdict("nan", float("nan"), 1.0)


def test_max_abs_diff_over_structures():
    a = {"w": torch.ones(2, 2), "b": [torch.zeros(3), torch.ones(1)]}
    b = {"w": torch.ones(2, 2) + 0.5, "b": [torch.zeros(3), torch.ones(1)]}
    assert max_abs_diff(a, b) == 0.5
    with pytest.raises(ProofError, match="different keys"):
        max_abs_diff({"w": torch.ones(1)}, {"v": torch.ones(1)})
    with pytest.raises(ProofError, match="different shapes"):
        max_abs_diff(torch.ones(2), torch.ones(3))


def test_check_close_and_equal_print(capsys):
    check_close("p", torch.ones(3, dtype=torch.float64), torch.ones(3, dtype=torch.float64), 1e-12)
    check_equal("bytes", 12, 12)
    assert capsys.readouterr().out == "p: max|Δ| < 1e-12 ✓\nbytes: equal ✓\n"
    with pytest.raises(ProofError):
        check_equal("bytes", 12, 13)
