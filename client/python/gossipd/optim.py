"""Large-batch optimizers, usable as DistributedOptimizer's inner optimizer.

LARS (You, Gitman, Ginsburg 2017) scales each layer's step by a trust ratio
eta * ||w|| / (||g|| + wd * ||w||), so that no layer's update outgrows its weights when
the batch (and with it the learning rate) grows. LAMB (You et al. 2020) does the same
for Adam's update: ratio ||w|| / ||adam step + wd * w||.

As in both papers' reference setups, biases and normalization parameters (every
tensor of one dimension or less) take neither weight decay nor the trust ratio; pass
exclude=lambda p: False to adapt every tensor.
"""

import torch

__all__ = ["LARS", "LAMB"]


def _one_dimensional(p):
    return p.ndim <= 1


def _trust(numerator, denominator):
    """numerator / denominator where both are positive, else 1 (a zero layer or update)."""
    return torch.where((numerator > 0) & (denominator > 0), numerator / denominator,
                       torch.ones_like(numerator))


class _PerTensor(torch.optim.Optimizer):
    """step(): the closure, then update(p, group) for every tensor with a gradient."""

    def __init__(self, params, defaults, exclude):
        super().__init__(params, defaults)
        self.exclude = exclude

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    self.update(p, group)
        return loss


class LARS(_PerTensor):
    """SGD with momentum and a layer-wise trust ratio:
        g' = g + wd * w
        ratio = eta * ||w|| / (||g|| + wd * ||w||)   (1 for excluded tensors)
        v = momentum * v + lr * ratio * g'
        w = w - v
    """

    def __init__(self, params, lr, momentum=0.9, weight_decay=0.0, eta=0.001, exclude=_one_dimensional):
        if lr <= 0 or not 0 <= momentum < 1 or weight_decay < 0 or eta <= 0:
            raise ValueError(f"LARS: lr {lr} > 0, momentum {momentum} in [0, 1), weight_decay "
                             f"{weight_decay} >= 0 and eta {eta} > 0 are needed")
        super().__init__(params, dict(lr=lr, momentum=momentum, weight_decay=weight_decay, eta=eta), exclude)

    def update(self, p, group):
        g = p.grad
        excluded = self.exclude(p)
        wd = 0.0 if excluded else group["weight_decay"]
        if excluded:
            ratio = torch.ones((), dtype=p.dtype, device=p.device)
        else:
            w_norm = torch.linalg.vector_norm(p)
            ratio = group["eta"] * _trust(w_norm, torch.linalg.vector_norm(g) + wd * w_norm)
        update = g.add(p, alpha=wd) if wd else g.clone()
        update.mul_(ratio * group["lr"])
        state = self.state[p]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = update
        else:
            state["momentum_buffer"].mul_(group["momentum"]).add_(update)
        p.sub_(state["momentum_buffer"])


class LAMB(_PerTensor):
    """Adam's step, rescaled per layer:
        m, v: Adam's moments of g, bias-corrected to m_hat, v_hat
        u = m_hat / (sqrt(v_hat) + eps) + wd * w
        w = w - lr * (||w|| / ||u||) * u     (ratio 1 for excluded tensors)
    """

    def __init__(self, params, lr, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0, exclude=_one_dimensional):
        if lr <= 0 or not all(0 <= b < 1 for b in betas) or eps <= 0 or weight_decay < 0:
            raise ValueError(f"LAMB: lr {lr} > 0, betas {betas} in [0, 1), eps {eps} > 0 and "
                             f"weight_decay {weight_decay} >= 0 are needed")
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay), exclude)

    def update(self, p, group):
        b1, b2 = group["betas"]
        g = p.grad
        state = self.state[p]
        if not state:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(p)
            state["exp_avg_sq"] = torch.zeros_like(p)
        state["step"] += 1
        m, v = state["exp_avg"], state["exp_avg_sq"]
        m.mul_(b1).add_(g, alpha=1 - b1)
        v.mul_(b2).addcmul_(g, g, value=1 - b2)
        m_hat = m / (1 - b1 ** state["step"])
        v_hat = v / (1 - b2 ** state["step"])
        update = m_hat / (v_hat.sqrt() + group["eps"])
        excluded = self.exclude(p)
        if not excluded and group["weight_decay"]:
            update.add_(p, alpha=group["weight_decay"])
        ratio = 1.0 if excluded else _trust(torch.linalg.vector_norm(p), torch.linalg.vector_norm(update))
        p.sub_(update * (group["lr"] * ratio))
