"""LayerNorm backward with the unbiased variance (÷(D−1)): wrong grad_x."""

from exercises.solutions.ex00_single_device import *  # noqa: F401,F403


def layer_norm_backward(grad_out, x, weight, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    rstd = (x.var(-1, unbiased=True, keepdim=True) + eps).rsqrt()
    xhat = (x - mean) * rstd
    g = grad_out * weight
    grad_x = rstd * (g - g.mean(-1, keepdim=True) - xhat * (g * xhat).mean(-1, keepdim=True))
    lead = tuple(range(x.dim() - 1))
    return grad_x, (grad_out * xhat).sum(lead), grad_out.sum(lead)
